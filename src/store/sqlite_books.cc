#include "store/sqlite_books.h"

#include <algorithm>
#include <cstdint>

namespace claw {

Status SqliteBooks::Prepare(sqlite3* db) {
  db_ = db;
  const std::pair<Stmt*, const char*> all[] = {
    {&select_credits_, "SELECT agent, owner, total, results, rac, rac_time FROM credits"},
    {&select_credit_days_,
     "SELECT day, agent, owner, credit FROM credit_days WHERE day >= :from AND day <= :to "
     "ORDER BY day, agent"},
    {&put_checkpoint_,
     "INSERT OR REPLACE INTO meta (key, value) VALUES ('ledger_checkpoint', :v)"},
    {&get_checkpoint_, "SELECT value FROM meta WHERE key = 'ledger_checkpoint'"},
    {&insert_history_,
     "INSERT OR REPLACE INTO history VALUES (:t, :working, :idle, :busy, :paused, :offline, "
     ":flops, :tps, :queue)"},
    {&prune_history_, "DELETE FROM history WHERE t_us < :t"},
    {&select_history_, "SELECT * FROM history WHERE t_us >= :t ORDER BY t_us"},
    {&insert_target_,
     "INSERT INTO notify_targets (user, kind, url, secret, created_us) "
     "VALUES (:user, :kind, :url, :secret, :created)"},
    {&select_targets_,
     "SELECT id, user, kind, url, secret, created_us FROM notify_targets ORDER BY id"},
    {&delete_target_, "DELETE FROM notify_targets WHERE id = :id AND user = :user"},
    {&select_usage_, "SELECT user, node_us FROM usage WHERE month = :month"},
    {&select_users_, "SELECT name, tier, token_hash, created_us FROM users ORDER BY name"},
    {&update_tier_, "UPDATE users SET tier = :tier WHERE name = :name"},
    {&select_ledger_,
     "SELECT idx, entry FROM ledger WHERE idx >= :begin AND idx < :end ORDER BY idx"},
  };
  for (auto [stmt, sql] : all) {
    *stmt = Stmt(db, sql);
    if (!stmt->error().empty()) return Internal("sqlite prepare: " + stmt->error());
  }
  return Status::Ok();
}

Result<std::map<AgentId, CreditAccount>> SqliteBooks::CreditAccounts() {
  std::map<AgentId, CreditAccount> out;
  while (select_credits_.Row()) {
    CreditAccount& a = out[select_credits_.Text(0)];
    a.owner = select_credits_.Text(1);
    a.total = select_credits_.Real(2);
    a.results = static_cast<uint64_t>(select_credits_.Int(3));
    a.recent = RecentAverage{select_credits_.Real(4), select_credits_.Real(5)};
  }
  select_credits_.Reset();
  return out;
}

Result<std::vector<CreditDay>> SqliteBooks::CreditDays(int64_t from_day, int64_t to_day) {
  std::vector<CreditDay> out;
  select_credit_days_.Bind(":from", from_day).Bind(":to", to_day);
  while (select_credit_days_.Row()) {
    out.push_back(CreditDay{select_credit_days_.Int(0), select_credit_days_.Text(1),
                            select_credit_days_.Text(2), select_credit_days_.Real(3)});
  }
  select_credit_days_.Reset();
  return out;
}

Status SqliteBooks::PutLedgerCheckpoint(const std::string& text) {
  return put_checkpoint_.Bind(":v", text).Exec();
}

Result<std::string> SqliteBooks::LedgerCheckpoint() {
  std::string out = get_checkpoint_.Row() ? get_checkpoint_.Text(0) : "";
  get_checkpoint_.Reset();
  return out;
}

Status SqliteBooks::AddHistory(const HistorySample& h, Time keep_from) {
  CLAW_RETURN_IF_ERROR(prune_history_.Bind(":t", keep_from.us).Exec());
  return insert_history_.Bind(":t", h.t.us).Bind(":working", int64_t{h.working})
      .Bind(":idle", int64_t{h.idle}).Bind(":busy", int64_t{h.owner_busy})
      .Bind(":paused", int64_t{h.paused}).Bind(":offline", int64_t{h.offline})
      .Bind(":flops", h.flops).Bind(":tps", h.tasks_per_s)
      .Bind(":queue", static_cast<int64_t>(h.queue)).Exec();
}

Result<std::vector<HistorySample>> SqliteBooks::History(Time since) {
  std::vector<HistorySample> out;
  select_history_.Bind(":t", since.us);
  while (select_history_.Row()) {
    HistorySample& h = out.emplace_back();
    h.t.us = select_history_.Int(0);
    uint32_t* counts[] = {&h.working, &h.idle, &h.owner_busy, &h.paused, &h.offline};
    for (int col = 1; col <= 5; ++col) *counts[col - 1] = static_cast<uint32_t>(select_history_.Int(col));
    h.flops = select_history_.Real(6);
    h.tasks_per_s = select_history_.Real(7);
    h.queue = static_cast<uint64_t>(select_history_.Int(8));
  }
  select_history_.Reset();
  return out;
}

Result<int64_t> SqliteBooks::AddNotifyTarget(const NotifyTarget& t) {
  CLAW_RETURN_IF_ERROR(insert_target_.Bind(":user", t.user)
                           .Bind(":kind", t.kind)
                           .Bind(":url", t.url)
                           .Bind(":secret", t.secret)
                           .Bind(":created", t.created.us)
                           .Exec());
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

Result<std::vector<NotifyTarget>> SqliteBooks::NotifyTargets() {
  std::vector<NotifyTarget> out;
  while (select_targets_.Row()) {
    out.push_back(NotifyTarget{select_targets_.Int(0), select_targets_.Text(1),
                               select_targets_.Text(2), select_targets_.Text(3),
                               select_targets_.Text(4), Time{select_targets_.Int(5)}});
  }
  select_targets_.Reset();
  return out;
}

Status SqliteBooks::RemoveNotifyTarget(int64_t id, const std::string& user) {
  CLAW_RETURN_IF_ERROR(delete_target_.Bind(":id", id).Bind(":user", user).Exec());
  if (sqlite3_changes(db_) != 1) return NotFound("no notification target " + std::to_string(id));
  return Status::Ok();
}

Result<std::map<std::string, uint64_t>> SqliteBooks::MonthUsage(int32_t month) {
  std::map<std::string, uint64_t> out;
  select_usage_.Bind(":month", int64_t{month});
  while (select_usage_.Row()) out[select_usage_.Text(0)] = static_cast<uint64_t>(select_usage_.Int(1));
  select_usage_.Reset();
  return out;
}

Result<std::vector<UserRecord>> SqliteBooks::ListUsers() {
  std::vector<UserRecord> out;
  while (select_users_.Row()) {
    out.push_back(UserRecord{select_users_.Text(0), select_users_.Text(1), select_users_.Text(2),
                             Time{select_users_.Int(3)}});
  }
  select_users_.Reset();
  return out;
}

Status SqliteBooks::SetTier(const std::string& user, const std::string& tier) {
  CLAW_RETURN_IF_ERROR(update_tier_.Bind(":tier", tier).Bind(":name", user).Exec());
  if (sqlite3_changes(db_) != 1) return NotFound("no user " + user);
  return Status::Ok();
}

Result<std::vector<LedgerEntry>> SqliteBooks::LedgerEntries(uint64_t begin, uint64_t end) {
  std::vector<LedgerEntry> out;
  select_ledger_.Bind(":begin", static_cast<int64_t>(std::min<uint64_t>(begin, INT64_MAX)))
      .Bind(":end", static_cast<int64_t>(std::min<uint64_t>(end, INT64_MAX)));
  while (select_ledger_.Row()) {
    out.push_back(LedgerEntry{static_cast<uint64_t>(select_ledger_.Int(0)), select_ledger_.Text(1)});
  }
  select_ledger_.Reset();
  return out;
}

}  // namespace claw
