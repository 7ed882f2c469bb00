// SqliteStore: the Store in one SQLite database file (WAL mode).
//
// Every statement is prepared once and bound by name; no SQL is assembled
// from values. Apply runs one IMMEDIATE transaction per batch, which is how
// writes are group-committed: the coordinator gathers the effects of a whole
// message (or several) into one batch.
#include <fcntl.h>
#include <sys/stat.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/mutex.h"
#include "store/sqlite_books.h"
#include "store/sqlite_schema.h"
#include "store/sqlite_stmt.h"

#include "store/store.h"

namespace claw {
namespace {

using sqlite_schema::kMigrations;
using sqlite_schema::kSchema;
using sqlite_schema::kSchemaVersion;


class SqliteStore final : public Store {
 public:
  SqliteStore(sqlite3* db, int lock_fd) : db_(db), lock_fd_(lock_fd) {}
  ~SqliteStore() override {
    // close_v2 defers the close until the member statements are finalized.
    sqlite3_close_v2(db_);
    if (lock_fd_ >= 0) close(lock_fd_);  // releases the flock
  }

  Status Prepare() {
    MutexLock lock(mu_);
    auto add = [&](Stmt& s, const char* sql) CLAW_REQUIRES(mu_) {
      s = Stmt(db_, sql);
      return s.error();
    };
    const std::pair<Stmt*, const char*> all[] = {
        {&insert_job_,
         "INSERT INTO jobs (id, owner, spec, state, created_us, finished_us, n_tasks, result, "
         "error) VALUES (:id, :owner, :spec, :state, :created, 0, :n, '', '')"},
        {&insert_task_,
         "INSERT INTO tasks (job, idx, params, cost, state, attempts, output, runtime_us, target) "
         "VALUES (:job, :idx, :params, :cost, 0, 0, x'', 0, :target)"},
        {&insert_lease_,
         "INSERT INTO leases (id, job, idx, agent, deadline_us) "
         "VALUES (:id, :job, :idx, :agent, :deadline)"},
        {&delete_lease_, "DELETE FROM leases WHERE id = :id"},
        {&update_task_,
         "UPDATE tasks SET state = :state, attempts = :attempts, output = :output, "
         "runtime_us = :runtime, target = :target WHERE job = :job AND idx = :idx"},
        {&insert_replica_,
         "INSERT OR REPLACE INTO replicas (job, idx, agent, output, runtime_us, verdict, lease) "
         "VALUES (:job, :idx, :agent, :output, :runtime, 0, :lease)"},
        {&update_verdict_,
         "UPDATE replicas SET verdict = :verdict WHERE job = :job AND idx = :idx AND agent = :agent"},
        {&update_reputation_,
         "UPDATE agents SET valid = :valid, invalid = :invalid, error_rate = :rate, "
         "streak = :streak WHERE id = :id"},
        {&select_replicas_,
         "SELECT r.job, r.idx, r.agent, r.output, r.runtime_us, r.verdict, r.lease FROM replicas r "
         "JOIN jobs j ON j.id = r.job "
         "WHERE (j.state = 0 AND r.verdict IN (0, 4)) OR r.verdict = 3"},
        {&select_reputations_, "SELECT id, valid, invalid, error_rate, streak FROM agents"},
        {&insert_user_,
         "INSERT INTO users (name, tier, token_hash, created_us) "
         "VALUES (:name, :tier, :hash, :created)"},
        {&select_user_,
         "SELECT name, tier, token_hash, created_us FROM users WHERE token_hash = :hash"},
        {&select_agents_,
         "SELECT id, public_key, device, enrolled_us, valid, invalid, error_rate, streak, owner "
         "FROM agents ORDER BY id"},
        {&update_job_,
         "UPDATE jobs SET state = :state, finished_us = :finished, result = :result, "
         "error = :error, task_runtime_us = :runtime, "
         "n_tasks = CASE WHEN :n > 0 THEN :n ELSE n_tasks END WHERE id = :id"},
        {&set_next_lease_, "UPDATE meta SET value = :v WHERE key = 'next_lease_id'"},
        {&begin_, "BEGIN IMMEDIATE"},
        {&commit_, "COMMIT"},
        {&rollback_, "ROLLBACK"},
        {&select_jobs_,
         "SELECT id, owner, spec, state, created_us, finished_us, n_tasks, result, error, "
         "task_runtime_us FROM jobs"},
        {&select_tasks_,
         "SELECT t.job, t.idx, t.params, t.cost, t.state, t.attempts, t.output, t.runtime_us, "
         "t.target FROM tasks t JOIN jobs j ON j.id = t.job WHERE j.state = 0"},
        {&select_leases_, "SELECT id, job, idx, agent, deadline_us FROM leases"},
        {&select_next_lease_, "SELECT value FROM meta WHERE key = 'next_lease_id'"},
        {&insert_token_,
         "INSERT OR REPLACE INTO enroll_tokens (hash, expires_us, used_by, owner) "
         "VALUES (:hash, :expires, '', :owner)"},
        {&select_usable_token_,
         "SELECT 1 FROM enroll_tokens WHERE hash = :hash AND used_by = '' AND expires_us >= :now"},
        {&use_token_,
         "UPDATE enroll_tokens SET used_by = :agent WHERE hash = :hash AND used_by = '' "
         "AND expires_us >= :now"},
        {&insert_agent_,
         "INSERT INTO agents (id, public_key, device, enrolled_us, owner) "
         "VALUES (:id, :key, :device, :enrolled, "
         "(SELECT owner FROM enroll_tokens WHERE hash = :hash))"},
        {&select_agent_,
         "SELECT id, public_key, device, enrolled_us, valid, invalid, error_rate, streak, owner "
         "FROM agents WHERE id = :id"},
        {&insert_blob_owner_,
         "INSERT OR IGNORE INTO blob_owners (hash, user) VALUES (:hash, :user)"},
        {&select_blob_owner_,
         "SELECT 1 FROM blob_owners WHERE hash = :hash AND user = :user"},
        {&insert_round_,
         "INSERT OR REPLACE INTO rounds (job, round, model, state, residual, update_, info, "
         "finished_us) VALUES (:job, :round, :model, :state, :residual, :update, :info, :finished)"},
        {&upsert_credit_,
         "INSERT OR REPLACE INTO credits (agent, owner, total, results, rac, rac_time) "
         "VALUES (:agent, :owner, :total, :results, :rac, :rac_time)"},
        {&add_credit_day_,
         "INSERT INTO credit_days (day, agent, owner, credit) VALUES (:day, :agent, :owner, :credit) "
         "ON CONFLICT (day, agent) DO UPDATE SET credit = credit + excluded.credit"},
        {&insert_ledger_, "INSERT INTO ledger (idx, entry) VALUES (:idx, :entry)"},
        {&add_usage_,
         "INSERT INTO usage (user, month, node_us) VALUES (:user, :month, :us) "
         "ON CONFLICT (user, month) DO UPDATE SET node_us = node_us + excluded.node_us"},
        {&select_rounds_,
         "SELECT round, model, state, residual, update_, info, finished_us FROM rounds "
         "WHERE job = :job ORDER BY round"},
    };
    for (auto [stmt, sql] : all) {
      std::string err = add(*stmt, sql);
      if (!err.empty()) return Internal("sqlite prepare: " + err);
    }
    return books_.Prepare(db_);
  }

  Status Apply(const StoreBatch& b) override {
    if (b.empty()) return Status::Ok();
    MutexLock lock(mu_);
    CLAW_RETURN_IF_ERROR(begin_.Exec());
    Status st = ApplyLocked(b);
    if (st.ok()) st = commit_.Exec();
    if (!st.ok()) (void)rollback_.Exec();
    return st;
  }

  Result<RecoveredState> Load() override {
    MutexLock lock(mu_);
    RecoveredState s;
    while (select_jobs_.Row()) {
      JobRecord j;
      j.id = select_jobs_.Text(0);
      j.owner = select_jobs_.Text(1);
      j.spec_json = select_jobs_.Text(2);
      j.state = static_cast<JobState>(select_jobs_.Int(3));
      j.created = Time{select_jobs_.Int(4)};
      j.finished = Time{select_jobs_.Int(5)};
      j.n_tasks = static_cast<uint32_t>(select_jobs_.Int(6));
      j.result_json = select_jobs_.Text(7);
      j.error = select_jobs_.Text(8);
      j.task_runtime_us = static_cast<uint64_t>(select_jobs_.Int(9));
      s.jobs.push_back(std::move(j));
    }
    select_jobs_.Reset();
    while (select_tasks_.Row()) s.tasks.push_back(TaskRow(select_tasks_));
    select_tasks_.Reset();
    while (select_replicas_.Row()) {
      ReplicaRecord r;
      r.job = select_replicas_.Text(0);
      r.index = static_cast<uint32_t>(select_replicas_.Int(1));
      r.agent = select_replicas_.Text(2);
      r.output = select_replicas_.Text(3);
      r.runtime_us = static_cast<uint64_t>(select_replicas_.Int(4));
      r.verdict = static_cast<Verdict>(select_replicas_.Int(5));
      r.lease = static_cast<LeaseId>(select_replicas_.Int(6));
      s.replicas.push_back(std::move(r));
    }
    select_replicas_.Reset();
    while (select_reputations_.Row()) {
      s.reputations[select_reputations_.Text(0)] =
          Reputation{static_cast<uint64_t>(select_reputations_.Int(1)),
                     static_cast<uint64_t>(select_reputations_.Int(2)), select_reputations_.Real(3),
                     static_cast<uint64_t>(select_reputations_.Int(4))};
    }
    select_reputations_.Reset();
    while (select_leases_.Row()) {
      LeaseRecord l;
      l.id = static_cast<LeaseId>(select_leases_.Int(0));
      l.job = select_leases_.Text(1);
      l.index = static_cast<uint32_t>(select_leases_.Int(2));
      l.agent = select_leases_.Text(3);
      l.deadline = Time{select_leases_.Int(4)};
      s.leases.push_back(std::move(l));
    }
    select_leases_.Reset();
    if (select_next_lease_.Row()) s.next_lease_id = std::stoull(select_next_lease_.Text(0));
    select_next_lease_.Reset();
    return s;
  }

  Status AddEnrollTokens(const std::vector<std::string>& hashes, Time expires,
                         const std::string& owner) override {
    MutexLock lock(mu_);
    CLAW_RETURN_IF_ERROR(begin_.Exec());
    Status st;
    for (const auto& h : hashes) {
      st = insert_token_.Bind(":hash", h).Bind(":expires", expires.us).Bind(":owner", owner).Exec();
      if (!st.ok()) break;
    }
    if (st.ok()) st = commit_.Exec();
    if (!st.ok()) (void)rollback_.Exec();
    return st;
  }

  Status EnrollAgent(const std::string& hash, const AgentRecord& a, Time now) override {
    MutexLock lock(mu_);
    CLAW_RETURN_IF_ERROR(begin_.Exec());
    Status st = use_token_.Bind(":agent", a.id).Bind(":hash", hash).Bind(":now", now.us).Exec();
    if (st.ok() && sqlite3_changes(db_) != 1) {
      st = PermissionDenied("enrollment token is unknown, used or expired");
    }
    if (st.ok()) {
      st = insert_agent_.Bind(":id", a.id)
               .BindBlob(":key", a.public_key)
               .Bind(":device", a.device_json)
               .Bind(":enrolled", a.enrolled.us)
               .Bind(":hash", hash)
               .Exec();
    }
    if (st.ok()) st = commit_.Exec();
    if (!st.ok()) (void)rollback_.Exec();
    return st;
  }

  Result<AgentRecord> GetAgent(const AgentId& id) override {
    MutexLock lock(mu_);
    select_agent_.Bind(":id", id);
    if (!select_agent_.Row()) {
      select_agent_.Reset();
      return NotFound("no agent " + id);
    }
    AgentRecord a = AgentRow(select_agent_);
    select_agent_.Reset();
    return a;
  }

  Status AddUser(const UserRecord& u) override {
    MutexLock lock(mu_);
    Status st = insert_user_.Bind(":name", u.name)
                    .Bind(":tier", u.tier)
                    .Bind(":hash", u.token_hash)
                    .Bind(":created", u.created.us)
                    .Exec();
    if (!st.ok() && st.message().find("users.name") != std::string::npos) {
      return {StatusCode::kAlreadyExists, "user " + u.name + " already exists"};
    }
    return st;
  }

  Result<UserRecord> FindUserByToken(const std::string& token_hash) override {
    MutexLock lock(mu_);
    select_user_.Bind(":hash", token_hash);
    if (!select_user_.Row()) {
      select_user_.Reset();
      return NotFound("no user with this token");
    }
    UserRecord u{select_user_.Text(0), select_user_.Text(1), select_user_.Text(2),
                 Time{select_user_.Int(3)}};
    select_user_.Reset();
    return u;
  }

  Status AddBlobOwner(const BlobOwner& o) override {
    MutexLock lock(mu_);
    return insert_blob_owner_.Bind(":hash", o.hash).Bind(":user", o.user).Exec();
  }

  Result<bool> EnrollTokenUsable(const std::string& hash, Time now) override {
    MutexLock lock(mu_);
    select_usable_token_.Bind(":hash", hash).Bind(":now", now.us);
    bool usable = select_usable_token_.Row();
    select_usable_token_.Reset();
    return usable;
  }

  Result<bool> IsBlobOwner(const BlobOwner& o) override {
    MutexLock lock(mu_);
    select_blob_owner_.Bind(":hash", o.hash).Bind(":user", o.user);
    bool found = select_blob_owner_.Row();
    select_blob_owner_.Reset();
    return found;
  }

  Status PutRound(const RoundRecord& r, const std::vector<LedgerEntry>& ledger) override {
    MutexLock lock(mu_);
    CLAW_RETURN_IF_ERROR(begin_.Exec());
    Status st = insert_round_.Bind(":job", r.job)
                    .Bind(":round", static_cast<int64_t>(r.round))
                    .Bind(":model", r.model)
                    .Bind(":state", r.state)
                    .Bind(":residual", r.residual)
                    .Bind(":update", r.update)
                    .Bind(":info", r.info_json)
                    .Bind(":finished", r.finished.us)
                    .Exec();
    if (st.ok()) st = InsertLedger(ledger);
    if (st.ok()) st = commit_.Exec();
    if (!st.ok()) (void)rollback_.Exec();
    return st;
  }

  Result<std::map<AgentId, CreditAccount>> CreditAccounts() override {
    MutexLock lock(mu_);
    return books_.CreditAccounts();
  }

  Result<std::vector<CreditDay>> CreditDays(int64_t from_day, int64_t to_day) override {
    MutexLock lock(mu_);
    return books_.CreditDays(from_day, to_day);
  }

  Status PutLedgerCheckpoint(const std::string& text) override {
    MutexLock lock(mu_);
    return books_.PutLedgerCheckpoint(text);
  }

  Result<std::string> LedgerCheckpoint() override {
    MutexLock lock(mu_);
    return books_.LedgerCheckpoint();
  }

  Status AddHistory(const HistorySample& h, Time keep_from) override {
    MutexLock lock(mu_);
    return books_.AddHistory(h, keep_from);
  }

  Result<std::vector<HistorySample>> History(Time since) override {
    MutexLock lock(mu_);
    return books_.History(since);
  }

  Result<int64_t> AddNotifyTarget(const NotifyTarget& t) override {
    MutexLock lock(mu_);
    return books_.AddNotifyTarget(t);
  }

  Result<std::vector<NotifyTarget>> NotifyTargets() override {
    MutexLock lock(mu_);
    return books_.NotifyTargets();
  }

  Status RemoveNotifyTarget(int64_t id, const std::string& user) override {
    MutexLock lock(mu_);
    return books_.RemoveNotifyTarget(id, user);
  }

  Result<std::map<std::string, uint64_t>> MonthUsage(int32_t month) override {
    MutexLock lock(mu_);
    return books_.MonthUsage(month);
  }

  Result<std::vector<UserRecord>> ListUsers() override {
    MutexLock lock(mu_);
    return books_.ListUsers();
  }

  Status SetTier(const std::string& user, const std::string& tier) override {
    MutexLock lock(mu_);
    return books_.SetTier(user, tier);
  }

  Result<std::vector<LedgerEntry>> LedgerEntries(uint64_t begin, uint64_t end) override {
    MutexLock lock(mu_);
    return books_.LedgerEntries(begin, end);
  }

  Result<std::vector<RoundRecord>> Rounds(const JobId& job) override {
    MutexLock lock(mu_);
    std::vector<RoundRecord> out;
    select_rounds_.Bind(":job", job);
    while (select_rounds_.Row()) {
      RoundRecord r;
      r.job = job;
      r.round = static_cast<uint32_t>(select_rounds_.Int(0));
      r.model = select_rounds_.Text(1);
      r.state = select_rounds_.Text(2);
      r.residual = select_rounds_.Text(3);
      r.update = select_rounds_.Text(4);
      r.info_json = select_rounds_.Text(5);
      r.finished.us = select_rounds_.Int(6);
      out.push_back(std::move(r));
    }
    select_rounds_.Reset();
    return out;
  }

  Result<std::vector<AgentRecord>> ListAgents() override {
    MutexLock lock(mu_);
    std::vector<AgentRecord> out;
    while (select_agents_.Row()) out.push_back(AgentRow(select_agents_));
    select_agents_.Reset();
    return out;
  }

 private:
  // job, idx, params, cost, state, attempts, output, runtime_us, target
  static TaskRecord TaskRow(Stmt& s) {
    TaskRecord t;
    t.job = s.Text(0);
    t.index = static_cast<uint32_t>(s.Int(1));
    t.params = s.Text(2);
    t.cost_flop = s.Real(3);
    t.state = static_cast<TaskState>(s.Int(4));
    t.attempts = static_cast<uint32_t>(s.Int(5));
    t.output = s.Text(6);
    t.runtime_us = static_cast<uint64_t>(s.Int(7));
    t.target = static_cast<uint32_t>(s.Int(8));
    return t;
  }

  // id, public_key, device, enrolled_us, valid, invalid, error_rate, streak, owner
  static AgentRecord AgentRow(Stmt& s) {
    return AgentRecord{s.Text(0), s.Text(1), s.Text(2), Time{s.Int(3)},
                       Reputation{static_cast<uint64_t>(s.Int(4)),
                                  static_cast<uint64_t>(s.Int(5)), s.Real(6),
                                  static_cast<uint64_t>(s.Int(7))},
                       s.Text(8)};
  }

  Status InsertTask(const TaskRecord& t) CLAW_REQUIRES(mu_) {
    return insert_task_.Bind(":job", t.job)
        .Bind(":idx", int64_t{t.index})
        .BindBlob(":params", t.params)
        .Bind(":cost", t.cost_flop)
        .Bind(":target", int64_t{t.target})
        .Exec();
  }

  Status ApplyLocked(const StoreBatch& b) CLAW_REQUIRES(mu_) {
    for (const auto& nj : b.new_jobs) {
      const JobRecord& j = nj.job;
      CLAW_RETURN_IF_ERROR(insert_job_.Bind(":id", j.id)
                               .Bind(":owner", j.owner)
                               .Bind(":spec", j.spec_json)
                               .Bind(":state", int64_t{static_cast<int>(j.state)})
                               .Bind(":created", j.created.us)
                               .Bind(":n", int64_t{j.n_tasks})
                               .Exec());
      for (const auto& t : nj.tasks) CLAW_RETURN_IF_ERROR(InsertTask(t));
    }
    // Before task_updates, which may already name them.
    for (const auto& t : b.tasks_added) CLAW_RETURN_IF_ERROR(InsertTask(t));
    for (const auto& l : b.leases_granted) {
      CLAW_RETURN_IF_ERROR(insert_lease_.Bind(":id", static_cast<int64_t>(l.id))
                               .Bind(":job", l.job)
                               .Bind(":idx", int64_t{l.index})
                               .Bind(":agent", l.agent)
                               .Bind(":deadline", l.deadline.us)
                               .Exec());
    }
    for (LeaseId id : b.leases_ended) {
      CLAW_RETURN_IF_ERROR(delete_lease_.Bind(":id", static_cast<int64_t>(id)).Exec());
    }
    for (const auto& u : b.task_updates) {
      CLAW_RETURN_IF_ERROR(update_task_.Bind(":state", int64_t{static_cast<int>(u.state)})
                               .Bind(":attempts", int64_t{u.attempts})
                               .BindBlob(":output", u.output)
                               .Bind(":runtime", static_cast<int64_t>(u.runtime_us))
                               .Bind(":target", int64_t{u.target})
                               .Bind(":job", u.job)
                               .Bind(":idx", int64_t{u.index})
                               .Exec());
    }
    for (const auto& u : b.job_updates) {
      CLAW_RETURN_IF_ERROR(update_job_.Bind(":state", int64_t{static_cast<int>(u.state)})
                               .Bind(":finished", u.finished.us)
                               .Bind(":result", u.result_json)
                               .Bind(":error", u.error)
                               .Bind(":runtime", static_cast<int64_t>(u.task_runtime_us))
                               .Bind(":n", int64_t{u.n_tasks})
                               .Bind(":id", u.id)
                               .Exec());
    }
    for (const auto& r : b.replicas_added) {
      CLAW_RETURN_IF_ERROR(insert_replica_.Bind(":job", r.job)
                               .Bind(":idx", int64_t{r.index})
                               .Bind(":agent", r.agent)
                               .BindBlob(":output", r.output)
                               .Bind(":runtime", static_cast<int64_t>(r.runtime_us))
                               .Bind(":lease", static_cast<int64_t>(r.lease))
                               .Exec());
    }
    for (const auto& v : b.verdicts) {
      CLAW_RETURN_IF_ERROR(update_verdict_.Bind(":verdict", int64_t{static_cast<int>(v.verdict)})
                               .Bind(":job", v.job)
                               .Bind(":idx", int64_t{v.index})
                               .Bind(":agent", v.agent)
                               .Exec());
    }
    for (const auto& [id, rep] : b.reputations) {
      CLAW_RETURN_IF_ERROR(update_reputation_.Bind(":valid", static_cast<int64_t>(rep.valid))
                               .Bind(":invalid", static_cast<int64_t>(rep.invalid))
                               .Bind(":rate", rep.error_rate)
                               .Bind(":streak", static_cast<int64_t>(rep.streak))
                               .Bind(":id", id)
                               .Exec());
    }
    for (const auto& o : b.blob_owners) {
      CLAW_RETURN_IF_ERROR(insert_blob_owner_.Bind(":hash", o.hash).Bind(":user", o.user).Exec());
    }
    for (const auto& [agent, a] : b.credit_changes.accounts) {
      CLAW_RETURN_IF_ERROR(upsert_credit_.Bind(":agent", agent)
                               .Bind(":owner", a.owner)
                               .Bind(":total", a.total)
                               .Bind(":results", static_cast<int64_t>(a.results))
                               .Bind(":rac", a.recent.average)
                               .Bind(":rac_time", a.recent.updated_s)
                               .Exec());
    }
    for (const auto& [key, credit] : b.credit_changes.days) {
      auto it = b.credit_changes.accounts.find(key.second);
      const std::string owner = it == b.credit_changes.accounts.end() ? "" : it->second.owner;
      CLAW_RETURN_IF_ERROR(add_credit_day_.Bind(":day", key.first)
                               .Bind(":agent", key.second)
                               .Bind(":owner", owner)
                               .Bind(":credit", credit)
                               .Exec());
    }
    CLAW_RETURN_IF_ERROR(InsertLedger(b.ledger));
    for (const UsageCharge& c : b.usage) {  // few: the scheduler folds them by user
      CLAW_RETURN_IF_ERROR(add_usage_.Bind(":user", c.user)
                               .Bind(":month", int64_t{b.usage_month})
                               .Bind(":us", static_cast<int64_t>(c.node_us))
                               .Exec());
    }
    if (b.next_lease_id) {
      CLAW_RETURN_IF_ERROR(
          set_next_lease_.Bind(":v", std::to_string(b.next_lease_id)).Exec());
    }
    return Status::Ok();
  }

  Status InsertLedger(const std::vector<LedgerEntry>& entries) CLAW_REQUIRES(mu_) {
    for (const auto& e : entries) {
      CLAW_RETURN_IF_ERROR(insert_ledger_.Bind(":idx", static_cast<int64_t>(e.index))
                               .BindBlob(":entry", e.data)
                               .Exec());
    }
    return Status::Ok();
  }

  // Every statement is used under mu_ (the connection is not shared).
  Mutex mu_;
  sqlite3* db_;
  int lock_fd_;
  Stmt insert_job_ CLAW_GUARDED_BY(mu_);
  Stmt insert_task_ CLAW_GUARDED_BY(mu_);
  Stmt insert_lease_ CLAW_GUARDED_BY(mu_);
  Stmt delete_lease_ CLAW_GUARDED_BY(mu_);
  Stmt update_task_ CLAW_GUARDED_BY(mu_);
  Stmt update_job_ CLAW_GUARDED_BY(mu_);
  Stmt set_next_lease_ CLAW_GUARDED_BY(mu_);
  Stmt begin_ CLAW_GUARDED_BY(mu_);
  Stmt commit_ CLAW_GUARDED_BY(mu_);
  Stmt rollback_ CLAW_GUARDED_BY(mu_);
  Stmt select_jobs_ CLAW_GUARDED_BY(mu_);
  Stmt select_tasks_ CLAW_GUARDED_BY(mu_);
  Stmt select_leases_ CLAW_GUARDED_BY(mu_);
  Stmt select_next_lease_ CLAW_GUARDED_BY(mu_);
  Stmt insert_token_ CLAW_GUARDED_BY(mu_);
  Stmt select_usable_token_ CLAW_GUARDED_BY(mu_);
  Stmt use_token_ CLAW_GUARDED_BY(mu_);
  Stmt insert_agent_ CLAW_GUARDED_BY(mu_);
  Stmt select_agent_ CLAW_GUARDED_BY(mu_);
  Stmt insert_replica_ CLAW_GUARDED_BY(mu_);
  Stmt update_verdict_ CLAW_GUARDED_BY(mu_);
  Stmt update_reputation_ CLAW_GUARDED_BY(mu_);
  Stmt select_replicas_ CLAW_GUARDED_BY(mu_);
  Stmt select_reputations_ CLAW_GUARDED_BY(mu_);
  Stmt select_agents_ CLAW_GUARDED_BY(mu_);
  Stmt insert_user_ CLAW_GUARDED_BY(mu_);
  Stmt select_user_ CLAW_GUARDED_BY(mu_);
  Stmt insert_blob_owner_ CLAW_GUARDED_BY(mu_);
  Stmt select_blob_owner_ CLAW_GUARDED_BY(mu_);
  Stmt insert_round_ CLAW_GUARDED_BY(mu_);
  Stmt select_rounds_ CLAW_GUARDED_BY(mu_);
  SqliteBooks books_ CLAW_GUARDED_BY(mu_);
  Stmt add_usage_ CLAW_GUARDED_BY(mu_);
  Stmt upsert_credit_ CLAW_GUARDED_BY(mu_);
  Stmt add_credit_day_ CLAW_GUARDED_BY(mu_);
  Stmt insert_ledger_ CLAW_GUARDED_BY(mu_);
};

Result<int> LockDatabase(const std::string& path) {
  std::string lock_path = path + ".lock";
  int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable("cannot open lock file " + lock_path + ": " + strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char buf[32] = {0};
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "unknown";
    while (!holder.empty() && (holder.back() == '\n')) holder.pop_back();
    return FailedPrecondition("database " + path +
                              " is in use by another coordinator (pid " + holder +
                              "); stop it first or choose another --data dir");
  }
  std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The pid is only informational; the lock itself is held.
  }
  return fd;
}

// The schema version a database was written with; 0 for a new, empty one.
Result<int> SchemaVersion(sqlite3* db, const std::string& path) {
  int version = 0;
  auto read = [](void* out, int, char** values, char**) {
    *static_cast<int*>(out) = values[0] ? std::atoi(values[0]) : 0;
    return 0;
  };
  char* err = nullptr;
  int rc = sqlite3_exec(db,
                        "SELECT value FROM meta WHERE key = 'schema_version' AND EXISTS "
                        "(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta')",
                        read, &version, &err);
  if (rc != SQLITE_OK && std::string(err ? err : "").find("no such table") == std::string::npos) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return Internal("cannot read the schema version of " + path + ": " + msg);
  }
  sqlite3_free(err);
  return version;
}

// Brings a database written by an older version up to kSchemaVersion, one
// transaction per step.
Status Migrate(sqlite3* db, const std::string& path, int version) {
  for (; version < kSchemaVersion; ++version) {
    std::string step = std::string("BEGIN IMMEDIATE;") + kMigrations[version - 1] + "COMMIT;";
    char* err = nullptr;
    if (sqlite3_exec(db, step.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "unknown error";
      sqlite3_free(err);
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      return Internal("cannot upgrade " + path + " from schema version " +
                      std::to_string(version) + ": " + msg);
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path,
                                               const SqliteOptions& options) {
  auto lock = LockDatabase(path);
  if (!lock.ok()) return lock.status();
  // The database holds token hashes and every user's jobs: readable by its
  // owner alone. SQLite gives the -wal and -shm files the database's mode;
  // files left by a version that made them 0644 are narrowed too.
  if (int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600); fd >= 0) close(fd);
  for (const char* suffix : {"", "-wal", "-shm"}) chmod((path + suffix).c_str(), 0600);
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string err = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    close(*lock);
    return Unavailable("cannot open database " + path + ": " + err);
  }
  auto store = std::make_unique<SqliteStore>(db, *lock);
  if (options.synchronous != "NORMAL" && options.synchronous != "FULL") {
    return InvalidArgument("synchronous must be NORMAL or FULL");
  }
  std::string pragmas = "PRAGMA journal_mode=WAL; PRAGMA synchronous=" + options.synchronous +
                        "; PRAGMA busy_timeout=5000; PRAGMA foreign_keys=OFF;";
  char* err = nullptr;
  if (sqlite3_exec(db, pragmas.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return Internal("cannot initialise database " + path + ": " + msg);
  }
  auto version = SchemaVersion(db, path);
  if (!version.ok()) return version.status();
  if (*version > kSchemaVersion) {
    return FailedPrecondition(path + " has schema version " + std::to_string(*version) +
                              ", written by a newer coordinator; this one reads versions up to " +
                              std::to_string(kSchemaVersion));
  }
  // An older database is upgraded step by step first; then whatever is still
  // missing (everything, for a new one) is created at the current version.
  if (*version > 0) CLAW_RETURN_IF_ERROR(Migrate(db, path, *version));
  if (sqlite3_exec(db, kSchema, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return Internal("cannot initialise database " + path + ": " + msg);
  }
  CLAW_RETURN_IF_ERROR(store->Prepare());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace claw
