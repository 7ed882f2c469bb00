// What the coordinator tells users (coordinator/notifier.h): their jobs'
// ends, their quota, their devices going offline; and the targets they
// register.
#include "common/crypto.h"
#include "coordinator/coordinator.h"

namespace claw {

void Coordinator::Tell(const std::string& user, const std::string& type, std::string text,
                       nlohmann::json data) {
  if (!notifier_ || user.empty()) return;
  notifier_->Notify(Notification{"msg_" + RandomHex(12), user, type, std::move(text),
                                 std::move(data), clock_->Now()});
}

void Coordinator::NotifyJobsEnded(const StoreBatch& batch) {
  for (const JobUpdate& u : batch.job_updates) {
    if (!IsFinal(u.state) || u.id.find('.') != std::string::npos) continue;  // a round's own job
    auto v = sched_.GetJob(u.id);
    if (!v) continue;
    const std::string state = JobStateName(u.state);
    nlohmann::json data = {{"job", u.id}, {"state", state}, {"tasks", v->record.n_tasks}};
    std::string text = "Job " + u.id + " " + state;
    if (!u.error.empty()) {
      data["error"] = u.error.substr(0, 1000);
      text += ": " + u.error.substr(0, 300);
    }
    Tell(v->record.owner, "job." + state, std::move(text), std::move(data));
  }
}

void Coordinator::NotifyOfflineDevices(Time now) {
  for (auto it = offline_since_.begin(); it != offline_since_.end();) {
    if (now - it->second < options_.offline_after) {
      ++it;
      continue;
    }
    auto owner = agent_owners_.find(it->first);
    if (owner != agent_owners_.end()) {
      auto device = devices_.find(it->first);
      const std::string host = device == devices_.end() ? "" : device->second.hostname();
      Tell(owner->second, "device.offline",
           "Your device " + it->first + (host.empty() ? "" : " (" + host + ")") +
               " has been offline since " + std::to_string(it->second.unix_ms() / 1000) + " (unix time)",
           {{"device", it->first}, {"hostname", host}, {"since_unix_ms", it->second.unix_ms()}});
    }
    it = offline_since_.erase(it);
  }
}

Result<NotifyTarget> Coordinator::AddNotifyTarget(const std::string& kind, const std::string& url,
                                                  const UserRecord& caller) {
  return notifier_->Add(caller.name, kind, url);
}

std::vector<NotifyTarget> Coordinator::NotifyTargets(const UserRecord& caller) {
  return notifier_->List(caller.name);
}

Status Coordinator::RemoveNotifyTarget(int64_t id, const UserRecord& caller) {
  return notifier_->Remove(id, caller.name);
}

}  // namespace claw
