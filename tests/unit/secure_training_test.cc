// Secure aggregation in training rounds, through the coordinator: the real
// coordinator and round driver, and each device's real protocol side
// (agent/secagg_device.h) played by the test, which decides who vanishes
// at which step (docs/privacy.md).
#include <array>

#include "agent/secagg_device.h"
#include "rounds/round_app.h"
#include "secagg/ring.h"
#include "tests/unit/round_training.h"

namespace claw {
namespace {

using namespace testing_rounds;  // NOLINT: the fixture's helpers

class SecureTraining : public RoundTraining {
 protected:
  struct Device {
    Sink sink;
    std::unique_ptr<SecAggDevice> secagg;
    int vanish_at = 99;  // stops answering from this protocol step on
    std::vector<std::string> sent_masked;
  };
  void SetUp() override {
    RoundTraining::SetUp();
    for (auto& d : devices_) d.secagg = std::make_unique<SecAggDevice>(blobs_.get());
  }
  json SecureSpec(const std::string& init, int rounds, json extra = json::object()) {
    json base = {{"shards", 4}, {"secure_aggregation", {{"range", 1.0}, {"step_s", 30}}}};
    base.update(extra);
    return Spec(init, rounds, 4, base);
  }
  // Reports a train task as the worker would, through the device's
  // secure aggregation side (which keeps the delta and announces keys).
  void Train(Device& d, const v1::Assignment& a, const Weights& delta) {
    json p = json::parse(a.params());
    std::string bytes = tensors::WriteSafetensors(rounds::Encode(delta, rounds::Codec::kF32));
    auto h = blobs_->Put(bytes);
    ASSERT_TRUE(h.ok());
    json out = {{"kind", "train"}, {"round", p["round"]}, {"task", p["task"]}, {"delta", *h},
                {"samples", 10}, {"train_loss", 0.5},
                {"eval", {{"loss_sum", 10.0}, {"correct", 7}, {"count", 10}}},
                {"files", json::array({{{"path", "delta.safetensors"}, {"sha256", *h}}})},
                {"secagg", p["secagg"]}};
    std::string announced = d.secagg->Begin(out.dump(), clock_.Now()).value();
    json o = json::parse(announced);
    EXPECT_FALSE(o.contains("delta")) << "the delta stays on the device";
    EXPECT_TRUE(o["files"].empty());
    Report(&d.sink, a.lease_id(), announced);
  }
  // Relays the coordinator's messages to the devices and their replies
  // back, stepping the driver, until nothing moves; then lets the clock
  // pass the step's deadline once.
  void Relay(int step_s = 30) {
    for (int pass = 0; pass < 12; ++pass) {
      bool moved = false;
      for (auto& d : devices_) {
        std::vector<v1::CoordinatorMessage> got = std::move(d.sink.sent);
        d.sink.sent.clear();
        v1::AgentMessage up;
        for (const auto& m : got) {
          for (const auto& down : m.secagg()) {
            if (static_cast<int>(down.step()) >= d.vanish_at && down.step() != 0) continue;
            auto reply = d.secagg->Handle(down, clock_.Now());
            if (!reply) continue;
            if (!reply->masked().empty()) d.sent_masked.push_back(reply->masked());
            *up.add_secagg() = *reply;
          }
        }
        if (up.secagg_size() > 0) {
          coordinator_->OnAgentMessage(&d.sink, up);
          moved = true;
        }
      }
      coordinator_->StepTrainings();
      if (!moved) {
        clock_.Advance(std::chrono::seconds(step_s + 1));
        coordinator_->StepTrainings();
      }
    }
  }
  std::vector<Sink*> Sinks() {
    std::vector<Sink*> out;
    for (auto& d : devices_) out.push_back(&d.sink);
    return out;
  }
  Device& Of(Sink* s) {
    for (auto& d : devices_) {
      if (&d.sink == s) return d;
    }
    return devices_[0];
  }
  // One round: each device trains Model(v, v) with v its number + 1 and
  // vanishes at its step; returns the round's record.
  std::vector<RoundRecord> OneRound(const JobId& job, std::map<int, int> vanish) {
    for (size_t i = 0; i < devices_.size(); ++i) {
      devices_[i].vanish_at = vanish.count(static_cast<int>(i)) ? vanish[static_cast<int>(i)] : 99;
    }
    if (!first_) {
      for (Sink* s : Sinks()) Want(s, 1);
    }
    first_ = false;
    auto tasks = Take(Sinks());
    EXPECT_EQ(tasks.size(), 4u);
    for (auto& [sink, a] : tasks) {
      Device& d = Of(sink);
      const int i = static_cast<int>(&d - devices_.data());
      if (d.vanish_at == 0) continue;  // vanished while training
      Train(d, a, Model(0.1f * (i + 1), -0.1f * (i + 1)));
    }
    coordinator_->StepTrainings();
    Relay();
    return Rounds(job);
  }

  std::array<Device, 4> devices_;
  bool first_ = true;
};

TEST_F(SecureTraining, TheCoordinatorGetsTheMeanOfTheDeltasAndNeverOneOfThem) {
  std::string init = Upload(rounds::ModelBytes(Model(1, 2)));
  auto job = coordinator_->Submit(SecureSpec(init, 1).dump(), kAlice);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  coordinator_->StepTrainings();
  for (auto& d : devices_) Connect(&d.sink, 1);
  auto rounds = OneRound(*job, {});
  ASSERT_EQ(rounds.size(), 2u);
  json info = json::parse(rounds[1].info_json);
  ASSERT_TRUE(info.contains("secure_aggregation")) << info.dump();
  EXPECT_EQ(info["secure_aggregation"]["masked"], 4);
  EXPECT_EQ(info["secure_aggregation"]["bits"], secagg::RingBits(4, 127));
  EXPECT_EQ(info["reporters"].size(), 4u);
  // The mean of 0.1, 0.2, 0.3, 0.4 is 0.25, within the quantization's step.
  Weights got = Read(rounds[1].model);
  Weights want = Model(1, 2);
  rounds::AddScaled(&want, Model(0.25f, -0.25f), 1.0f);
  for (size_t k = 0; k < got.size(); ++k) {
    for (size_t j = 0; j < got[k].values.size(); ++j) {
      EXPECT_NEAR(got[k].values[j], want[k].values[j], 1.0 / 127) << got[k].name;
    }
  }
  // What the coordinator received: keys, not deltas, in the outputs; and
  // masked vectors that are not the quantized deltas.
  auto round_job = coordinator_->GetResults(*job + ".r1", kAlice);
  ASSERT_TRUE(round_job.ok());
  const json round_result = json::parse(round_job->second);  // not a temporary: it is iterated
  for (const auto& r : round_result["reports"]) {
    EXPECT_FALSE(r.contains("delta")) << r.dump();
    EXPECT_TRUE(r.contains("secagg"));
  }
  const int bits = info["secure_aggregation"]["bits"];
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_EQ(devices_[i].sent_masked.size(), 1u);
    auto y = secagg::Unpack(devices_[i].sent_masked[0], 6, bits).value();
    int near = 0;  // values within the quantized delta's ±13 of ±0.1·(i+1)·127
    for (uint32_t v : y) near += std::abs(secagg::Signed(v, bits)) <= 60;
    EXPECT_LT(near, 4) << "device " << i << "'s masked vector looks like its delta";
  }
}

TEST_F(SecureTraining, DevicesVanishingAtEachStepLeaveTheExactSumOfTheRest) {
  std::string init = Upload(rounds::ModelBytes(Model(1, 2)));
  // Four devices, k = 3 neighbours each, t = 2.
  auto job = coordinator_->Submit(SecureSpec(init, 3).dump(), kAlice);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  coordinator_->StepTrainings();
  for (auto& d : devices_) Connect(&d.sink, 1);
  // Device 0 vanishes: after announcing its keys (in the roster, nobody
  // holds its shares), after sharing (its masks are rebuilt from its key's
  // shares and taken out), after sending its vector (in the sum, its
  // self-mask rebuilt from the others' shares).
  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE("vanishing at step " + std::to_string(step));
    auto rounds = OneRound(*job, {{0, step}});
    ASSERT_EQ(rounds.size(), static_cast<size_t>(step + 1));
    json info = json::parse(rounds.back().info_json);
    ASSERT_FALSE(info.contains("abandoned")) << info.dump();
    json sa = info["secure_aggregation"];
    std::set<int> summed;
    for (const auto& r : info["reporters"]) summed.insert(r["task"].get<int>());
    // Who was summed: everyone who sent a masked vector.
    EXPECT_EQ(sa["masked"].get<size_t>(), summed.size());
    // The model moved by the mean of exactly their deltas.
    double mean = 0;
    for (const auto& r : info["reporters"]) {
      const std::string agent = r["agent"];
      for (size_t i = 0; i < 4; ++i) {
        if (keys_[&devices_[i].sink].first == agent) mean += 0.1 * (i + 1);
      }
    }
    mean /= static_cast<double>(summed.size());
    Weights before = Read(rounds[rounds.size() - 2].model), after = Read(rounds.back().model);
    EXPECT_NEAR(after[0].values[0] - before[0].values[0], mean, 1.0 / 127) << info.dump();
    bool in_sum = false;
    for (const auto& r : info["reporters"]) in_sum |= r["agent"] == keys_[&devices_[0].sink].first;
    EXPECT_EQ(in_sum, step == 3);
    EXPECT_EQ(sa["unmasked"].get<int>(), 3);
    // The vanished device, back, was told the round is over: it keeps no
    // keys or delta of it.
    EXPECT_EQ(devices_[0].secagg->pending(), 0u);
  }
}

TEST_F(SecureTraining, TooFewSurvivorsAbandonTheRoundAndTheNextStartsFromTheSameModel) {
  std::string init = Upload(rounds::ModelBytes(Model(1, 2)));
  auto job = coordinator_->Submit(
      SecureSpec(init, 2, {{"min_workers", 3},
                           {"privacy", {{"clip_norm", 1.0}, {"noise_multiplier", 1.0}}}})
          .dump(),
      kAlice);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  coordinator_->StepTrainings();
  for (auto& d : devices_) Connect(&d.sink, 1);
  // Two of four vanish after sharing: two vectors, fewer than three.
  auto rounds = OneRound(*job, {{0, 2}, {1, 2}});
  ASSERT_EQ(rounds.size(), 2u);
  json info = json::parse(rounds[1].info_json);
  EXPECT_NE(info.value("abandoned", "").find("fewer than 3"), std::string::npos) << info.dump();
  EXPECT_EQ(rounds[1].model, rounds[0].model) << "the model is unchanged";
  EXPECT_FALSE(info.contains("privacy")) << "nothing released, nothing spent";
  // The next round starts, from the same model.
  for (Sink* s : Sinks()) Want(s, 1);
  auto next = Take(Sinks());
  ASSERT_FALSE(next.empty());
  EXPECT_EQ(json::parse(next[0].second.params())["model"], rounds[0].model);
  EXPECT_EQ(json::parse(next[0].second.params())["round"], 2);
}

TEST_F(SecureTraining, ACancelledTrainingTellsItsDevicesToForgetTheRound) {
  std::string init = Upload(rounds::ModelBytes(Model(1, 2)));
  auto job = coordinator_->Submit(SecureSpec(init, 2).dump(), kAlice);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  coordinator_->StepTrainings();
  for (auto& d : devices_) Connect(&d.sink, 1);
  auto tasks = Take(Sinks());
  ASSERT_EQ(tasks.size(), 4u);
  for (auto& [sink, a] : tasks) Train(Of(sink), a, Model(0.1f, 0.1f));
  coordinator_->StepTrainings();  // the roster goes out: the protocol is under way
  for (auto& d : devices_) {
    ASSERT_FALSE(d.sink.sent.empty());
    ASSERT_EQ(d.sink.sent.back().secagg_size(), 1);
    ASSERT_EQ(d.sink.sent.back().secagg(0).step(), 1u);
    d.sink.sent.clear();
    EXPECT_EQ(d.secagg->pending(), 1u);
  }
  ASSERT_TRUE(coordinator_->Cancel(*job, kAlice).ok());
  coordinator_->StepTrainings();
  for (auto& d : devices_) {
    bool told = false;
    for (const auto& m : d.sink.sent) {
      for (const auto& down : m.secagg()) {
        told |= down.step() == 0 && !down.error().empty();
        d.secagg->Handle(down, clock_.Now());
      }
    }
    EXPECT_TRUE(told) << "every device hears that the round is over";
    EXPECT_EQ(d.secagg->pending(), 0u) << "and forgets its keys and delta";
  }
  // A late reply finds no round.
  v1::AgentMessage late;
  late.add_secagg()->set_step(1);
  coordinator_->OnAgentMessage(&devices_[0].sink, late);
  EXPECT_EQ(Rounds(*job).size(), 1u) << "no round stored";
}

TEST_F(SecureTraining, AModelTooLargeToMaskFailsBeforeAnyRoundTrains) {
  // 14M values: 16.7 MiB a masked vector at 10 bits (4 tasks a round),
  // over the limit.
  Weights big = {{"w", {14'000'000}, std::vector<float>(14'000'000, 0.0f)}};
  std::string init = Upload(rounds::ModelBytes(big));
  auto job = coordinator_->Submit(SecureSpec(init, 2).dump(), kAlice);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  coordinator_->StepTrainings();
  auto end = coordinator_->GetResults(*job, kAlice);
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->first.state(), "failed");
  EXPECT_NE(end->first.error().find("14000000 values at 10 bits for 4 devices) takes 16.7 MiB"),
            std::string::npos)
      << end->first.error();
  EXPECT_TRUE(Rounds(*job).empty()) << "no round stored, none trained";
}

TEST_F(SecureTraining, ADeviceForgetsARoundItHearsNothingOfForItsWait) {
  SecAggDevice& d = *devices_[0].secagg;
  auto h = blobs_->Put(tensors::WriteSafetensors(rounds::Encode(Model(1, 1), rounds::Codec::kF32)));
  ASSERT_TRUE(h.ok());
  json out = {{"kind", "train"}, {"task", 0}, {"delta", *h}, {"files", json::array()},
              {"secagg", {{"range", 1.0}, {"clip", 0.0}, {"wait_s", 100}}}};
  const Time start = clock_.Now();
  ASSERT_TRUE(d.Begin(out.dump(), start).ok());
  out["task"] = 1;
  out["secagg"]["wait_s"] = 1000;
  std::string announced = d.Begin(out.dump(), start).value();
  EXPECT_EQ(d.Deltas().size(), 2u);
  d.Expire(start + std::chrono::seconds(90));
  EXPECT_EQ(d.pending(), 2u);
  // Hearing of a round starts its wait again.
  v1::SecAggDown down;
  down.set_handle(FromHex(json::parse(announced)["secagg"]["handle"].get<std::string>()).value());
  down.set_step(1);  // an empty roster: refused, but heard
  EXPECT_TRUE(d.Handle(down, start + std::chrono::seconds(950)).has_value());
  d.Expire(start + std::chrono::seconds(101));
  EXPECT_EQ(d.pending(), 1u) << "the first round's 100 s passed";
  d.Expire(start + std::chrono::seconds(1900));
  EXPECT_EQ(d.pending(), 1u) << "heard at 950 s";
  d.Expire(start + std::chrono::seconds(1951));
  EXPECT_EQ(d.pending(), 0u);
}

TEST_F(SecureTraining, OnlyAgentsThatMaskTheirDeltasGetASecureRoundsTasks) {
  std::string init = Upload(rounds::ModelBytes(Model(1, 2)));
  auto job = coordinator_->Submit(SecureSpec(init, 1).dump(), kAlice);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  coordinator_->StepTrainings();
  // An older agent (it runs fedround, and would upload its delta in the
  // clear) gets none; one that lists the capability does.
  Connect(&devices_[0].sink, 4, {"fedround", "noop"});
  EXPECT_TRUE(Take({&devices_[0].sink}).empty());
  Connect(&devices_[1].sink, 4, {"fedround", "noop", std::string(rounds::kSecAggCapability)});
  EXPECT_FALSE(Take({&devices_[1].sink}).empty());
}

TEST_F(SecureTraining, SpecsThatCannotBeSecurelyAggregatedAreRefused) {
  std::string init = Upload(rounds::ModelBytes(Model(1, 2)));
  auto refused = [&](json extra) {
    auto r = coordinator_->Submit(SecureSpec(init, 1, extra).dump(), kAlice);
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  EXPECT_NE(refused({{"aggregation", {{"rule", "median"}}}}).find("params.aggregation"), std::string::npos);
  EXPECT_NE(refused({{"spot_check", 0.5}}).find("params.spot_check"), std::string::npos);
  EXPECT_NE(refused({{"min_workers", 1}}).find("params.min_workers"), std::string::npos);
  EXPECT_NE(refused({{"secure_aggregation", "yes"}}).find("params.secure_aggregation"), std::string::npos);
  EXPECT_NE(refused({{"secure_aggregation", {{"k", 3}}}}).find("unknown field"), std::string::npos);
  EXPECT_TRUE(coordinator_->ListJobs(10, kAlice).empty());
}

TEST(SecureRoundStart, DevicesAnnouncingTheSameHandleOrKeysAreLeftOut) {
  std::vector<std::unique_ptr<secagg::Client>> clients;
  std::vector<rounds::SecureRound::Device> devices;
  for (uint32_t i = 0; i < 7; ++i) {
    clients.push_back(std::make_unique<secagg::Client>(i));
    devices.push_back({i, "agent" + std::to_string(i), "handle" + std::to_string(i), clients[i]->Advertise()});
  }
  devices[3].handle = devices[0].handle;  // a copied handle
  devices[4].keys.s_pk = devices[1].keys.s_pk;  // a copied key
  auto r = rounds::SecureRound::Start(secagg::DefaultParams(7, 6, secagg::kLevels, 2), devices,
                                      std::chrono::seconds(10), Time{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::set<uint32_t> kept;
  for (const auto& m : r->server().roster().members) kept.insert(m.id);
  EXPECT_EQ(kept, (std::set<uint32_t>{2, 5, 6})) << "both of each pair are left out";
  std::set<std::string> told;
  for (const auto& s : r->TakeSends()) told.insert(s.agent);
  EXPECT_EQ(told, (std::set<std::string>{"agent2", "agent5", "agent6"}));
}

TEST(SecureRoundStart, AModelWhoseMaskedVectorsCannotTravelIsRefusedSayingBySizes) {
  // 12 bits a value for 16 devices: 10M values take 14.3 MiB, 11M 15.7.
  EXPECT_TRUE(rounds::SecureVectorFits(10'000'000, 16).ok());
  Status st = rounds::SecureVectorFits(11'000'000, 16);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("11000000 values at 12 bits"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("takes 15.7 MiB, over the 15 MiB"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace claw
