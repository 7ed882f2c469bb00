#include "coordinator/timeline.h"

#include <algorithm>

namespace claw {

void TaskTimeline::Granted(LeaseId lease, const JobId& job, uint32_t task, const AgentId& agent,
                           Time now) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) {
    if (jobs_.size() >= max_jobs_) {
      // Forget the job whose last grant is the oldest (and its open leases).
      auto least = std::min_element(jobs_.begin(), jobs_.end(), [](const auto& a, const auto& b) {
        return a.second.touched < b.second.touched;
      });
      JobSpans* gone = &least->second;
      std::erase_if(open_, [gone](const auto& kv) { return kv.second.job == gone; });
      jobs_.erase(least);
    }
    it = jobs_.emplace(job, JobSpans{}).first;
  }
  JobSpans& js = it->second;
  js.touched = ++grants_;
  if (js.spans.size() >= max_spans_) {
    ++js.dropped;
    return;
  }
  std::vector<uint32_t>& of_task = js.by_task[task];
  Span s;
  s.task = task;
  s.attempt = static_cast<uint32_t>(of_task.size()) + 1;
  s.agent = agent;
  s.lease = lease;
  s.start = now;
  of_task.push_back(static_cast<uint32_t>(js.spans.size()));
  open_[lease] = Where{&js, static_cast<uint32_t>(js.spans.size())};
  js.spans.push_back(std::move(s));
}

TaskTimeline::Span* TaskTimeline::Find(LeaseId lease) {
  auto it = open_.find(lease);
  return it == open_.end() ? nullptr : &it->second.job->spans[it->second.span];
}

void TaskTimeline::Reported(LeaseId lease, const AgentId& agent, std::string_view outcome,
                            std::string_view detail) {
  if (Span* s = Find(lease); s && s->agent == agent) {
    s->outcome = outcome;
    s->detail = detail.substr(0, 512);
  }
}

void TaskTimeline::Ended(LeaseId lease, Time now) {
  auto it = open_.find(lease);
  if (it == open_.end()) return;
  Span& s = it->second.job->spans[it->second.span];
  s.end = now;
  if (s.outcome == "running") s.outcome = "ended";  // expired, or no longer needed
  open_.erase(it);
}

void TaskTimeline::Judged(const JobId& job, uint32_t task, const AgentId& agent, bool valid) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return;
  auto t = it->second.by_task.find(task);
  if (t == it->second.by_task.end()) return;
  for (auto i = t->second.rbegin(); i != t->second.rend(); ++i) {
    Span& s = it->second.spans[*i];
    if (s.agent == agent && (s.outcome == "done" || s.outcome == "ended")) {
      s.outcome = valid ? "valid" : "invalid";
      return;
    }
  }
}

std::vector<TaskTimeline::Span> TaskTimeline::Of(const JobId& job, size_t* dropped) const {
  auto it = jobs_.find(job);
  if (dropped) *dropped = it == jobs_.end() ? 0 : it->second.dropped;
  return it == jobs_.end() ? std::vector<Span>{} : it->second.spans;
}

}  // namespace claw
