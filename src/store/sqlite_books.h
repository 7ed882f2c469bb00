// The bookkeeping side of SqliteStore (credit, the ledger's reads and
// checkpoint, the network's history, notification targets, usage, users):
// the same connection, its own prepared statements. Not thread-safe:
// SqliteStore calls it under its mutex, as it uses its own statements.
#pragma once

#include <sqlite3.h>

#include <map>
#include <string>
#include <vector>

#include "store/sqlite_stmt.h"
#include "store/store.h"

namespace claw {

class SqliteBooks {
 public:
  Status Prepare(sqlite3* db);

  Result<std::map<AgentId, CreditAccount>> CreditAccounts();
  Result<std::vector<CreditDay>> CreditDays(int64_t from_day, int64_t to_day);
  Status PutLedgerCheckpoint(const std::string& text);
  Result<std::string> LedgerCheckpoint();
  Status AddHistory(const HistorySample& h, Time keep_from);
  Result<std::vector<HistorySample>> History(Time since);
  Result<int64_t> AddNotifyTarget(const NotifyTarget& t);
  Result<std::vector<NotifyTarget>> NotifyTargets();
  Status RemoveNotifyTarget(int64_t id, const std::string& user);
  Result<std::map<std::string, uint64_t>> MonthUsage(int32_t month);
  Result<std::vector<UserRecord>> ListUsers();
  Status SetTier(const std::string& user, const std::string& tier);
  Result<std::vector<LedgerEntry>> LedgerEntries(uint64_t begin, uint64_t end);

 private:
  sqlite3* db_ = nullptr;
  Stmt select_credits_;
  Stmt select_credit_days_;
  Stmt put_checkpoint_;
  Stmt get_checkpoint_;
  Stmt insert_history_;
  Stmt prune_history_;
  Stmt select_history_;
  Stmt insert_target_;
  Stmt select_targets_;
  Stmt delete_target_;
  Stmt select_usage_;
  Stmt select_users_;
  Stmt update_tier_;
  Stmt select_ledger_;
};

}  // namespace claw
