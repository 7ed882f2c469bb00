#include "protocol/signing.h"

#include "common/crypto.h"

namespace claw {

std::string AssignmentsDigest(std::string_view agent_id, const v1::CoordinatorMessage& msg) {
  FieldHasher h;
  h.Add("claw-assignments-v1").Add(agent_id).Add(uint64_t(msg.assignments_size()));
  for (const auto& a : msg.assignments()) {
    h.Add(a.lease_id()).Add(a.job_id()).Add(uint64_t{a.task_index()}).Add(a.app()).Add(a.params());
    h.Add(static_cast<uint64_t>(a.deadline_unix_ms()));
  }
  return h.Finish();
}

std::string ReportsDigest(std::string_view agent_id, const v1::AgentMessage& msg) {
  FieldHasher h;
  h.Add("claw-reports-v1").Add(agent_id).Add(uint64_t(msg.results_size()));
  for (const auto& r : msg.results()) h.Add(r.lease_id()).Add(r.output()).Add(r.runtime_us());
  h.Add(uint64_t(msg.failures_size()));
  for (const auto& f : msg.failures()) h.Add(f.lease_id()).Add(f.reason());
  h.Add(uint64_t(msg.returned_size()));
  for (uint64_t l : msg.returned()) h.Add(l);
  return h.Finish();
}

void SignAssignments(std::string_view agent_id, const std::string& coordinator_secret_key,
                     v1::CoordinatorMessage* msg) {
  if (msg->assignments_size() == 0) return;
  msg->set_signature(Sign(AssignmentsDigest(agent_id, *msg), coordinator_secret_key));
}

bool AssignmentsVerify(std::string_view agent_id, std::string_view coordinator_public_key,
                       const v1::CoordinatorMessage& msg) {
  if (msg.assignments_size() == 0) return true;
  return Verify(AssignmentsDigest(agent_id, msg), msg.signature(), coordinator_public_key);
}

bool HasReports(const v1::AgentMessage& msg) {
  return msg.results_size() > 0 || msg.failures_size() > 0 || msg.returned_size() > 0;
}

void SignReports(std::string_view agent_id, const std::string& agent_secret_key,
                 v1::AgentMessage* msg) {
  if (!HasReports(*msg)) return;
  msg->set_signature(Sign(ReportsDigest(agent_id, *msg), agent_secret_key));
}

bool ReportsVerify(std::string_view agent_id, std::string_view agent_public_key,
                   const v1::AgentMessage& msg) {
  if (!HasReports(msg)) return true;
  return Verify(ReportsDigest(agent_id, msg), msg.signature(), agent_public_key);
}

std::string BlobCallMessage(std::string_view agent_id, int64_t unix_ms, std::string_view sha256) {
  return "claw-blob-v1|" + std::string(agent_id) + "|" + std::to_string(unix_ms) + "|" +
         std::string(sha256);
}

}  // namespace claw
