// The bodies of the fuzz targets, shared by the libFuzzer programs in this
// folder (clang, `make fuzz`) and by the regression test that replays saved
// inputs in every build (tests/unit/fuzz_regressions_test.cc).
//
// Each builds what it needs afresh for every input (a coordinator on an
// in-memory store with a fake clock), so that an input reproduces alone. A
// broken invariant aborts, which is what the fuzzer reports.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>

#include "apps/registry.h"
#include "common/crypto.h"
#include "coordinator/coordinator.h"
#include "core/job_spec.h"
#include "protocol/signing.h"
#include "rounds/weights.h"
#include "tensors/npy.h"
#include "tensors/npz.h"
#include "tensors/tokens.h"
#include "ledger/note.h"
#include "tensors/safetensors.h"
#include "store/store.h"

namespace claw {

inline void FuzzCheck(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
    std::abort();
  }
}

inline const AppRegistry& FuzzApps() {
  static const AppRegistry apps = BuiltinApps();
  return apps;
}

// Parsing and planning succeed, or fail with a message; an accepted spec's
// canonical form parses again to the same thing.
inline void FuzzJobSpec(std::string_view input) {
  auto planned = ParseAndPlanJob(input, FuzzApps());
  if (!planned.ok()) {
    FuzzCheck(!planned.status().message().empty(), "an error without a message");
    return;
  }
  FuzzCheck(planned->tasks.size() == planned->spec.tasks, "task count differs from the plan");
  FuzzCheck(planned->spec.quorum >= 1 && planned->spec.quorum <= planned->spec.replication,
            "quorum outside 1..replication");
  std::string canonical = planned->spec.ToJson().dump();
  auto again = ParseJobSpec(canonical, FuzzApps());
  FuzzCheck(again.ok(), "a canonical spec does not parse");
  FuzzCheck(again->ToJson().dump() == canonical, "the canonical spec is not stable");
}

// A coordinator with one connected agent and a small job leased to it.
class FuzzNetwork {
 public:
  class Sink final : public SessionSink {
   public:
    void Send(const v1::CoordinatorMessage& m) override {
      for (const auto& a : m.assignments()) leases.push_back(a.lease_id());
    }
    void Close(const Status&) override { closed = true; }
    std::vector<uint64_t> leases;
    bool closed = false;
  };

  FuzzNetwork() {
    store_ = NewMemoryStore();
    CoordinatorOptions options;
    options.signing_key = coordinator_key_.secret_key;
    coordinator_ = std::move(
        Coordinator::Create(store_.get(), &FuzzApps(), &clock_, options, NullLogger()).value());
    auto tokens = coordinator_->CreateEnrollTokens(1, std::chrono::hours(1));
    v1::EnrollRequest req;
    req.set_token((*tokens)[0]);
    req.set_public_key(agent_key_.public_key);
    agent_id_ = coordinator_->Enroll(req).value().agent_id();
    FuzzCheck(coordinator_->OpenSession(Hello(), &sink_).ok(), "the session does not open");
    first_job_ =
        coordinator_->Submit(R"({"app":"noop","tasks":4,"replication":2})", owner_).value();
    v1::AgentMessage want;
    want.set_want(4);
    coordinator_->OnAgentMessage(&sink_, want);
  }
  ~FuzzNetwork() { coordinator_->CloseSession(&sink_); }

  v1::Hello Hello() const {
    v1::Hello h;
    h.set_agent_id(agent_id_);
    h.set_unix_ms(clock_.Now().unix_ms());
    h.set_signature(Sign("claw-session-v1|" + agent_id_ + "|" + std::to_string(h.unix_ms()),
                         agent_key_.secret_key));
    return h;
  }
  Coordinator& coordinator() { return *coordinator_; }
  Sink& sink() { return sink_; }
  const std::string& agent_id() const { return agent_id_; }
  const KeyPair& agent_key() const { return agent_key_; }
  // The first job's owner, and a user who may not see it.
  const UserRecord& owner() const { return owner_; }
  const UserRecord& stranger() const { return stranger_; }
  const std::string& first_job() const { return first_job_; }

 private:
  FakeClock clock_;
  KeyPair coordinator_key_ = GenerateSigningKey();
  KeyPair agent_key_ = GenerateSigningKey();
  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> coordinator_;
  std::string agent_id_;
  Sink sink_;
  UserRecord owner_{"owner", "researcher", "", Time{}};
  UserRecord stranger_{"stranger", "free", "", Time{}};
  std::string first_job_;
};

// The first byte picks how the rest is delivered: as a session message
// (signed properly, so that it reaches the scheduler, or as it is), or as
// the Hello of a second session.
inline void FuzzAgentMessage(std::string_view input) {
  if (input.empty()) return;
  FuzzNetwork net;
  uint8_t mode = static_cast<uint8_t>(input[0]) % 3;
  input.remove_prefix(1);
  if (mode == 2) {
    v1::Hello hello;
    if (!hello.ParseFromArray(input.data(), static_cast<int>(input.size()))) return;
    FuzzNetwork::Sink other;
    auto opened = net.coordinator().OpenSession(hello, &other);
    if (opened.ok()) net.coordinator().CloseSession(&other);
    return;
  }
  v1::AgentMessage msg;
  if (!msg.ParseFromArray(input.data(), static_cast<int>(input.size()))) return;
  if (mode == 0) {
    // Point its reports at leases the agent really holds, half the time.
    auto& leases = net.sink().leases;
    for (int i = 0; i < msg.results_size() && !leases.empty(); ++i) {
      if (msg.results(i).lease_id() % 2 == 0) {
        msg.mutable_results(i)->set_lease_id(leases[msg.results(i).lease_id() / 2 % leases.size()]);
      }
    }
    SignReports(net.agent_id(), net.agent_key().secret_key, &msg);
  }
  uint64_t accepted_before = net.coordinator().Metrics().results_accepted;
  net.coordinator().OnAgentMessage(&net.sink(), msg);
  CoordinatorMetrics m = net.coordinator().Metrics();
  FuzzCheck(m.results_accepted - accepted_before <= static_cast<uint64_t>(msg.results_size()),
            "more results accepted than were sent");
  FuzzCheck(m.results_accepted <= 8, "more results accepted than replicas exist");
  if (net.sink().closed) return;
  auto jobs = net.coordinator().ListJobs(10, LocalUser());
  FuzzCheck(jobs.size() == 1, "the job count changed");
  FuzzCheck(jobs[0].tasks_done() <= jobs[0].tasks_total(), "more tasks done than exist");
}

// Lines: a spec to submit, then job ids to read, watch, fetch and cancel
// ("$": the job just submitted, "^": another user's job, which must stay out
// of reach).
inline void FuzzClientRequests(std::string_view input) {
  FuzzNetwork net;
  const UserRecord& me = net.stranger();
  size_t nl = input.find('\n');
  std::string_view spec = input.substr(0, nl);
  auto submitted = net.coordinator().Submit(spec, me);
  FuzzCheck(submitted.ok() || !submitted.status().message().empty(), "a silent refusal");
  class Watcher final : public JobWatcher {
   public:
    void OnJob(const v1::JobInfo&) override {}
  } watcher;
  while (nl != std::string_view::npos) {
    input.remove_prefix(nl + 1);
    nl = input.find('\n');
    std::string id(input.substr(0, nl));
    if (id == "$") id = submitted.ok() ? *submitted : "";
    if (id == "^") id = net.first_job();
    bool mine = submitted.ok() && id == *submitted;
    FuzzCheck(net.coordinator().GetJob(id, me).ok() == mine, "a job seen by someone else");
    (void)net.coordinator().GetResults(id, me);
    if (net.coordinator().Watch(id, me, &watcher).ok()) net.coordinator().Unwatch(&watcher);
    (void)net.coordinator().Cancel(id, me);
  }
  size_t expected = 1 + (submitted.ok() ? 1 : 0);
  FuzzCheck(net.coordinator().ListJobs(100, LocalUser()).size() == expected,
            "the job count is wrong");
  FuzzCheck(net.coordinator().GetJob(net.first_job(), net.owner())->state() == "running",
            "another user's job was changed");
}

// Any bytes as a safetensors file of a delta (from another machine): it
// parses and decodes, or an error names the problem; what parses writes out
// and parses again to the same tensors.
inline void FuzzSafetensors(std::string_view input) {
  tensors::ParseLimits limits;
  limits.max_elements = 1 << 20;  // bounded memory per input
  auto file = tensors::ParseSafetensors(input, limits);
  if (!file.ok()) {
    FuzzCheck(!file.status().message().empty(), "an error without a message");
    return;
  }
  std::string bytes = tensors::WriteSafetensors(*file);
  auto again = tensors::ParseSafetensors(bytes, limits);
  FuzzCheck(again.ok(), "a file it wrote does not parse");
  FuzzCheck(again->tensors.size() == file->tensors.size(), "tensors lost on the way");
  FuzzCheck(tensors::WriteSafetensors(*again) == bytes, "writing is not stable");
  auto weights = rounds::Decode(*file);
  if (weights.ok()) {
    size_t values = 0;
    for (const auto& t : file->tensors) values += static_cast<size_t>(t.elements());
    FuzzCheck(rounds::ParameterCount(*weights) == values, "decoded values differ in number");
  } else {
    FuzzCheck(!weights.status().message().empty(), "an error without a message");
  }
}

// Any bytes as a .npy file (a user's dataset, parsed on contributors'
// machines): it parses or an error names the problem; what parses has as
// many bytes as its shape and dtype say, its header alone parses the same
// from the file's size, and it writes out and parses again to the same
// array.
inline void FuzzNpy(std::string_view input) {
  tensors::NpyLimits limits;
  limits.max_elements = 1 << 20;
  auto t = tensors::ParseNpy(input, limits);
  if (!t.ok()) {
    FuzzCheck(!t.status().message().empty(), "an error without a message");
    return;
  }
  FuzzCheck(t->data.size() == static_cast<size_t>(t->elements()) * tensors::DTypeSize(t->dtype),
            "data size differs from shape x dtype");
  auto h = tensors::ParseNpyHeader(input, input.size(), limits);
  FuzzCheck(h.ok() && h->shape == t->shape && h->dtype == t->dtype, "the header alone reads otherwise");
  auto bytes = tensors::WriteNpy(*t);
  FuzzCheck(bytes.ok(), "a parsed array does not write");
  auto again = tensors::ParseNpy(*bytes, limits);
  FuzzCheck(again.ok() && again->shape == t->shape && again->dtype == t->dtype &&
                again->data == t->data,
            "a written array reads otherwise");
}

// A .npz archive: read within small limits (an inflated member stops at its
// declared size, which the limit bounds), each member as a .npy file.
inline void FuzzNpz(std::string_view input) {
  tensors::NpzLimits limits;
  limits.max_member_bytes = 1 << 20;
  limits.max_total_bytes = 4 << 20;
  auto members = tensors::ReadNpz(input, limits);
  if (!members.ok()) {
    FuzzCheck(!members.status().message().empty(), "an error without a message");
    return;
  }
  uint64_t total = 0;
  for (const auto& m : *members) {
    FuzzCheck(!m.name.empty() && m.name.find('/') == std::string::npos, "a member name with a path");
    FuzzCheck(m.bytes.size() <= limits.max_member_bytes, "a member over the limit");
    total += m.bytes.size();
    FuzzNpy(m.bytes);
  }
  FuzzCheck(total <= limits.max_total_bytes, "members over the total limit");
}

// Any bytes as a token file (a language model's text, read on contributors'
// machines): it is refused with a message, or its header, its size and
// every token agree, and the tokens write out to the same file.
inline void FuzzTokens(std::string_view input) {
  tensors::TokenLimits limits;
  limits.max_count = 1 << 20;
  auto h = tensors::CheckTokenFile(input, limits);
  if (!h.ok()) {
    FuzzCheck(!h.status().message().empty(), "an error without a message");
    return;
  }
  FuzzCheck(input.size() == tensors::kTokenHeaderBytes + h->count * h->width, "size differs from the header");
  auto alone = tensors::ParseTokenHeader(input.substr(0, tensors::kTokenHeaderBytes), input.size(), limits);
  FuzzCheck(alone.ok() && alone->count == h->count && alone->vocab == h->vocab, "the header alone reads otherwise");
  std::vector<uint32_t> tokens(h->count);
  for (uint64_t i = 0; i < h->count; ++i) {
    tokens[i] = tensors::TokenAt(input, *h, i);
    FuzzCheck(tokens[i] < h->vocab, "a token outside the vocabulary passed");
  }
  auto again = tensors::WriteTokenFile(tokens, h->vocab);
  FuzzCheck(again.ok(), "checked tokens do not write");
  auto back = tensors::CheckTokenFile(*again, limits);
  FuzzCheck(back.ok() && back->count == h->count && back->vocab == h->vocab, "written tokens read otherwise");
  for (uint64_t i = 0; i < h->count; ++i) {
    FuzzCheck(tensors::TokenAt(*again, *back, i) == tokens[i], "a written token reads otherwise");
  }
}

// Any bytes as a signed note (a ledger checkpoint, as `claw ledger verify`
// reads it from a coordinator it does not trust): refused with a message,
// or its text is the note's start, ends in a newline, and as a checkpoint
// reads back to what it says. Verifier keys from the input's first line
// parse or are refused, never crash.
inline void FuzzSignedNote(std::string_view input) {
  static const ledger::NoteVerifier verifier = *ledger::ParseVerifierKey(
      "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW");
  auto text = ledger::OpenNote(input, verifier);
  if (!text.ok()) {
    FuzzCheck(!text.status().message().empty(), "an error without a message");
  } else {
    FuzzCheck(input.substr(0, text->size()) == *text, "the text is not the note's start");
    FuzzCheck(!text->empty() && text->back() == '\n', "a text without its final newline");
  }
  auto cp = ledger::ParseCheckpoint(text.ok() ? std::string_view(*text) : input);
  if (cp.ok()) {
    const std::string again = ledger::FormatCheckpoint(*cp);
    auto back = ledger::ParseCheckpoint(again);
    FuzzCheck(back.ok() && back->origin == cp->origin && back->size == cp->size &&
                  back->root == cp->root,
              "a checkpoint reads back otherwise");
  }
  auto vkey = ledger::ParseVerifierKey(input.substr(0, input.find('\n')));
  if (vkey.ok()) {
    auto formatted = ledger::FormatVerifierKey(vkey->name, vkey->public_key);
    FuzzCheck(formatted.ok() && ledger::ParseVerifierKey(*formatted).ok(),
              "a parsed verifier key does not format back");
  }
}

}  // namespace claw
