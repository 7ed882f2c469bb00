// A prepared SQLite statement with parameters bound by name, for
// SqliteStore. Not thread-safe: the store uses each under its mutex.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace claw {

// A prepared statement; reset after each use.
class Stmt {
 public:
  Stmt() = default;
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s_, nullptr) != SQLITE_OK) {
      error_ = std::string(sqlite3_errmsg(db)) + " in: " + sql;
    }
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(Stmt&& o) noexcept
      : db_(o.db_), s_(std::exchange(o.s_, nullptr)), error_(o.error_), index_(std::move(o.index_)) {}
  Stmt& operator=(Stmt&& o) noexcept {
    std::swap(s_, o.s_);
    db_ = o.db_;
    error_ = o.error_;
    index_.swap(o.index_);
    return *this;
  }
  const std::string& error() const { return error_; }

  Stmt& Bind(const char* name, int64_t v) {
    sqlite3_bind_int64(s_, Index(name), v);
    return *this;
  }
  Stmt& Bind(const char* name, double v) {
    sqlite3_bind_double(s_, Index(name), v);
    return *this;
  }
  Stmt& Bind(const char* name, const std::string& v) {
    sqlite3_bind_text(s_, Index(name), v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
    return *this;
  }
  Stmt& BindBlob(const char* name, const std::string& v) {
    sqlite3_bind_blob(s_, Index(name), v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
    return *this;
  }
  // Runs a statement that returns no rows.
  Status Exec() {
    int rc = sqlite3_step(s_);
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
    if (rc != SQLITE_DONE) return Internal(std::string("sqlite: ") + sqlite3_errmsg(db_));
    return Status::Ok();
  }
  // Steps once: true while a row is available.
  bool Row() { return sqlite3_step(s_) == SQLITE_ROW; }
  void Reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  int64_t Int(int col) { return sqlite3_column_int64(s_, col); }
  double Real(int col) { return sqlite3_column_double(s_, col); }
  std::string Text(int col) {
    const void* p = sqlite3_column_blob(s_, col);
    int n = sqlite3_column_bytes(s_, col);
    return p ? std::string(static_cast<const char*>(p), n) : std::string();
  }

 private:
  // Parameter names are string literals: remembered by address, so the hot
  // path does not look names up in SQLite on every bind.
  int Index(const char* name) {
    for (const auto& [n, i] : index_) {
      if (n == name) return i;
    }
    int i = sqlite3_bind_parameter_index(s_, name);
    index_.emplace_back(name, i);
    return i;
  }
  sqlite3* db_ = nullptr;
  sqlite3_stmt* s_ = nullptr;
  std::string error_;
  std::vector<std::pair<const char*, int>> index_;
};

}  // namespace claw
