// Store: durable state of the coordinator.
//
// The scheduler describes what changed as a StoreBatch; Apply commits it in
// one transaction (all or nothing) before anyone is told about it. Load
// returns everything needed to rebuild the scheduler after a restart.
// Agents and one-time enrollment tokens live here too.
//
// Two implementations pass one conformance test: SqliteStore (the default,
// WAL, one process per database file) and MemoryStore (tests, simulation).
// Implementations are thread-safe (each call is atomic).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/credits.h"
#include "core/scheduler.h"
#include "core/types.h"

namespace claw {

class Store {
 public:
  virtual ~Store() = default;

  // Commits the batch atomically. On error nothing of it is stored.
  virtual Status Apply(const StoreBatch& batch) = 0;
  virtual Result<RecoveredState> Load() = 0;

  // Records one-time enrollment tokens, by hash, valid until `expires`; the
  // agents they enroll belong to `owner` (empty: unknown).
  virtual Status AddEnrollTokens(const std::vector<std::string>& token_hashes, Time expires,
                                 const std::string& owner) = 0;
  // Whether the token with this hash would enroll an agent at `now`
  // (known, unused, unexpired).
  virtual Result<bool> EnrollTokenUsable(const std::string& token_hash, Time now) = 0;
  // Consumes the token and records the agent, atomically, with the token's
  // owner as the agent's (agent.owner is ignored). PermissionDenied if the
  // token is unknown, used or expired; AlreadyExists if the id is taken.
  virtual Status EnrollAgent(const std::string& token_hash, const AgentRecord& agent, Time now) = 0;
  // NotFound if no such agent.
  virtual Result<AgentRecord> GetAgent(const AgentId& id) = 0;
  // Every enrolled agent, by id.
  virtual Result<std::vector<AgentRecord>> ListAgents() = 0;

  // AlreadyExists if the name is taken.
  virtual Status AddUser(const UserRecord& user) = 0;
  // NotFound if no user has a token with this hash.
  virtual Result<UserRecord> FindUserByToken(const std::string& token_hash) = 0;
  // Every user, by name.
  virtual Result<std::vector<UserRecord>> ListUsers() = 0;
  // NotFound if no such user.
  virtual Status SetTier(const std::string& user, const std::string& tier) = 0;
  // Run time used by each user's jobs in a month (UtcMonth), as
  // StoreBatch::usage adds it.
  virtual Result<std::map<std::string, uint64_t>> MonthUsage(int32_t month) = 0;

  // Who may read which blob (StoreBatch::blob_owners adds them too).
  // Idempotent.
  virtual Status AddBlobOwner(const BlobOwner& owner) = 0;
  virtual Result<bool> IsBlobOwner(const BlobOwner& owner) = 0;

  // Training jobs' finished rounds. Putting a round that is there already
  // replaces it (a round aggregated again after a restart is the same).
  // `ledger` entries are appended in the same transaction.
  virtual Status PutRound(const RoundRecord& round, const std::vector<LedgerEntry>& ledger) = 0;
  // The job's rounds, in order.
  virtual Result<std::vector<RoundRecord>> Rounds(const JobId& job) = 0;

  // The last checkpoint the ledger signed ("size base64-root"), so that a
  // restart can tell whether the stored entries still make it. Empty: none.
  virtual Status PutLedgerCheckpoint(const std::string& text) = 0;
  virtual Result<std::string> LedgerCheckpoint() = 0;

  // ---- notification targets ----
  // Returns the new target's id.
  virtual Result<int64_t> AddNotifyTarget(const NotifyTarget& target) = 0;
  virtual Result<std::vector<NotifyTarget>> NotifyTargets() = 0;
  // NotFound unless the target exists and is the user's.
  virtual Status RemoveNotifyTarget(int64_t id, const std::string& user) = 0;

  // ---- credits and the open ledger (StoreBatch::credit_changes, ledger) ----
  // Every agent's credit account.
  virtual Result<std::map<AgentId, CreditAccount>> CreditAccounts() = 0;
  // Credit per agent and day, for days in [from_day, to_day], by day.
  virtual Result<std::vector<CreditDay>> CreditDays(int64_t from_day, int64_t to_day) = 0;
  // The ledger's entries with index in [begin, end), in order. An entry is
  // never changed or removed; appending an index that exists fails the
  // whole transaction (Internal).
  virtual Result<std::vector<LedgerEntry>> LedgerEntries(uint64_t begin, uint64_t end) = 0;

  // ---- the dashboard's history ----
  // Adds a sample and removes those older than `keep_from`.
  virtual Status AddHistory(const HistorySample& sample, Time keep_from) = 0;
  // Samples taken at or after `since`, oldest first.
  virtual Result<std::vector<HistorySample>> History(Time since) = 0;
};

std::unique_ptr<Store> NewMemoryStore();

struct SqliteOptions {
  // PRAGMA synchronous: "NORMAL" (WAL: durable against process crashes,
  // may lose the last commits on power loss) or "FULL".
  std::string synchronous = "NORMAL";
};

// Opens (creating if needed) the database at `path` and takes an exclusive
// lock on `path + ".lock"`. FailedPrecondition, naming the holder, if another
// process has the database open.
Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path,
                                               const SqliteOptions& options = {});

}  // namespace claw
