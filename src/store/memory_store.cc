#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "common/mutex.h"
#include "store/store.h"

namespace claw {
namespace {

class MemoryStore final : public Store {
 public:
  Status Apply(const StoreBatch& b) override {
    MutexLock lock(mu_);
    for (const auto& nj : b.new_jobs) {
      if (jobs_.count(nj.job.id)) return Internal("job " + nj.job.id + " stored twice");
    }
    CLAW_RETURN_IF_ERROR(CheckLedger(b.ledger));
    AppendLedger(b.ledger);
    for (const auto& [agent, account] : b.credit_changes.accounts) credits_[agent] = account;
    for (const UsageCharge& c : b.usage) usage_[{c.user, b.usage_month}] += c.node_us;
    for (const auto& [key, credit] : b.credit_changes.days) {
      CreditDay& d = credit_days_[key];
      d.day = key.first;
      d.agent = key.second;
      d.owner = credits_[key.second].owner;
      d.credit += credit;
    }
    for (const auto& nj : b.new_jobs) {
      jobs_[nj.job.id] = nj.job;
      for (const auto& t : nj.tasks) tasks_[{t.job, t.index}] = t;
    }
    for (const auto& t : b.tasks_added) tasks_[{t.job, t.index}] = t;
    for (const auto& l : b.leases_granted) leases_[l.id] = l;
    for (LeaseId id : b.leases_ended) leases_.erase(id);
    for (const auto& u : b.task_updates) {
      auto& t = tasks_[{u.job, u.index}];
      t.state = u.state;
      t.attempts = u.attempts;
      t.output = u.output;
      t.runtime_us = u.runtime_us;
      t.target = u.target;
    }
    for (const auto& r : b.replicas_added) replicas_[{r.job, r.index, r.agent}] = r;
    for (const auto& v : b.verdicts) {
      auto it = replicas_.find({v.job, v.index, v.agent});
      if (it != replicas_.end()) it->second.verdict = v.verdict;
    }
    for (const auto& [id, rep] : b.reputations) reputations_[id] = rep;
    for (const auto& o : b.blob_owners) blob_owners_.insert({o.hash, o.user});
    for (const auto& u : b.job_updates) {
      auto& j = jobs_[u.id];
      j.state = u.state;
      j.finished = u.finished;
      j.result_json = u.result_json;
      j.error = u.error;
      j.task_runtime_us = u.task_runtime_us;
      if (u.n_tasks) j.n_tasks = u.n_tasks;
    }
    if (b.next_lease_id) next_lease_id_ = b.next_lease_id;
    return Status::Ok();
  }

  Result<RecoveredState> Load() override {
    MutexLock lock(mu_);
    RecoveredState s;
    for (const auto& [id, j] : jobs_) s.jobs.push_back(j);
    for (const auto& [key, t] : tasks_) {
      if (jobs_.at(t.job).state == JobState::kRunning) s.tasks.push_back(t);
    }
    for (const auto& [id, l] : leases_) s.leases.push_back(l);
    for (const auto& [key, r] : replicas_) {
      bool running = jobs_.at(r.job).state == JobState::kRunning;
      if (((r.verdict == Verdict::kPending || r.verdict == Verdict::kVouched) && running) ||
          r.verdict == Verdict::kUnverified) {
        s.replicas.push_back(r);
      }
    }
    s.reputations.insert(reputations_.begin(), reputations_.end());
    s.next_lease_id = next_lease_id_;
    return s;
  }

  Status AddEnrollTokens(const std::vector<std::string>& hashes, Time expires,
                         const std::string& owner) override {
    MutexLock lock(mu_);
    for (const auto& h : hashes) tokens_[h] = Token{expires, "", owner};
    return Status::Ok();
  }

  Result<bool> EnrollTokenUsable(const std::string& hash, Time now) override {
    MutexLock lock(mu_);
    auto it = tokens_.find(hash);
    return it != tokens_.end() && it->second.used_by.empty() && it->second.expires >= now;
  }

  Status EnrollAgent(const std::string& hash, const AgentRecord& agent, Time now) override {
    MutexLock lock(mu_);
    auto it = tokens_.find(hash);
    if (it == tokens_.end() || !it->second.used_by.empty() || it->second.expires < now) {
      return PermissionDenied("enrollment token is unknown, used or expired");
    }
    if (agents_.count(agent.id)) return {StatusCode::kAlreadyExists, "agent " + agent.id};
    it->second.used_by = agent.id;
    agents_[agent.id] = agent;
    agents_[agent.id].owner = it->second.owner;
    return Status::Ok();
  }

  Result<AgentRecord> GetAgent(const AgentId& id) override {
    MutexLock lock(mu_);
    auto it = agents_.find(id);
    if (it == agents_.end()) return NotFound("no agent " + id);
    AgentRecord a = it->second;
    if (auto r = reputations_.find(id); r != reputations_.end()) a.reputation = r->second;
    return a;
  }

  Status AddUser(const UserRecord& user) override {
    MutexLock lock(mu_);
    if (users_.count(user.name)) return {StatusCode::kAlreadyExists, "user " + user.name};
    users_[user.name] = user;
    return Status::Ok();
  }

  Result<UserRecord> FindUserByToken(const std::string& token_hash) override {
    MutexLock lock(mu_);
    for (const auto& [name, u] : users_) {
      if (u.token_hash == token_hash) return u;
    }
    return NotFound("no user with this token");
  }

  Result<std::vector<AgentRecord>> ListAgents() override {
    MutexLock lock(mu_);
    std::vector<AgentRecord> out;
    for (const auto& [id, a] : agents_) {
      out.push_back(a);
      if (auto r = reputations_.find(id); r != reputations_.end()) out.back().reputation = r->second;
    }
    return out;
  }

 private:
  Status AddBlobOwner(const BlobOwner& owner) override {
    MutexLock lock(mu_);
    blob_owners_.insert({owner.hash, owner.user});
    return Status::Ok();
  }

  Result<bool> IsBlobOwner(const BlobOwner& owner) override {
    MutexLock lock(mu_);
    return blob_owners_.count({owner.hash, owner.user}) > 0;
  }

  Status PutRound(const RoundRecord& r, const std::vector<LedgerEntry>& ledger) override {
    MutexLock lock(mu_);
    CLAW_RETURN_IF_ERROR(CheckLedger(ledger));
    AppendLedger(ledger);
    rounds_[{r.job, r.round}] = r;
    return Status::Ok();
  }

  Status PutLedgerCheckpoint(const std::string& text) override {
    MutexLock lock(mu_);
    ledger_checkpoint_ = text;
    return Status::Ok();
  }

  Result<std::string> LedgerCheckpoint() override {
    MutexLock lock(mu_);
    return ledger_checkpoint_;
  }

  Status AddHistory(const HistorySample& sample, Time keep_from) override {
    MutexLock lock(mu_);
    std::erase_if(history_, [&](const HistorySample& h) { return h.t < keep_from; });
    history_.push_back(sample);
    return Status::Ok();
  }

  Result<std::vector<HistorySample>> History(Time since) override {
    MutexLock lock(mu_);
    std::vector<HistorySample> out;
    for (const HistorySample& h : history_) {
      if (h.t >= since) out.push_back(h);
    }
    return out;
  }

  Result<int64_t> AddNotifyTarget(const NotifyTarget& t) override {
    MutexLock lock(mu_);
    NotifyTarget copy = t;
    copy.id = static_cast<int64_t>(targets_.size()) + 1;
    while (targets_.count(copy.id)) copy.id++;
    targets_[copy.id] = copy;
    return copy.id;
  }

  Result<std::vector<NotifyTarget>> NotifyTargets() override {
    MutexLock lock(mu_);
    std::vector<NotifyTarget> out;
    for (const auto& [id, t] : targets_) out.push_back(t);
    return out;
  }

  Status RemoveNotifyTarget(int64_t id, const std::string& user) override {
    MutexLock lock(mu_);
    auto it = targets_.find(id);
    if (it == targets_.end() || it->second.user != user) {
      return NotFound("no notification target " + std::to_string(id));
    }
    targets_.erase(it);
    return Status::Ok();
  }

  Result<std::vector<UserRecord>> ListUsers() override {
    MutexLock lock(mu_);
    std::vector<UserRecord> out;
    for (const auto& [name, u] : users_) out.push_back(u);
    return out;
  }

  Status SetTier(const std::string& user, const std::string& tier) override {
    MutexLock lock(mu_);
    auto it = users_.find(user);
    if (it == users_.end()) return NotFound("no user " + user);
    it->second.tier = tier;
    return Status::Ok();
  }

  Result<std::map<std::string, uint64_t>> MonthUsage(int32_t month) override {
    MutexLock lock(mu_);
    std::map<std::string, uint64_t> out;
    for (const auto& [key, us] : usage_) {
      if (key.second == month) out[key.first] = us;
    }
    return out;
  }

  Result<std::map<AgentId, CreditAccount>> CreditAccounts() override {
    MutexLock lock(mu_);
    return credits_;
  }

  Result<std::vector<CreditDay>> CreditDays(int64_t from_day, int64_t to_day) override {
    MutexLock lock(mu_);
    std::vector<CreditDay> out;
    for (auto it = credit_days_.lower_bound({from_day, ""});
         it != credit_days_.end() && it->first.first <= to_day; ++it) {
      out.push_back(it->second);
    }
    return out;
  }

  Result<std::vector<LedgerEntry>> LedgerEntries(uint64_t begin, uint64_t end) override {
    MutexLock lock(mu_);
    std::vector<LedgerEntry> out;
    for (uint64_t i = begin; i < std::min<uint64_t>(end, ledger_.size()); ++i) {
      out.push_back(LedgerEntry{i, ledger_[i]});
    }
    return out;
  }

  // As SQLite's primary key does: an index that is taken, or one past the
  // end, fails the transaction.
  Status CheckLedger(const std::vector<LedgerEntry>& entries) const CLAW_REQUIRES(mu_) {
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].index != ledger_.size() + i) {
        return Internal("ledger entry " + std::to_string(entries[i].index) + " out of order");
      }
    }
    return Status::Ok();
  }
  void AppendLedger(const std::vector<LedgerEntry>& entries) CLAW_REQUIRES(mu_) {
    for (const auto& e : entries) ledger_.push_back(e.data);
  }

  Result<std::vector<RoundRecord>> Rounds(const JobId& job) override {
    MutexLock lock(mu_);
    std::vector<RoundRecord> out;
    for (auto it = rounds_.lower_bound({job, 0}); it != rounds_.end() && it->first.first == job; ++it) {
      out.push_back(it->second);
    }
    return out;
  }

  struct Token {
    Time expires;
    std::string used_by;
    std::string owner;
  };
  Mutex mu_;
  std::map<JobId, JobRecord> jobs_ CLAW_GUARDED_BY(mu_);
  std::map<std::pair<JobId, uint32_t>, TaskRecord> tasks_ CLAW_GUARDED_BY(mu_);
  std::map<LeaseId, LeaseRecord> leases_ CLAW_GUARDED_BY(mu_);
  std::map<std::string, Token> tokens_ CLAW_GUARDED_BY(mu_);
  std::map<AgentId, AgentRecord> agents_ CLAW_GUARDED_BY(mu_);
  std::map<std::tuple<JobId, uint32_t, AgentId>, ReplicaRecord> replicas_ CLAW_GUARDED_BY(mu_);
  std::map<AgentId, Reputation> reputations_ CLAW_GUARDED_BY(mu_);
  std::map<std::string, UserRecord> users_ CLAW_GUARDED_BY(mu_);
  std::set<std::pair<std::string, std::string>> blob_owners_ CLAW_GUARDED_BY(mu_);
  std::map<std::pair<JobId, uint32_t>, RoundRecord> rounds_ CLAW_GUARDED_BY(mu_);
  std::map<AgentId, CreditAccount> credits_ CLAW_GUARDED_BY(mu_);
  std::map<std::pair<int64_t, AgentId>, CreditDay> credit_days_ CLAW_GUARDED_BY(mu_);
  std::vector<std::string> ledger_ CLAW_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int32_t>, uint64_t> usage_ CLAW_GUARDED_BY(mu_);
  std::map<int64_t, NotifyTarget> targets_ CLAW_GUARDED_BY(mu_);
  std::string ledger_checkpoint_ CLAW_GUARDED_BY(mu_);
  std::vector<HistorySample> history_ CLAW_GUARDED_BY(mu_);
  LeaseId next_lease_id_ CLAW_GUARDED_BY(mu_) = 1;
};

}  // namespace

std::unique_ptr<Store> NewMemoryStore() { return std::make_unique<MemoryStore>(); }

}  // namespace claw
