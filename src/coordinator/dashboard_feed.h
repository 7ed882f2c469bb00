// DashboardFeed: the dashboard's live streams (Server-Sent Events, one per
// open page) and the network's history (docs/dashboard.md).
//
// A thread wakes every `interval`: it computes each open page's state once
// per distinct (page, job, user) — twenty people on the Network page cost
// one computation — and pushes it to the streams whose last state differs.
// Every `sample_every` it records the network's numbers in the store (kept
// `retention`), so the charts survive a restart.
//
// Event ids carry what a reconnecting client has ("<state hash>.<last
// sample ms>"): given back as Last-Event-ID, the stream skips a state the
// client already shows and sends only the samples it lacks.
//
// Bounded: at most `max_streams` streams; a stream whose client does not
// read is cut at `buffer` bytes (HttpStream).
//
// Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/log.h"
#include "common/mutex.h"
#include "common/status.h"
#include "coordinator/coordinator.h"
#include "coordinator/http_server.h"

namespace claw {

class DashboardFeed {
 public:
  struct Options {
    Duration interval = std::chrono::seconds(1);
    Duration keepalive = std::chrono::seconds(15);
    size_t buffer = 1 << 20;  // bytes waiting for one client before it is cut
    size_t max_streams = 512;
    size_t max_streams_per_user = 16;
    Duration sample_every = std::chrono::seconds(10);
    Duration retention = std::chrono::hours(24 * 30);
    Duration chart_window = std::chrono::hours(24);  // history sent to a new page
  };
  static constexpr const char* kPages[] = {"network", "jobs", "devices", "me", "job", "ledger"};

  DashboardFeed(Coordinator* coordinator, const Clock* clock, Options options, Logger log);
  ~DashboardFeed();
  DashboardFeed(const DashboardFeed&) = delete;
  DashboardFeed& operator=(const DashboardFeed&) = delete;

  // Loads the chart window's history from the store and starts the thread.
  Status Start();
  void Stop();

  // A new stream of `page` for `caller`, with its first state already
  // queued. InvalidArgument for an unknown page, the job's own error (not
  // found, not theirs) for page "job", ResourceExhausted past max_streams.
  Result<std::shared_ptr<HttpStream>> Open(const std::string& page, const std::string& job,
                                           const UserRecord& caller, const std::string& last_event_id);

  size_t open_streams();
  uint64_t streams_cut() const { return cut_.load(); }

 private:
  struct Sub {
    std::shared_ptr<HttpStream> stream;
    std::string page, job;
    UserRecord caller;
    size_t last_hash = 0;
    bool sent = false;           // a state has gone out (or the client had it)
    bool first = true;           // nothing pushed yet
    int64_t last_sample_ms = 0;  // the newest history sample the client has
    Time last_write;
  };
  // A page's state for one key, computed once per tick.
  struct Computed {
    Status status;
    std::string json;  // without the network's history
    size_t hash = 0;
  };
  void Loop();
  void Sample(Time now);
  std::string KeyOf(const Sub& s) const;
  Computed Compute(const Sub& s, const HistorySample& now_sample);
  // Sends `c` to `s` if it is new to it; true if anything was pushed.
  bool Send(Sub& s, const Computed& c, Time now);
  HistorySample Current(Time now);

  Coordinator* coordinator_;
  const Clock* clock_;
  Options options_;
  Logger log_;

  Mutex mu_;
  std::condition_variable_any wake_;
  bool stop_ CLAW_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<Sub>> subs_ CLAW_GUARDED_BY(mu_);
  std::deque<HistorySample> recent_ CLAW_GUARDED_BY(mu_);  // the chart window
  // Results accepted (cumulative) over the last seconds, for tasks/s now.
  std::deque<std::pair<Time, double>> accepted_ CLAW_GUARDED_BY(mu_);
  Time next_sample_ CLAW_GUARDED_BY(mu_);
  std::atomic<uint64_t> cut_{0};
  std::thread thread_;
};

}  // namespace claw
