// Who may read and write which blob: users (what they uploaded or their
// jobs made) and agents (what the tasks they hold name), and agents' signed
// blob calls. Split from coordinator.cc.
#include "common/crypto.h"
#include "coordinator/coordinator.h"
#include "protocol/signing.h"

namespace claw {

Status Coordinator::MayReadBlob(const std::string& hash, const UserRecord& caller) {
  Status absent = NotFound("no blob " + hash.substr(0, 64));
  if (!options_.blobs || !IsBlobHash(hash) || !options_.blobs->Has(hash)) return absent;
  if (caller.tier == kAdminTier) return Status::Ok();
  auto owns = store_->IsBlobOwner(BlobOwner{hash, caller.name});
  if (!owns.ok()) return owns.status();
  return *owns ? Status::Ok() : absent;
}

Status Coordinator::MayAgentReadBlob(const std::string& hash, const AgentId& agent) {
  MutexLock lock(mu_);
  bool named = sched_.AnyLeasedTask(agent, [&](const App& app, std::string_view params) {
    std::vector<std::string> inputs = app.TaskInputBlobs(params);
    return std::find(inputs.begin(), inputs.end(), hash) != inputs.end();
  });
  if (named && options_.blobs && options_.blobs->Has(hash)) return Status::Ok();
  return NotFound("no blob " + hash.substr(0, 64) + " for agent " + agent +
                  " (an agent reads only the inputs of tasks it holds)");
}

Status Coordinator::MayAgentWriteBlob(const AgentId& agent) {
  MutexLock lock(mu_);
  if (sched_.AnyLeasedTask(agent, [](const App&, std::string_view) { return true; })) {
    return Status::Ok();
  }
  return PermissionDenied("agent " + agent + " holds no task: an agent uploads only its outputs");
}

Status Coordinator::BlobUploaded(const std::string& hash, const UserRecord& caller) {
  return store_->AddBlobOwner(BlobOwner{hash, caller.name});
}

Status Coordinator::AuthenticateAgentBlobCall(const std::string& agent_id, int64_t unix_ms,
                                              std::string_view signature,
                                              const std::string& hash) {
  std::string key;
  {
    MutexLock lock(mu_);
    auto k = PublicKeyOf(agent_id);
    if (!k.ok()) return k.status();
    key = std::move(k).value();
  }
  Duration skew = clock_->Now() - Time::FromUnixMs(unix_ms);
  if (skew > options_.hello_skew || -skew > options_.hello_skew) {
    return PermissionDenied("claw-time: too far from the coordinator's clock");
  }
  if (!Verify(BlobCallMessage(agent_id, unix_ms, hash), signature, key)) {
    return PermissionDenied("claw-signature: does not verify with agent " + agent_id +
                            "'s enrolled key");
  }
  return Status::Ok();
}

}  // namespace claw
