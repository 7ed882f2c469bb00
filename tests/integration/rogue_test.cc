// A rogue agent on the real protocol, against a real coordinator and honest
// agents (processes) on loopback. It enrolls properly, then in each session
// misbehaves one way: wrong answers (properly signed), forged or missing
// signatures, replays, reports for tasks it was not given, and floods.
#include <grpcpp/grpcpp.h>

#include <atomic>

#include "claw.grpc.pb.h"
#include "common/crypto.h"
#include "harness.h"
#include "protocol/signing.h"

namespace claw::testing {
namespace {

using std::chrono::seconds;

enum class Misdeed { kWrongAnswers, kForgedSignature, kNoSignature, kReplay, kNotGiven, kFlood };

const char* Name(Misdeed m) {
  switch (m) {
    case Misdeed::kWrongAnswers: return "wrong answers";
    case Misdeed::kForgedSignature: return "forged signature";
    case Misdeed::kNoSignature: return "no signature";
    case Misdeed::kReplay: return "replay";
    case Misdeed::kNotGiven: return "tasks not given";
    case Misdeed::kFlood: return "flood";
  }
  return "?";
}

class RogueAgent {
 public:
  RogueAgent(const std::string& target, std::string token)
      : stub_(v1::AgentService::NewStub(
            grpc::CreateChannel(target, grpc::InsecureChannelCredentials()))),
        token_(std::move(token)) {}

  bool Enroll() {
    v1::EnrollRequest req;
    req.set_token(token_);
    req.set_public_key(key_.public_key);
    req.mutable_device()->set_hostname("rogue");
    req.mutable_device()->set_slots(2);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
    v1::EnrollResponse resp;
    if (!stub_->Enroll(&ctx, req, &resp).ok()) return false;
    id_ = resp.agent_id();
    return true;
  }
  const std::string& id() const { return id_; }

  // A signed hello, saying the agent has `slots` slots.
  v1::AgentMessage Hello(uint32_t slots) const {
    v1::AgentMessage hello;
    v1::Hello* h = hello.mutable_hello();
    h->set_agent_id(id_);
    h->set_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count());
    h->set_signature(Sign("claw-session-v1|" + id_ + "|" + std::to_string(h->unix_ms()),
                          key_.secret_key));
    h->mutable_device()->set_slots(slots);
    return hello;
  }

  // One session of misbehaviour (one batch of work); returns the status the
  // coordinator ended it with (OK or CANCELLED when it put up with it,
  // DEADLINE_EXCEEDED when there was no work).
  grpc::Status Session(Misdeed misdeed) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(1500));
    auto stream = stub_->Session(&ctx);
    stream->Write(Hello(2));
    if (misdeed == Misdeed::kFlood) {
      v1::AgentMessage ping;
      ping.set_heartbeat(true);
      for (int i = 0; i < 2000 && stream->Write(ping); ++i) {
      }
      v1::AgentMessage huge;  // more reports than one message may carry
      for (uint64_t l = 1; l <= 20'000; ++l) huge.add_returned(l);
      SignReports(id_, key_.secret_key, &huge);
      stream->Write(huge);
    } else {
      v1::AgentMessage want;
      want.set_want(4);
      stream->Write(want);
      v1::CoordinatorMessage in;
      while (stream->Read(&in)) {
        if (in.assignments_size() == 0) continue;
        v1::AgentMessage out = Answer(misdeed, in);
        if (!stream->Write(out)) break;
        if (misdeed == Misdeed::kReplay) stream->Write(out);  // the same message again
        break;  // one batch per session: then the next misdeed
      }
    }
    stream->WritesDone();
    v1::CoordinatorMessage drain;
    while (stream->Read(&drain)) {
    }
    return stream->Finish();
  }

 private:
  v1::AgentMessage Answer(Misdeed misdeed, const v1::CoordinatorMessage& in) {
    v1::AgentMessage out;
    for (const auto& a : in.assignments()) {
      auto* r = out.add_results();
      r->set_lease_id(misdeed == Misdeed::kNotGiven ? a.lease_id() + 1'000'000 : a.lease_id());
      // 24 bytes, like a real Monte Carlo answer, but made up.
      std::string made_up = FieldHasher().Add(a.params()).Add(id_).Finish().substr(0, 24);
      r->set_output(made_up);
      r->set_runtime_us(1000);
    }
    if (misdeed == Misdeed::kForgedSignature) {
      SignReports(id_, GenerateSigningKey().secret_key, &out);
    } else if (misdeed != Misdeed::kNoSignature) {
      SignReports(id_, key_.secret_key, &out);
    }
    return out;
  }

  std::unique_ptr<v1::AgentService::Stub> stub_;
  std::string token_;
  KeyPair key_ = GenerateSigningKey();
  std::string id_;

 public:
  // A turncoat on one long session until `stop`: honest (it runs the task
  // itself) for its first `honest_first` answers, long enough to be trusted,
  // then a made-up, properly signed answer on every `lie_every`-th. Returns
  // how many lies it told.
  int Turncoat(int honest_first, int lie_every, const std::atomic<bool>& stop) {
    AppRegistry apps = BuiltinApps();
    int answers = 0, lies = 0;
    while (!stop) {
      grpc::ClientContext ctx;
      auto stream = stub_->Session(&ctx);
      if (!stream->Write(Hello(8))) continue;
      v1::AgentMessage want;
      want.set_want(8);
      stream->Write(want);
      std::thread closer([&] {  // ends the session when the test is done
        while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        ctx.TryCancel();
      });
      v1::CoordinatorMessage in;
      while (stream->Read(&in)) {
        if (in.assignments_size() == 0) continue;
        v1::AgentMessage out;
        for (const auto& a : in.assignments()) {
          auto* r = out.add_results();
          r->set_lease_id(a.lease_id());
          r->set_runtime_us(1000);
          ++answers;
          if (answers > honest_first && answers % lie_every == 0) {
            r->set_output(FieldHasher().Add(a.params()).Add(id_).Finish().substr(0, 24));
            ++lies;
          } else {
            r->set_output(*apps.Find(a.app())->Run(a.params(), {}));
          }
        }
        out.set_want(static_cast<uint32_t>(in.assignments_size()));
        SignReports(id_, key_.secret_key, &out);
        if (!stream->Write(out)) break;
      }
      closer.join();
      stream->Finish();
    }
    return lies;
  }
};

class Rogue : public Network {};

// One agent in five is a rogue that tries everything in turn while a 2-of-2
// job runs: the job ends with the result an honest computation gives, the
// rogue is judged, and honest agents are not.
TEST_F(Rogue, OneRogueAgentInFiveChangesNoResult) {
  const std::string spec =
      R"({"app":"montecarlo","tasks":600,"seed":11,"replication":2,"quorum":2,)"
      R"("params":{"model":"european_call","paths":60000000}})";
  std::string reference = ReferenceResult(spec);
  StartCoordinator();
  for (int i = 0; i < 4; ++i) StartAgent();
  std::istringstream tokens(ReadFile(data() + "/enroll-tokens"));
  std::string token;
  for (int i = 0; i < 5; ++i) std::getline(tokens, token);  // the 5th: unused by StartAgent
  RogueAgent rogue(target(), token);
  ASSERT_TRUE(rogue.Enroll());

  Client client(target(), seconds(5));
  auto id = client.Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  std::atomic<bool> stop{false};
  std::map<Misdeed, std::vector<grpc::StatusCode>> endings;
  std::thread misbehave([&] {
    const Misdeed all[] = {Misdeed::kWrongAnswers, Misdeed::kForgedSignature,
                           Misdeed::kNoSignature,  Misdeed::kReplay,
                           Misdeed::kNotGiven,     Misdeed::kFlood};
    // Until the job ends, and at least one round of every misdeed.
    for (int round = 0; !stop || round < static_cast<int>(std::size(all)); ++round) {
      Misdeed m = all[round % std::size(all)];
      endings[m].push_back(rogue.Session(m).error_code());
    }
  });
  v1::JobInfo end = WaitForJobEnd(client, *id, seconds(240));
  stop = true;
  misbehave.join();

  for (const auto& [m, codes] : endings) {
    std::printf("rogue sessions with %-16s: %zu, first ended with code %d\n", Name(m), codes.size(),
                codes.empty() ? -1 : static_cast<int>(codes[0]));
  }
  ASSERT_EQ(end.state(), "done") << end.error();
  auto results = client.Results(*id);
  ASSERT_TRUE(results.ok());
  EXPECT_EQ(results->result_json(), reference) << "a made-up answer entered the result";

  // Forged, unsigned and oversized reports end the session at once.
  for (Misdeed m : {Misdeed::kForgedSignature, Misdeed::kNoSignature}) {
    ASSERT_FALSE(endings[m].empty());
    for (auto code : endings[m]) {
      EXPECT_TRUE(code == grpc::StatusCode::PERMISSION_DENIED ||
                  code == grpc::StatusCode::DEADLINE_EXCEEDED)  // got no work that session
          << Name(m) << " ended with " << code;
    }
  }
  ASSERT_FALSE(endings[Misdeed::kFlood].empty());
  EXPECT_EQ(endings[Misdeed::kFlood][0], grpc::StatusCode::INVALID_ARGUMENT);

  auto agents = client.ListAgents();
  ASSERT_TRUE(agents.ok());
  for (const auto& a : *agents) {
    if (a.agent_id() == rogue.id()) {
      EXPECT_GT(a.invalid_results(), 0u) << "the rogue's wrong answers were outvoted";
      std::printf("rogue: %llu answers outvoted, error rate %.2f%s\n",
                  static_cast<unsigned long long>(a.invalid_results()), a.error_rate(),
                  a.on_probation() ? ", on probation" : "");
      EXPECT_EQ(a.valid_results(), 0u);
    } else {
      EXPECT_EQ(a.invalid_results(), 0u) << a.agent_id();
    }
  }
  std::string log = ReadFile((dir_ / "coordinator.log").string());
  EXPECT_NE(log.find("do not verify"), std::string::npos);
}

// Adaptive replication at its defaults, and an agent that earns trust and
// then lies on every third answer with valid signatures: once a spot check
// catches it, every answer it gave on its own word in a job not yet merged
// goes back to a vote, including those an honest answer of its vouched for
// in between. The result is bit-identical to an honest computation.
//
// The scheduler's simulation (SchedulerSimulation.ACaughtTurncoatThatLies-
// SometimesLeavesNothingBehind) is the one that fails under the old rule
// (vouched lies stayed); here the same strategy runs on the real protocol.
TEST_F(Rogue, ACaughtTurncoatLeavesNothingBehind) {
  const std::string spec =
      R"({"app":"montecarlo","tasks":3000,"seed":5,)"
      R"("params":{"model":"european_call","paths":3000000}})";
  std::string reference = ReferenceResult(spec);
  StartCoordinator();
  for (int i = 0; i < 3; ++i) StartAgent();
  std::istringstream tokens(ReadFile(data() + "/enroll-tokens"));
  std::string token;
  for (int i = 0; i < 4; ++i) std::getline(tokens, token);
  RogueAgent turncoat(target(), token);
  ASSERT_TRUE(turncoat.Enroll());
  Client client(target(), seconds(5));
  auto id = client.Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  std::atomic<bool> stop{false};
  int lies = 0;
  std::thread run([&] { lies = turncoat.Turncoat(40, 3, stop); });
  v1::JobInfo end = WaitForJobEnd(client, *id, seconds(300));
  stop = true;
  run.join();
  ASSERT_EQ(end.state(), "done") << end.error();
  EXPECT_GT(lies, 10) << "the turncoat got enough work to lie";
  auto results = client.Results(*id);
  ASSERT_TRUE(results.ok());
  EXPECT_EQ(results->result_json(), reference) << "a lie stayed in the result";
  auto agents = client.ListAgents();
  ASSERT_TRUE(agents.ok());
  for (const auto& a : *agents) {
    if (a.agent_id() == turncoat.id()) {
      std::printf("turncoat: %d lies, %llu answers judged valid, %llu invalid, error rate %.2f\n",
                  lies, static_cast<unsigned long long>(a.valid_results()),
                  static_cast<unsigned long long>(a.invalid_results()), a.error_rate());
      EXPECT_GT(a.invalid_results(), 0u) << "caught";
    } else {
      EXPECT_EQ(a.invalid_results(), 0u) << a.agent_id();
    }
  }
}

}  // namespace
}  // namespace claw::testing
