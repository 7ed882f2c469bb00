// The fixture of the round-training tests: the real coordinator, store,
// blob directory and round driver in one process; agents are played by the
// test, which makes their deltas itself (no libtorch), so that it can send
// exactly the honest, the malformed and the poisoned ones.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>

#include "apps/registry.h"
#include "common/crypto.h"
#include "coordinator/coordinator.h"
#include "protocol/signing.h"
#include "rounds/training_spec.h"
#include "rounds/weights.h"

namespace claw::testing_rounds {

using nlohmann::json;
using rounds::Weights;

inline const UserRecord kAlice{"alice", "researcher", "", Time{}};

class Sink final : public SessionSink {
 public:
  void Send(const v1::CoordinatorMessage& msg) override { sent.push_back(msg); }
  void Close(const Status& why) override { closed = why; }
  std::vector<v1::Assignment> Take() {
    std::vector<v1::Assignment> out;
    for (const auto& m : sent) out.insert(out.end(), m.assignments().begin(), m.assignments().end());
    sent.clear();
    return out;
  }
  std::vector<v1::CoordinatorMessage> sent;
  std::optional<Status> closed;
};

inline Weights Model(float a, float b) {
  return {{"fc.bias", {2}, {a, b}}, {"fc.weight", {2, 2}, {a, b, -a, -b}}};
}

class RoundTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("claw-training-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    blobs_ = std::make_unique<BlobDir>(dir_.string());
    ASSERT_TRUE(blobs_->Init().ok());
    store_ = NewMemoryStore();
    Start();
  }
  void TearDown() override {
    coordinator_.reset();
    std::filesystem::remove_all(dir_);
  }
  // (Re)starts the coordinator on the same store and blobs: a restart.
  void Start() {
    coordinator_.reset();
    CoordinatorOptions options;
    options.signing_key = coordinator_key_.secret_key;
    options.blobs = blobs_.get();
    auto c = Coordinator::Create(store_.get(), &apps_, &clock_, options, NullLogger());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    coordinator_ = std::move(c).value();
  }
  std::string Upload(const std::string& bytes) {
    auto h = blobs_->Put(bytes);
    EXPECT_TRUE(h.ok());
    EXPECT_TRUE(coordinator_->BlobUploaded(*h, kAlice).ok());
    return *h;
  }
  // `apps`: what the agent says it runs (empty: anything).
  AgentId Connect(Sink* sink, uint32_t want = 4, std::vector<std::string> apps = {}) {
    auto tokens = coordinator_->CreateEnrollTokens(1, std::chrono::hours(1));
    KeyPair key = GenerateSigningKey();
    v1::EnrollRequest req;
    req.set_token((*tokens)[0]);
    req.set_public_key(key.public_key);
    auto enrolled = coordinator_->Enroll(req);
    EXPECT_TRUE(enrolled.ok()) << enrolled.status().ToString();
    return Reconnect(sink, enrolled->agent_id(), key, want, std::move(apps));
  }
  AgentId Reconnect(Sink* sink, const AgentId& id, const KeyPair& key, uint32_t want = 4,
                    std::vector<std::string> apps = {}) {
    v1::Hello hello;
    for (const std::string& a : apps) hello.mutable_device()->add_apps(a);
    hello.set_agent_id(id);
    hello.set_unix_ms(clock_.Now().unix_ms());
    hello.set_signature(Sign("claw-session-v1|" + id + "|" + std::to_string(hello.unix_ms()),
                             key.secret_key));
    auto opened = coordinator_->OpenSession(hello, sink);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    keys_[sink] = {id, key};
    v1::AgentMessage more;
    more.set_want(want);
    coordinator_->OnAgentMessage(sink, more);
    return id;
  }
  // Reports a train task's delta (put in the coordinator's blobs, as an
  // agent's upload would).
  void ReportDelta(Sink* sink, const v1::Assignment& a, const Weights& delta, double samples,
                   rounds::Codec codec = rounds::Codec::kF32) {
    json p = json::parse(a.params());
    std::string bytes = tensors::WriteSafetensors(rounds::Encode(delta, codec));
    auto h = blobs_->Put(bytes);
    ASSERT_TRUE(h.ok());
    json out = {{"kind", "train"},
                {"round", p["round"]},
                {"task", p["task"]},
                {"delta", *h},
                {"samples", samples},
                {"train_loss", 0.5},
                {"eval", {{"loss_sum", 10.0}, {"correct", 7}, {"count", 10}}},
                {"files", json::array({{{"path", "delta.safetensors"}, {"sha256", *h}}})}};
    Report(sink, a.lease_id(), out.dump());
  }
  void Want(Sink* sink, uint32_t n) {
    v1::AgentMessage more;
    more.set_want(n);
    coordinator_->OnAgentMessage(sink, more);
  }
  void Report(Sink* sink, LeaseId lease, const std::string& output) {
    v1::AgentMessage m;
    auto* r = m.add_results();
    r->set_lease_id(lease);
    r->set_output(output);
    r->set_runtime_us(1000);
    SignReports(keys_[sink].first, keys_[sink].second.secret_key, &m);
    coordinator_->OnAgentMessage(sink, m);
  }
  json Spec(const std::string& init, int rounds, int workers, const json& extra = json::object()) {
    json dataset;
    for (const char* k : {"train_images", "train_labels", "test_images", "test_labels"}) {
      dataset[k] = Upload(std::string("data of ") + k);
    }
    json params = {{"init", init},     {"dataset", dataset},
                   {"rounds", rounds}, {"workers", workers},
                   {"overprovision", 1}, {"inner", {{"steps", 10}, {"batch", 4}}},
                   {"outer", {{"optimizer", "fedavg"}, {"lr", 1.0}}},
                   {"compression", "fp32"}};
    params.update(extra);
    return {{"app", "fedtrain"}, {"params", params}};
  }
  Weights Read(const std::string& hash) {
    auto bytes = blobs_->Load(hash, 1 << 20);
    EXPECT_TRUE(bytes.ok());
    auto w = rounds::ReadWeights(*bytes);
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return *w;
  }
  std::vector<RoundRecord> Rounds(const JobId& job) { return store_->Rounds(job).value(); }
  // What the sinks were assigned, each with its sink.
  std::vector<std::pair<Sink*, v1::Assignment>> Take(std::vector<Sink*> sinks) {
    std::vector<std::pair<Sink*, v1::Assignment>> out;
    for (Sink* s : sinks) {
      for (auto& a : s->Take()) out.push_back({s, a});
    }
    return out;
  }

  std::filesystem::path dir_;
  std::unique_ptr<BlobDir> blobs_;
  KeyPair coordinator_key_ = GenerateSigningKey();
  std::map<SessionSink*, std::pair<AgentId, KeyPair>> keys_;
  FakeClock clock_;
  AppRegistry apps_ = BuiltinApps();
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> coordinator_;
};

}  // namespace claw::testing_rounds
