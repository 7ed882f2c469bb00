// TaskTimeline: which device ran which task of a job when, with what outcome
// — the dashboard's per-task timeline (retries, replicas and votes).
//
// Kept in memory, bounded: the spans of the last `max_jobs` jobs that had
// any, at most `max_spans` per job (later ones are counted, not kept). The
// store keeps what a job's result needs, not this; after a restart a job's
// timeline starts again from the leases granted since.
//
// Not thread-safe: the coordinator calls it under its mutex. Each call is
// O(1) amortised (hash lookups), for the no-op path's sake.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "core/types.h"

namespace claw {

class TaskTimeline {
 public:
  struct Span {
    uint32_t task = 0;
    uint32_t attempt = 1;  // 1 for the task's first lease, 2 for the next (a retry or replica)
    AgentId agent;
    LeaseId lease = 0;
    Time start;
    Time end;  // zero while it runs
    std::string outcome = "running";  // running done valid invalid failed returned ended
    std::string detail;               // a failure's reason
  };

  explicit TaskTimeline(size_t max_jobs = 32, size_t max_spans = 5'000)
      : max_jobs_(max_jobs), max_spans_(max_spans) {}

  void Granted(LeaseId lease, const JobId& job, uint32_t task, const AgentId& agent, Time now);
  // What `agent` said of its lease (before it ends): "done", "failed" (with
  // its reason), "returned". A lease that is not the agent's is ignored.
  void Reported(LeaseId lease, const AgentId& agent, std::string_view outcome,
                std::string_view detail = {});
  void Ended(LeaseId lease, Time now);
  // A vote's verdict on the agent's result for the task.
  void Judged(const JobId& job, uint32_t task, const AgentId& agent, bool valid);

  // The job's spans in the order their leases were granted; `dropped`: how
  // many more there were beyond the bound.
  std::vector<Span> Of(const JobId& job, size_t* dropped = nullptr) const;

 private:
  struct JobSpans {
    uint64_t touched = 0;  // when a lease of it was last granted (a counter): the least recent goes first
    std::vector<Span> spans;
    std::unordered_map<uint32_t, std::vector<uint32_t>> by_task;  // task -> span indexes
    size_t dropped = 0;
  };
  struct Where {
    JobSpans* job;
    uint32_t span;
  };
  Span* Find(LeaseId lease);

  size_t max_jobs_, max_spans_;
  uint64_t grants_ = 0;
  std::map<JobId, JobSpans> jobs_;
  std::unordered_map<LeaseId, Where> open_;   // leases granted, not yet ended
};

}  // namespace claw
