#include "hz/common/status.h"

#include <ostream>

namespace hz {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kNotSupported:
      return "not supported";
    case StatusCode::kPermission:
      return "permission denied";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kExists:
      return "exists";
    case StatusCode::kLimit:
      return "limit";
    case StatusCode::kTryAgain:
      return "try again";
    case StatusCode::kTimedOut:
      return "timed out";
    case StatusCode::kAborted:
      return "aborted";
    case StatusCode::kMismatch:
      return "mismatch";
    case StatusCode::kFault:
      return "fault";
    case StatusCode::kIoError:
      return "I/O error";
    case StatusCode::kCorruption:
      return "corruption";
    case StatusCode::kShutdown:
      return "shutdown";
    case StatusCode::kVersion:
      return "version";
    case StatusCode::kTooSmall:
      return "too small";
    case StatusCode::kBusy:
      return "busy";
    case StatusCode::kState:
      return "state";
    case StatusCode::kWrongQueue:
      return "wrong queue";
  }
  return "unknown";
}

Status::Status(StatusCode code, std::string_view message) {
  if (code != StatusCode::kOk) rep_ = std::make_unique<Rep>(Rep{code, std::string(message)});
}

Status::Status(const Status& other)
    : rep_(other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) rep_ = other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr;
  return *this;
}

const std::string& Status::message() const {
  static const std::string kNone;
  return rep_ ? rep_->message : kNone;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(rep_->code)) + ": " + rep_->message;
}

std::ostream& operator<<(std::ostream& os, StatusCode code) {
  return os << StatusCodeName(code);
}

std::ostream& operator<<(std::ostream& os, const Status& status) {
  return os << status.ToString();
}

}  // namespace hz
