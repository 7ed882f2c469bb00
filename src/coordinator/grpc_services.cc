#include "coordinator/grpc_services.h"

#include <deque>
#include <mutex>

namespace claw {

grpc::Status ToGrpc(const Status& st) {
  using C = grpc::StatusCode;
  C code = C::UNKNOWN;
  switch (st.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kInvalidArgument: code = C::INVALID_ARGUMENT; break;
    case StatusCode::kNotFound: code = C::NOT_FOUND; break;
    case StatusCode::kAlreadyExists: code = C::ALREADY_EXISTS; break;
    case StatusCode::kFailedPrecondition: code = C::FAILED_PRECONDITION; break;
    case StatusCode::kPermissionDenied: code = C::PERMISSION_DENIED; break;
    case StatusCode::kUnauthenticated: code = C::UNAUTHENTICATED; break;
    case StatusCode::kResourceExhausted: code = C::RESOURCE_EXHAUSTED; break;
    case StatusCode::kUnavailable: code = C::UNAVAILABLE; break;
    case StatusCode::kInternal: code = C::INTERNAL; break;
  }
  return grpc::Status(code, st.message());
}

namespace {

template <typename T>
grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const Result<T>& r) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(r.ok() ? grpc::Status::OK : ToGrpc(r.status()));
  return reactor;
}

// One agent's session stream. Reads are applied to the Coordinator as they
// arrive; writes from the Coordinator are queued, since the callback API
// allows one write in flight per stream.
class SessionReactor final : public grpc::ServerBidiReactor<v1::AgentMessage, v1::CoordinatorMessage>,
                             public SessionSink {
 public:
  explicit SessionReactor(Coordinator* c) : coordinator_(c) { StartRead(&in_); }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the agent closed its side or the stream broke
      coordinator_->CloseSession(this);
      Close(Status::Ok());
      return;
    }
    if (!opened_) {
      if (!in_.has_hello()) {
        Close(InvalidArgument("session: the first message must carry hello"));
        return;
      }
      auto agent = coordinator_->OpenSession(in_.hello(), this);
      if (!agent.ok()) {
        Close(agent.status());
        return;
      }
      opened_ = true;
      in_.clear_hello();
    }
    coordinator_->OnAgentMessage(this, in_);
    in_.Clear();
    StartRead(&in_);
  }

  void Send(const v1::CoordinatorMessage& msg) override {
    MutexLock lock(mu_);
    if (finishing_) return;
    out_.push_back(msg);
    if (!writing_) WriteFront();
  }

  void Close(const Status& why) override {
    MutexLock lock(mu_);
    if (finishing_) return;
    finishing_ = true;
    finish_status_ = ToGrpc(why);
    if (!writing_) FinishNow();
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(mu_);
    out_.pop_front();
    writing_ = false;
    if (!ok) {
      out_.clear();
      finishing_ = true;
    }
    if (!out_.empty() && !finishing_) {
      WriteFront();
    } else if (finishing_) {
      FinishNow();
    }
  }

  void OnDone() override {
    coordinator_->CloseSession(this);
    delete this;
  }

 private:
  void WriteFront() CLAW_REQUIRES(mu_) {
    writing_ = true;
    StartWrite(&out_.front());
  }
  void FinishNow() CLAW_REQUIRES(mu_) {  // no write in flight
    if (finished_) return;
    finished_ = true;
    Finish(finish_status_);
  }

  Coordinator* coordinator_;
  v1::AgentMessage in_;
  bool opened_ = false;
  Mutex mu_;
  std::deque<v1::CoordinatorMessage> out_ CLAW_GUARDED_BY(mu_);
  bool writing_ CLAW_GUARDED_BY(mu_) = false;
  bool finishing_ CLAW_GUARDED_BY(mu_) = false;
  bool finished_ CLAW_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ CLAW_GUARDED_BY(mu_);
};

// Streams a job's info on each change; coalesces bursts (a slow client sees
// the latest state, not every step) and ends when the job ends.
class WatchReactor final : public grpc::ServerWriteReactor<v1::JobInfo>, public JobWatcher {
 public:
  WatchReactor(Coordinator* c, const std::string& job, const Result<UserRecord>& caller)
      : coordinator_(c) {
    Status st = caller.ok() ? coordinator_->Watch(job, *caller, this) : caller.status();
    if (!st.ok()) {
      MutexLock lock(mu_);
      finished_ = true;
      Finish(ToGrpc(st));
    }
  }

  void OnJob(const v1::JobInfo& info) override {
    MutexLock lock(mu_);
    if (finished_) return;
    latest_ = info;
    have_new_ = true;
    if (!writing_) WriteLatest();
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(mu_);
    writing_ = false;
    if (!ok) {
      FinishOnce(grpc::Status::CANCELLED);
    } else if (have_new_) {
      WriteLatest();
    } else if (current_.state() != "running") {
      FinishOnce(grpc::Status::OK);
    }
  }

  void OnCancel() override {
    MutexLock lock(mu_);
    if (!writing_) FinishOnce(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    coordinator_->Unwatch(this);
    delete this;
  }

 private:
  void WriteLatest() CLAW_REQUIRES(mu_) {
    current_ = latest_;
    have_new_ = false;
    writing_ = true;
    StartWrite(&current_);
  }
  void FinishOnce(const grpc::Status& st) CLAW_REQUIRES(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(st);
  }

  Coordinator* coordinator_;
  Mutex mu_;
  v1::JobInfo latest_ CLAW_GUARDED_BY(mu_), current_ CLAW_GUARDED_BY(mu_);
  bool have_new_ CLAW_GUARDED_BY(mu_) = false;
  bool writing_ CLAW_GUARDED_BY(mu_) = false;
  bool finished_ CLAW_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerUnaryReactor* AgentServiceImpl::Enroll(grpc::CallbackServerContext* ctx,
                                                   const v1::EnrollRequest* req,
                                                   v1::EnrollResponse* resp) {
  auto r = coordinator_->Enroll(*req);
  if (r.ok()) *resp = std::move(r).value();
  return Done(ctx, r);
}

grpc::ServerBidiReactor<v1::AgentMessage, v1::CoordinatorMessage>* AgentServiceImpl::Session(
    grpc::CallbackServerContext*) {
  return new SessionReactor(coordinator_);
}

std::string_view Metadata(const grpc::ServerContextBase& ctx, const std::string& key) {
  const auto& md = ctx.client_metadata();
  auto it = md.find(key);
  return it == md.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size());
}

Result<UserRecord> CallingUser(const grpc::ServerContextBase& ctx, Coordinator* coordinator,
                               bool insecure_local) {
  if (insecure_local) return LocalUser();
  std::string_view value = Metadata(ctx, "authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (value.substr(0, kBearer.size()) != kBearer) {
    return Unauthenticated("an API token is required: authorization: Bearer <token>");
  }
  return coordinator->Authenticate(value.substr(kBearer.size()));
}

Result<UserRecord> ClientServiceImpl::Caller(grpc::CallbackServerContext* ctx) const {
  return CallingUser(*ctx, coordinator_, insecure_local_);
}

grpc::ServerUnaryReactor* ClientServiceImpl::SubmitJob(grpc::CallbackServerContext* ctx,
                                                       const v1::SubmitJobRequest* req,
                                                       v1::SubmitJobResponse* resp) {
  auto caller = Caller(ctx);
  if (!caller.ok()) return Done(ctx, caller);
  auto r = coordinator_->Submit(req->spec_json(), *caller);
  if (r.ok()) resp->set_job_id(*r);
  return Done(ctx, r);
}

grpc::ServerUnaryReactor* ClientServiceImpl::GetJob(grpc::CallbackServerContext* ctx,
                                                    const v1::JobRef* req, v1::JobInfo* resp) {
  auto caller = Caller(ctx);
  if (!caller.ok()) return Done(ctx, caller);
  auto r = coordinator_->GetJob(req->job_id(), *caller);
  if (r.ok()) *resp = std::move(r).value();
  return Done(ctx, r);
}

grpc::ServerUnaryReactor* ClientServiceImpl::ListAgents(grpc::CallbackServerContext* ctx,
                                                        const v1::ListAgentsRequest*,
                                                        v1::ListAgentsResponse* resp) {
  auto caller = Caller(ctx);
  if (!caller.ok()) return Done(ctx, caller);
  auto r = coordinator_->ListAgents();
  if (r.ok()) {
    for (auto& a : *r) *resp->add_agents() = std::move(a);
  }
  return Done(ctx, r);
}

grpc::ServerUnaryReactor* ClientServiceImpl::ListJobs(grpc::CallbackServerContext* ctx,
                                                      const v1::ListJobsRequest* req,
                                                      v1::ListJobsResponse* resp) {
  auto caller = Caller(ctx);
  if (!caller.ok()) return Done(ctx, caller);
  size_t limit = req->limit() == 0 ? 100 : std::min<size_t>(req->limit(), 10'000);
  for (auto& j : coordinator_->ListJobs(limit, *caller)) *resp->add_jobs() = std::move(j);
  return Done(ctx, caller);
}

grpc::ServerUnaryReactor* ClientServiceImpl::CancelJob(grpc::CallbackServerContext* ctx,
                                                       const v1::JobRef* req, v1::JobInfo* resp) {
  auto caller = Caller(ctx);
  if (!caller.ok()) return Done(ctx, caller);
  auto r = coordinator_->Cancel(req->job_id(), *caller);
  if (r.ok()) *resp = std::move(r).value();
  return Done(ctx, r);
}

grpc::ServerWriteReactor<v1::JobInfo>* ClientServiceImpl::WatchJob(grpc::CallbackServerContext* ctx,
                                                                   const v1::JobRef* req) {
  return new WatchReactor(coordinator_, req->job_id(), Caller(ctx));
}

grpc::ServerUnaryReactor* ClientServiceImpl::GetResults(grpc::CallbackServerContext* ctx,
                                                        const v1::JobRef* req,
                                                        v1::GetResultsResponse* resp) {
  auto caller = Caller(ctx);
  if (!caller.ok()) return Done(ctx, caller);
  auto r = coordinator_->GetResults(req->job_id(), *caller);
  if (r.ok()) {
    *resp->mutable_job() = std::move(r->first);
    resp->set_result_json(std::move(r->second));
  }
  return Done(ctx, r);
}

grpc::ServerUnaryReactor* ClientServiceImpl::AddUser(grpc::CallbackServerContext* ctx,
                                                     const v1::AddUserRequest* req,
                                                     v1::AddUserResponse* resp) {
  auto caller = Caller(ctx);
  if (!caller.ok()) return Done(ctx, caller);
  if (caller->tier != kAdminTier) {
    return Done(ctx, Result<int>(PermissionDenied("adding users needs the admin token")));
  }
  if (req->tier() == kAdminTier) {
    return Done(ctx, Result<int>(InvalidArgument("tier: there is one admin, made at start")));
  }
  auto r = coordinator_->AddUser(req->name(), req->tier());
  if (r.ok()) resp->set_token(*r);
  return Done(ctx, r);
}

grpc::ServerUnaryReactor* ClientServiceImpl::CreateEnrollToken(
    grpc::CallbackServerContext* ctx, const v1::CreateEnrollTokenRequest* req,
    v1::CreateEnrollTokenResponse* resp) {
  auto caller = Caller(ctx);
  if (!caller.ok()) return Done(ctx, caller);
  auto r = coordinator_->CreateEnrollToken(*caller, std::chrono::seconds(req->ttl_s()));
  if (r.ok()) *resp = std::move(r).value();
  return Done(ctx, r);
}

}  // namespace claw
