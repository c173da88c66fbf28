// Result of an engine operation: a code and, on failure, a message for logs.
// The service maps codes onto wire status values with ToWire().
#ifndef HZ_EVENTS_STATUS_H_
#define HZ_EVENTS_STATUS_H_

#include <string>
#include <utility>

#include "protocol/harmonaize.h"

namespace hz::events {

class Status {
 public:
  enum class Code {
    kOk,
    kInvalidArgument,  // malformed request or argument (HZ_S_EINVAL)
    kNotFound,         // unknown or expired object (HZ_S_ENOENT)
    kLimit,            // quota or protocol limit reached (HZ_S_ELIMIT)
    kState,            // not valid in the object's current state (HZ_S_ESTATE)
    kIoError,          // host storage failure (HZ_S_EIO)
    kCorruption,       // stored data failed verification (HZ_S_ECORRUPT)
    kNotSupported,     // undefined flag or reserved field set (HZ_S_ENOTSUP)
    kPermission,       // the object belongs to another tenant (HZ_S_EPERM)
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return {Code::kInvalidArgument, std::move(msg)};
  }
  static Status NotFound(std::string msg) { return {Code::kNotFound, std::move(msg)}; }
  static Status Limit(std::string msg) { return {Code::kLimit, std::move(msg)}; }
  static Status State(std::string msg) { return {Code::kState, std::move(msg)}; }
  static Status IoError(std::string msg) { return {Code::kIoError, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {Code::kCorruption, std::move(msg)}; }
  static Status NotSupported(std::string msg) { return {Code::kNotSupported, std::move(msg)}; }
  static Status Permission(std::string msg) { return {Code::kPermission, std::move(msg)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;
  hz_status_code ToWire() const;

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}

  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace hz::events

#endif  // HZ_EVENTS_STATUS_H_
