// What is signed on an agent session, and how (Ed25519, libsodium).
//
//   Down: the coordinator signs each message's batch of assignments, bound
//   to the receiving agent: one signature per message, not per task
//   (verifying costs ~44 µs). Agents run nothing whose batch does not verify
//   with the coordinator key they were given at enrollment.
//   Up: the agent signs each message's reports (results, failures, leases
//   handed back) with the key it enrolled. The coordinator applies nothing
//   from a message whose signature does not verify.
//
// Each signature covers a BLAKE2b-256 digest of a canonical, length-prefixed
// encoding of the fields (not protobuf bytes, which are not canonical), a
// purpose string and the agent id. Replays are harmless: a report is bound to
// its lease ids, which are used once, and a stale lease changes nothing.
#pragma once

#include <string>
#include <string_view>

#include "claw.pb.h"

namespace claw {

// The digests, exposed for tests.
std::string AssignmentsDigest(std::string_view agent_id, const v1::CoordinatorMessage& msg);
std::string ReportsDigest(std::string_view agent_id, const v1::AgentMessage& msg);

// Sets msg->signature when it carries assignments.
void SignAssignments(std::string_view agent_id, const std::string& coordinator_secret_key,
                     v1::CoordinatorMessage* msg);
// True when the message carries no assignments, or its signature verifies.
bool AssignmentsVerify(std::string_view agent_id, std::string_view coordinator_public_key,
                       const v1::CoordinatorMessage& msg);

bool HasReports(const v1::AgentMessage& msg);
// Sets msg->signature when it carries reports.
void SignReports(std::string_view agent_id, const std::string& agent_secret_key,
                 v1::AgentMessage* msg);
// True when the message carries no reports, or its signature verifies.
bool ReportsVerify(std::string_view agent_id, std::string_view agent_public_key,
                   const v1::AgentMessage& msg);

// What an agent signs to fetch or upload a blob (claw.proto, BlobService).
std::string BlobCallMessage(std::string_view agent_id, int64_t unix_ms, std::string_view sha256);

}  // namespace claw
