// Status and Result<T>: errors as values.
//
// A Status is either OK or carries a code and a message that names what is
// wrong ("params.paths: must be at most 1e10"). Result<T> holds a T or a
// non-OK Status. Neither throws; both are cheap to move. Functions across
// module boundaries return these instead of throwing.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace claw {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // the caller sent something malformed
  kNotFound,          // no such job, agent, lease
  kAlreadyExists,
  kFailedPrecondition,  // valid request, wrong state (e.g. cancel a finished job)
  kPermissionDenied,  // bad signature, not allowed
  kUnauthenticated,   // no or unknown API token
  kResourceExhausted,  // too large, over quota
  kUnavailable,       // peer down; retry later
  kInternal,          // a bug or a broken store
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: params.paths: must be positive"
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status PermissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status Unauthenticated(std::string m) {
  return {StatusCode::kUnauthenticated, std::move(m)};
}
inline Status ResourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "Result needs a value or a non-OK status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace claw

// Returns early from the enclosing function with the status if it is not OK.
#define CLAW_RETURN_IF_ERROR(expr)      \
  do {                                  \
    ::claw::Status _st = (expr);        \
    if (!_st.ok()) return _st;          \
  } while (0)
