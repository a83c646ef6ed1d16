#include "core/status.h"

namespace hypic {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kBadRequest: return "BAD_REQUEST";
    case StatusCode::kBadChecksum: return "BAD_CHECKSUM";
    case StatusCode::kTooLarge: return "TOO_LARGE";
    case StatusCode::kUnauthorized: return "UNAUTHORIZED";
    case StatusCode::kBusy: return "BUSY";
    case StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case StatusCode::kVersionMismatch: return "VERSION_MISMATCH";
    case StatusCode::kComputeFailed: return "COMPUTE_FAILED";
    case StatusCode::kShuttingDown: return "SHUTTING_DOWN";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kIoError: return "IO_ERROR";
    case StatusCode::kNoSpace: return "NO_SPACE";
    case StatusCode::kDeviceError: return "DEVICE_ERROR";
    case StatusCode::kCancelled: return "CANCELLED";
    case StatusCode::kUnsupported: return "UNSUPPORTED";
    case StatusCode::kCorruption: return "CORRUPTION";
    case StatusCode::kQuotaExceeded: return "QUOTA_EXCEEDED";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

}  // namespace hypic
