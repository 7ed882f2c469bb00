// The agent's blob transfers (its TransferLoop thread): a lease's inputs
// fetched before it runs, a result's files uploaded after, retried while
// the coordinator is out of reach; and the pins that keep a running
// task's blobs in the cache.
#include "agent/agent.h"
#include "agent/secagg_device.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <string>
#include <vector>

#include "agent/agent_events.h"
#include "apps/registry.h"
#include "common/text.h"
#include "protocol/blob_client.h"
#include "protocol/grpc_status.h"

namespace claw {
namespace {

// A task's output is in the cache before the agent pins it (when the task's
// outcome reaches the agent's loop): blobs this new are never trimmed.
constexpr std::chrono::seconds kSpareNewBlobs{120};

// How long a blob transfer is retried while the coordinator is out of reach
// (longer than a coordinator takes to restart; a lease lasts longer still).
constexpr auto kTransferRetryWindow = std::chrono::minutes(5);

}  // namespace

// ---- blob transfers -------------------------------------------------------------

void Agent::TransferLoop() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(4 << 20);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  BlobClient client(grpc::CreateCustomChannel(options_.coordinator, Credentials(), args),
                    AgentBlobAuth(identity_.agent_id, identity_.secret_key, clock_), &stop_);
  // A transfer that failed because the coordinator was out of reach (it is
  // restarting, the link dropped) is tried again with backoff for a while:
  // a finished task's output is not lost to a coordinator restart, and its
  // lease, recovered by the restarted coordinator, still takes the report.
  // Errors that name the blob (refused, wrong hash) are final at once.
  auto retrying = [this](std::string_view what, const auto& transfer) {
    Duration backoff = options_.backoff_initial;
    const auto give_up = std::chrono::steady_clock::now() + kTransferRetryWindow;
    for (;;) {
      Status st = transfer();
      if (st.ok() || st.code() != StatusCode::kUnavailable || stop_ ||
          std::chrono::steady_clock::now() >= give_up) {
        return st;
      }
      log_->warn("{} failed: {}; retrying in {} ms", what, EscapeControl(st.message()),
                 backoff.count() / 1000);
      MutexLock lock(mu_);
      transfer_cv_.wait_for(lock, backoff, [this] { return stop_.load(); });
      backoff = std::min(backoff * 2, options_.backoff_max);
    }
  };
  for (;;) {
    Transfer t;
    {
      MutexLock lock(mu_);
      while (!stop_ && transfers_.empty()) transfer_cv_.wait(lock);
      if (stop_) return;
      t = std::move(transfers_.front());
      transfers_.pop_front();
    }
    auto keep = [this](std::string_view h) { return Pinned(h); };
    if (t.outcome) {
      TaskOutcome& o = *t.outcome;
      for (const std::string& h : t.app->OutputBlobs(o.output)) {
        const Time start = clock_->Now();
        Status st = retrying("upload of " + h.substr(0, 12),
                             [&] { return client.Upload(h, *blobs_); });
        log_->debug("upload lease={} blob={} ms={} ok={}", o.lease_id, h.substr(0, 12),
                    (clock_->Now() - start).count() / 1000, st.ok());
        if (!st.ok()) {
          o = TaskOutcome{o.lease_id, false, "", "uploading output " + st.message(), o.runtime_us};
          break;
        }
      }
      // Uploaded, its outputs may leave the cache when it is over its size
      // (not at once: a task running now may have made the same file, and
      // content-addressed, it is the same blob).
      Unpin(o.lease_id);
      blobs_->Trim(options_.cache_bytes, keep, kSpareNewBlobs);
      Post(Event{Event::Kind::kUploaded, {}, std::move(o)});
      continue;
    }
    Event e{Event::Kind::kStaged, {}, {}};
    for (v1::WorkerTask& task : t.tasks) {
      Status st = Status::Ok();
      const App* app = apps_.Find(task.app());
      for (const std::string& h :
           app ? app->BlobsToFetch(task.params(), *blobs_) : std::vector<std::string>{}) {
        const Time start = clock_->Now();
        st = retrying("fetch of " + h.substr(0, 12), [&] { return client.Fetch(h, *blobs_); });
        log_->debug("fetch lease={} blob={} ms={} ok={}", task.lease_id(), h.substr(0, 12),
                    (clock_->Now() - start).count() / 1000, st.ok());
        if (!st.ok()) break;
        blobs_->Touch(h);
      }
      if (st.ok()) {
        e.tasks.push_back(std::move(task));
      } else {
        log_->warn("input blob refused lease={} error={}", task.lease_id(),
                   EscapeControl(st.message()));
        e.failures.emplace_back(task.lease_id(), "fetching input " + st.message());
      }
    }
    blobs_->Trim(options_.cache_bytes, keep, kSpareNewBlobs);
    Post(std::move(e));
  }
}

void Agent::Pin(uint64_t lease, std::vector<std::string> hashes) {
  MutexLock lock(pins_mu_);
  for (const std::string& h : hashes) pins_[h]++;
  pins_by_lease_[lease] = std::move(hashes);
}

void Agent::Unpin(uint64_t lease) {
  MutexLock lock(pins_mu_);
  auto it = pins_by_lease_.find(lease);
  if (it == pins_by_lease_.end()) return;
  for (const std::string& h : it->second) {
    if (--pins_[h] <= 0) pins_.erase(h);
  }
  pins_by_lease_.erase(it);
}

bool Agent::Pinned(std::string_view hash) {
  const std::string h(hash);
  MutexLock lock(pins_mu_);
  return pins_.count(h) > 0 || secagg_pins_.count(h) > 0;
}

void Agent::PinSecAggDeltas() {
  std::vector<std::string> deltas = secagg_ ? secagg_->Deltas() : std::vector<std::string>{};
  MutexLock lock(pins_mu_);
  secagg_pins_ = {deltas.begin(), deltas.end()};
}

void Agent::ForgetFiles(uint64_t lease) {
  if (with_files_.erase(lease) > 0) Unpin(lease);
}

}  // namespace claw
