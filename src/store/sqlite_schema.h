// The SQLite store's schema: the tables as a new database gets them, and
// the steps that upgrade a database of each older version (one
// transaction each, at open). Included by sqlite_store.cc alone.
#pragma once

#include <iterator>

namespace claw::sqlite_schema {

constexpr int kSchemaVersion = 11;

// Upgrades from each older schema version to the next; index i upgrades from i+1.
constexpr const char* kMigrations[] = {
    // 1 -> 2: task run time per job
    "ALTER TABLE jobs ADD COLUMN task_runtime_us INTEGER NOT NULL DEFAULT 0;"
    "UPDATE meta SET value = '2' WHERE key = 'schema_version';",
    // 2 -> 3: redundancy (replicas awaiting a vote, reputations)
    "ALTER TABLE tasks ADD COLUMN target INTEGER NOT NULL DEFAULT 1;"
    "ALTER TABLE agents ADD COLUMN valid INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE agents ADD COLUMN invalid INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE agents ADD COLUMN error_rate REAL NOT NULL DEFAULT 0.1;"
    "CREATE TABLE IF NOT EXISTS replicas (job TEXT NOT NULL, idx INTEGER NOT NULL,"
    "  agent TEXT NOT NULL, output BLOB NOT NULL, runtime_us INTEGER NOT NULL,"
    "  verdict INTEGER NOT NULL, PRIMARY KEY (job, idx, agent)) WITHOUT ROWID;"
    "UPDATE meta SET value = '3' WHERE key = 'schema_version';",
    // 3 -> 4: adaptive replication
    "ALTER TABLE agents ADD COLUMN streak INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE replicas ADD COLUMN lease INTEGER NOT NULL DEFAULT 0;"
    "UPDATE meta SET value = '4' WHERE key = 'schema_version';",
    // 4 -> 5: users and API tokens
    "CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, tier TEXT NOT NULL,"
    "  token_hash TEXT NOT NULL UNIQUE, created_us INTEGER NOT NULL);"
    "UPDATE meta SET value = '5' WHERE key = 'schema_version';",
    // 5 -> 6: blob owners; agents and enrollment tokens belong to users
    "CREATE TABLE IF NOT EXISTS blob_owners (hash TEXT NOT NULL, user TEXT NOT NULL,"
    "  PRIMARY KEY (hash, user)) WITHOUT ROWID;"
    "ALTER TABLE agents ADD COLUMN owner TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE enroll_tokens ADD COLUMN owner TEXT NOT NULL DEFAULT '';"
    "UPDATE meta SET value = '6' WHERE key = 'schema_version';",
    // 6 -> 7: training jobs' rounds
    "CREATE TABLE IF NOT EXISTS rounds (job TEXT NOT NULL, round INTEGER NOT NULL,"
    "  model TEXT NOT NULL, state TEXT NOT NULL, residual TEXT NOT NULL, update_ TEXT NOT NULL,"
    "  info TEXT NOT NULL, finished_us INTEGER NOT NULL, PRIMARY KEY (job, round)) WITHOUT ROWID;"
    "UPDATE meta SET value = '7' WHERE key = 'schema_version';",
    // 7 -> 8: credits and the open ledger
    "CREATE TABLE IF NOT EXISTS credits (agent TEXT PRIMARY KEY, owner TEXT NOT NULL,"
    "  total REAL NOT NULL, results INTEGER NOT NULL, rac REAL NOT NULL, rac_time REAL NOT NULL);"
    "CREATE TABLE IF NOT EXISTS credit_days (day INTEGER NOT NULL, agent TEXT NOT NULL,"
    "  owner TEXT NOT NULL, credit REAL NOT NULL, PRIMARY KEY (day, agent)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS ledger (idx INTEGER PRIMARY KEY, entry BLOB NOT NULL);"
    "UPDATE meta SET value = '8' WHERE key = 'schema_version';",
    // 8 -> 9: usage by user and month (quotas)
    "CREATE TABLE IF NOT EXISTS usage (user TEXT NOT NULL, month INTEGER NOT NULL,"
    "  node_us INTEGER NOT NULL, PRIMARY KEY (user, month)) WITHOUT ROWID;"
    "UPDATE meta SET value = '9' WHERE key = 'schema_version';",
    // 9 -> 10: notification targets
    "CREATE TABLE IF NOT EXISTS notify_targets (id INTEGER PRIMARY KEY, user TEXT NOT NULL,"
    "  kind TEXT NOT NULL, url TEXT NOT NULL, secret TEXT NOT NULL, created_us INTEGER NOT NULL);"
    "UPDATE meta SET value = '10' WHERE key = 'schema_version';",
    // 10 -> 11: the dashboard's history
    "CREATE TABLE IF NOT EXISTS history (t_us INTEGER PRIMARY KEY, working INTEGER NOT NULL,"
    "  idle INTEGER NOT NULL, owner_busy INTEGER NOT NULL, paused INTEGER NOT NULL,"
    "  offline INTEGER NOT NULL, flops REAL NOT NULL, tasks_per_s REAL NOT NULL,"
    "  queue INTEGER NOT NULL);"
    "UPDATE meta SET value = '11' WHERE key = 'schema_version';",
};
static_assert(std::size(kMigrations) == kSchemaVersion - 1);

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY, owner TEXT NOT NULL, spec TEXT NOT NULL, state INTEGER NOT NULL,
  created_us INTEGER NOT NULL, finished_us INTEGER NOT NULL, n_tasks INTEGER NOT NULL,
  result TEXT NOT NULL, error TEXT NOT NULL, task_runtime_us INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS tasks (
  job TEXT NOT NULL, idx INTEGER NOT NULL, params BLOB NOT NULL, cost REAL NOT NULL,
  state INTEGER NOT NULL, attempts INTEGER NOT NULL, output BLOB NOT NULL,
  runtime_us INTEGER NOT NULL, target INTEGER NOT NULL DEFAULT 1,
  PRIMARY KEY (job, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS replicas (
  job TEXT NOT NULL, idx INTEGER NOT NULL, agent TEXT NOT NULL, output BLOB NOT NULL,
  runtime_us INTEGER NOT NULL, verdict INTEGER NOT NULL, lease INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (job, idx, agent)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leases (
  id INTEGER PRIMARY KEY, job TEXT NOT NULL, idx INTEGER NOT NULL, agent TEXT NOT NULL,
  deadline_us INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS agents (
  id TEXT PRIMARY KEY, public_key BLOB NOT NULL, device TEXT NOT NULL, enrolled_us INTEGER NOT NULL,
  valid INTEGER NOT NULL DEFAULT 0, invalid INTEGER NOT NULL DEFAULT 0,
  error_rate REAL NOT NULL DEFAULT 0.1, streak INTEGER NOT NULL DEFAULT 0,
  owner TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS users (
  name TEXT PRIMARY KEY, tier TEXT NOT NULL, token_hash TEXT NOT NULL UNIQUE,
  created_us INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS enroll_tokens (
  hash TEXT PRIMARY KEY, expires_us INTEGER NOT NULL, used_by TEXT NOT NULL DEFAULT '',
  owner TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS blob_owners (
  hash TEXT NOT NULL, user TEXT NOT NULL, PRIMARY KEY (hash, user)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rounds (
  job TEXT NOT NULL, round INTEGER NOT NULL, model TEXT NOT NULL, state TEXT NOT NULL,
  residual TEXT NOT NULL, update_ TEXT NOT NULL, info TEXT NOT NULL, finished_us INTEGER NOT NULL,
  PRIMARY KEY (job, round)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS credits (
  agent TEXT PRIMARY KEY, owner TEXT NOT NULL, total REAL NOT NULL, results INTEGER NOT NULL,
  rac REAL NOT NULL, rac_time REAL NOT NULL);
CREATE TABLE IF NOT EXISTS credit_days (
  day INTEGER NOT NULL, agent TEXT NOT NULL, owner TEXT NOT NULL, credit REAL NOT NULL,
  PRIMARY KEY (day, agent)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS ledger (idx INTEGER PRIMARY KEY, entry BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS usage (
  user TEXT NOT NULL, month INTEGER NOT NULL, node_us INTEGER NOT NULL,
  PRIMARY KEY (user, month)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS notify_targets (
  id INTEGER PRIMARY KEY, user TEXT NOT NULL, kind TEXT NOT NULL, url TEXT NOT NULL,
  secret TEXT NOT NULL, created_us INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS history (
  t_us INTEGER PRIMARY KEY, working INTEGER NOT NULL, idle INTEGER NOT NULL,
  owner_busy INTEGER NOT NULL, paused INTEGER NOT NULL, offline INTEGER NOT NULL,
  flops REAL NOT NULL, tasks_per_s REAL NOT NULL, queue INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', '11');
INSERT OR IGNORE INTO meta (key, value) VALUES ('next_lease_id', '1');
)sql";

}  // namespace claw::sqlite_schema
