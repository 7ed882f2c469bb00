// Client side of the client API, for the CLI and tests: a thin wrapper over
// the generated stub that turns gRPC statuses into Status values.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "claw.grpc.pb.h"
#include "common/status.h"
#include "protocol/blob_client.h"
#include "protocol/grpc_status.h"

namespace claw {

class Client {
 public:
  // `target` is host:port. Calls time out after `timeout` (not WatchJob).
  // `api_token` goes with every call, and `ca_pem` is the coordinator's CA
  // to pin (both empty for a coordinator run with --insecure-local).
  explicit Client(const std::string& target,
                  std::chrono::milliseconds timeout = std::chrono::seconds(30),
                  std::string api_token = "", const std::string& ca_pem = "");
  Result<std::string> Submit(const std::string& spec_json);
  Result<v1::JobInfo> GetJob(const std::string& id);
  Result<std::vector<v1::JobInfo>> ListJobs(uint32_t limit);
  Result<std::vector<v1::AgentInfo>> ListAgents();
  // Admin only: creates a user and returns its API token.
  Result<std::string> AddUser(const std::string& name, const std::string& tier);
  Result<v1::JobInfo> Cancel(const std::string& id);
  Result<v1::GetResultsResponse> Results(const std::string& id);
  // A one-time token that enrolls one device of the caller's (0: one day).
  Result<v1::CreateEnrollTokenResponse> CreateEnrollToken(uint32_t ttl_s);
  // Transfers blobs as this client's user.
  BlobClient Blobs() const { return BlobClient(channel_, TokenBlobAuth(api_token_)); }
  // Calls `on_update` with each snapshot until the job ends; returns the last.
  Result<v1::JobInfo> Watch(const std::string& id,
                            const std::function<void(const v1::JobInfo&)>& on_update);

 private:
  void Prepare(grpc::ClientContext* ctx) const;
  // One unary call with the client's deadline.
  template <typename Req, typename Resp>
  Result<Resp> Unary(grpc::Status (v1::ClientService::Stub::*method)(grpc::ClientContext*,
                                                                      const Req&, Resp*),
                     const Req& req);
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ClientService::Stub> stub_;
  std::chrono::milliseconds timeout_;
  std::string api_token_;
  Transport transport_;
};

}  // namespace claw
