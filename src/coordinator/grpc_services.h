// gRPC glue for the coordinator (callback API). Handlers translate messages
// and call Coordinator; they hold no state of their own beyond one call.
#pragma once

#include <grpcpp/grpcpp.h>

#include "claw.grpc.pb.h"
#include "coordinator/coordinator.h"

namespace claw {

// Maps a Status to the gRPC status a client sees.
grpc::Status ToGrpc(const Status& st);

// The value of a call's metadata entry; empty if absent.
std::string_view Metadata(const grpc::ServerContextBase& ctx, const std::string& key);
// The user a call's bearer token names (or the local user with
// --insecure-local); Unauthenticated without a valid token.
Result<UserRecord> CallingUser(const grpc::ServerContextBase& ctx, Coordinator* coordinator,
                               bool insecure_local);

class AgentServiceImpl final : public v1::AgentService::CallbackService {
 public:
  explicit AgentServiceImpl(Coordinator* c) : coordinator_(c) {}
  grpc::ServerUnaryReactor* Enroll(grpc::CallbackServerContext* ctx, const v1::EnrollRequest* req,
                                   v1::EnrollResponse* resp) override;
  grpc::ServerBidiReactor<v1::AgentMessage, v1::CoordinatorMessage>* Session(
      grpc::CallbackServerContext* ctx) override;

 private:
  Coordinator* coordinator_;
};

class ClientServiceImpl final : public v1::ClientService::CallbackService {
 public:
  // `insecure_local`: calls need no token and run as LocalUser().
  ClientServiceImpl(Coordinator* c, bool insecure_local)
      : coordinator_(c), insecure_local_(insecure_local) {}
  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const v1::SubmitJobRequest* req,
                                      v1::SubmitJobResponse* resp) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const v1::JobRef* req,
                                   v1::JobInfo* resp) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const v1::ListJobsRequest* req,
                                     v1::ListJobsResponse* resp) override;
  grpc::ServerUnaryReactor* ListAgents(grpc::CallbackServerContext* ctx,
                                       const v1::ListAgentsRequest* req,
                                       v1::ListAgentsResponse* resp) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx, const v1::JobRef* req,
                                      v1::JobInfo* resp) override;
  grpc::ServerWriteReactor<v1::JobInfo>* WatchJob(grpc::CallbackServerContext* ctx,
                                                  const v1::JobRef* req) override;
  grpc::ServerUnaryReactor* GetResults(grpc::CallbackServerContext* ctx, const v1::JobRef* req,
                                       v1::GetResultsResponse* resp) override;
  grpc::ServerUnaryReactor* AddUser(grpc::CallbackServerContext* ctx,
                                    const v1::AddUserRequest* req,
                                    v1::AddUserResponse* resp) override;
  grpc::ServerUnaryReactor* CreateEnrollToken(grpc::CallbackServerContext* ctx,
                                              const v1::CreateEnrollTokenRequest* req,
                                              v1::CreateEnrollTokenResponse* resp) override;

 private:
  // The user the call's bearer token names (or the local user).
  Result<UserRecord> Caller(grpc::CallbackServerContext* ctx) const;
  Coordinator* coordinator_;
  bool insecure_local_;
};

}  // namespace claw
