#include "cli/client.h"

#include <grpcpp/grpcpp.h>

namespace claw {


Client::Client(const std::string& target, std::chrono::milliseconds timeout, std::string api_token,
               const std::string& ca_pem)
    : timeout_(timeout),
      api_token_(std::move(api_token)),
      transport_(ca_pem.empty() ? Transport::kPlaintext : Transport::kTls) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ca_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  channel_ = grpc::CreateCustomChannel(target, credentials, args);
  stub_ = v1::ClientService::NewStub(channel_);
}

void Client::Prepare(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() + timeout_);
  if (!api_token_.empty()) ctx->AddMetadata("authorization", "Bearer " + api_token_);
}

template <typename Req, typename Resp>
Result<Resp> Client::Unary(grpc::Status (v1::ClientService::Stub::*method)(grpc::ClientContext*,
                                                                            const Req&, Resp*),
                           const Req& req) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  Resp resp;
  Status st = FromGrpc((stub_.get()->*method)(&ctx, req, &resp), transport_);
  if (!st.ok()) return st;
  return resp;
}

namespace {
v1::JobRef Ref(const std::string& id) {
  v1::JobRef r;
  r.set_job_id(id);
  return r;
}
}  // namespace

Result<std::string> Client::Submit(const std::string& spec_json) {
  v1::SubmitJobRequest req;
  req.set_spec_json(spec_json);
  auto r = Unary(&v1::ClientService::Stub::SubmitJob, req);
  if (!r.ok()) return r.status();
  return r->job_id();
}

Result<v1::JobInfo> Client::GetJob(const std::string& id) {
  return Unary(&v1::ClientService::Stub::GetJob, Ref(id));
}

Result<std::vector<v1::JobInfo>> Client::ListJobs(uint32_t limit) {
  v1::ListJobsRequest req;
  req.set_limit(limit);
  auto r = Unary(&v1::ClientService::Stub::ListJobs, req);
  if (!r.ok()) return r.status();
  return std::vector<v1::JobInfo>(r->jobs().begin(), r->jobs().end());
}

Result<std::vector<v1::AgentInfo>> Client::ListAgents() {
  auto r = Unary(&v1::ClientService::Stub::ListAgents, v1::ListAgentsRequest{});
  if (!r.ok()) return r.status();
  return std::vector<v1::AgentInfo>(r->agents().begin(), r->agents().end());
}

Result<std::string> Client::AddUser(const std::string& name, const std::string& tier) {
  v1::AddUserRequest req;
  req.set_name(name);
  req.set_tier(tier);
  auto r = Unary(&v1::ClientService::Stub::AddUser, req);
  if (!r.ok()) return r.status();
  return r->token();
}

Result<v1::CreateEnrollTokenResponse> Client::CreateEnrollToken(uint32_t ttl_s) {
  v1::CreateEnrollTokenRequest req;
  req.set_ttl_s(ttl_s);
  return Unary(&v1::ClientService::Stub::CreateEnrollToken, req);
}

Result<v1::JobInfo> Client::Cancel(const std::string& id) {
  return Unary(&v1::ClientService::Stub::CancelJob, Ref(id));
}

Result<v1::GetResultsResponse> Client::Results(const std::string& id) {
  return Unary(&v1::ClientService::Stub::GetResults, Ref(id));
}

Result<v1::JobInfo> Client::Watch(const std::string& id,
                                  const std::function<void(const v1::JobInfo&)>& on_update) {
  grpc::ClientContext ctx;  // no deadline: a job may run for days
  if (!api_token_.empty()) ctx.AddMetadata("authorization", "Bearer " + api_token_);
  v1::JobRef req;
  req.set_job_id(id);
  auto reader = stub_->WatchJob(&ctx, req);
  v1::JobInfo info, last;
  bool any = false;
  while (reader->Read(&info)) {
    any = true;
    on_update(info);
    last = info;
  }
  Status st = FromGrpc(reader->Finish(), transport_);
  if (!st.ok()) return st;
  if (!any) return Unavailable("watch ended without news of job " + id);
  return last;
}

}  // namespace claw
