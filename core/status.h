// Status and Result<T>: the error type of every fallible path in hypic. No exceptions cross a
// library boundary; config validation at startup is the only place that throws.
//
// StatusCode values are FIXED: they travel on the wire (protocol/README.md, "Status codes").
// Append new codes at the end; never renumber. A Status is a value type, cheap to copy when OK
// (no allocation), thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace hypic {

enum class StatusCode : uint16_t {
  kOk = 0,
  kNotFound = 1,
  kBadRequest = 2,        // malformed or invalid input (also: invalid argument)
  kBadChecksum = 3,       // data failed its checksum: corruption
  kTooLarge = 4,          // a length or count over its cap
  kUnauthorized = 5,      // missing or wrong token
  kBusy = 6,              // a bounded queue is full; retry later
  kDeadlineExceeded = 7,  // the request's deadline passed
  kVersionMismatch = 8,   // protocol or format version not supported
  kComputeFailed = 9,     // a prefill or compose failed
  kShuttingDown = 10,     // the daemon is draining
  kInternal = 11,         // a bug: an invariant did not hold
  kIoError = 12,          // file or socket I/O failed
  kNoSpace = 13,          // a disk or tier is full
  kDeviceError = 14,      // a CUDA or cuBLAS call failed
  kCancelled = 15,        // the caller gave up
  kUnsupported = 16,      // valid input that this build does not handle
  kCorruption = 17,       // structurally invalid stored data (bad magic, bad layout)
  kQuotaExceeded = 18,    // a tenant's quota (bytes stored, compute in flight) is used up
};

// The last assigned code; the protocol decoder rejects anything above it.
inline constexpr uint16_t kMaxStatusCode = 18;

// The stable upper-snake name used on the wire docs and in logs, e.g. "BAD_CHECKSUM".
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "BAD_REQUEST: <message>", or "OK".
  std::string ToString() const;

  // Returns a copy with "<context>: " prepended to the message; OK stays OK.
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Shorthand constructors, one per code.
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status BadRequest(std::string m) { return {StatusCode::kBadRequest, std::move(m)}; }
inline Status BadChecksum(std::string m) { return {StatusCode::kBadChecksum, std::move(m)}; }
inline Status TooLarge(std::string m) { return {StatusCode::kTooLarge, std::move(m)}; }
inline Status Unauthorized(std::string m) { return {StatusCode::kUnauthorized, std::move(m)}; }
inline Status Busy(std::string m) { return {StatusCode::kBusy, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status VersionMismatch(std::string m) {
  return {StatusCode::kVersionMismatch, std::move(m)};
}
inline Status ComputeFailed(std::string m) { return {StatusCode::kComputeFailed, std::move(m)}; }
inline Status ShuttingDown(std::string m) { return {StatusCode::kShuttingDown, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status NoSpace(std::string m) { return {StatusCode::kNoSpace, std::move(m)}; }
inline Status DeviceError(std::string m) { return {StatusCode::kDeviceError, std::move(m)}; }
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
inline Status QuotaExceeded(std::string m) { return {StatusCode::kQuotaExceeded, std::move(m)}; }

// Result<T>: either a value or a non-OK Status.
// REQUIRES: constructing from a Status that is OK is a bug (it becomes kInternal).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = Internal("Result constructed from an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // OK when a value is held.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  // REQUIRES: ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  T value_or(T fallback) const& { return ok() ? std::get<T>(v_) : std::move(fallback); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace hypic

#define HYPIC_CONCAT_INNER(a, b) a##b
#define HYPIC_CONCAT(a, b) HYPIC_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not OK.
#define HYPIC_RETURN_IF_ERROR(expr)        \
  do {                                     \
    ::hypic::Status _hypic_st = (expr);    \
    if (!_hypic_st.ok()) return _hypic_st; \
  } while (0)

// `lhs` = the value of a Result expression, or returns its Status.
#define HYPIC_ASSIGN_OR_RETURN(lhs, expr) \
  HYPIC_ASSIGN_OR_RETURN_IMPL(HYPIC_CONCAT(_hypic_res_, __LINE__), lhs, expr)
#define HYPIC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
