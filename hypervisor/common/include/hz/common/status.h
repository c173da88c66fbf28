// The result of every operation of the host service and its engines: ok, or
// a code and a message for logs and operators. As in LevelDB, an ok Status
// is one null pointer, so the data path (one per collective) pays nothing
// for it.
//
// The codes are the failure kinds of the wire (enum hz_status_code in
// protocol/harmonaize.h), in its order and with its values: every outcome an
// engine can report has exactly one wire status, and the service's one
// mapping (hz/service/wire_status.h) is a cast it checks at compile time.
// Nothing here includes the protocol header, so engines that never speak to
// a guest still get the whole vocabulary.
#ifndef HZ_COMMON_STATUS_H_
#define HZ_COMMON_STATUS_H_

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>

namespace hz {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument = 1,  // malformed request or argument
  kNotSupported = 2,     // unknown operation, or a flag or feature that is not offered
  kPermission = 3,       // the object belongs to another tenant
  kNotFound = 4,         // no such object, or it expired
  kExists = 5,           // the object exists already
  kLimit = 6,            // a quota or limit was reached
  kTryAgain = 7,         // temporarily out of resources; a retry may succeed
  kTimedOut = 8,         // a deadline passed
  kAborted = 9,          // the operation or its communicator was aborted or cancelled
  kMismatch = 10,        // ranks disagree on op, count, type or root
  kFault = 11,           // memory outside what was registered
  kIoError = 12,         // host I/O failed
  kCorruption = 13,      // stored data failed verification
  kShutdown = 14,        // the service or the engine is stopping
  kVersion = 15,         // incompatible protocol version
  kTooSmall = 16,        // the result space is too small
  kBusy = 17,            // the object is in use
  kState = 18,           // not valid in the object's current state
  kWrongQueue = 19,      // not allowed on this queue
};
inline constexpr uint8_t kStatusCodeCount = 20;

// "ok", "not found", "I/O error", ...
const char* StatusCodeName(StatusCode code);

class Status {
 public:
  Status() noexcept = default;  // ok
  // A failure (or ok, for kOk: the message is then dropped).
  Status(StatusCode code, std::string_view message);
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string_view msg = {}) {
    return {StatusCode::kInvalidArgument, msg};
  }
  static Status NotSupported(std::string_view msg = {}) { return {StatusCode::kNotSupported, msg}; }
  static Status Permission(std::string_view msg = {}) { return {StatusCode::kPermission, msg}; }
  static Status NotFound(std::string_view msg = {}) { return {StatusCode::kNotFound, msg}; }
  static Status Exists(std::string_view msg = {}) { return {StatusCode::kExists, msg}; }
  static Status Limit(std::string_view msg = {}) { return {StatusCode::kLimit, msg}; }
  static Status TryAgain(std::string_view msg = {}) { return {StatusCode::kTryAgain, msg}; }
  static Status TimedOut(std::string_view msg = {}) { return {StatusCode::kTimedOut, msg}; }
  static Status Aborted(std::string_view msg = {}) { return {StatusCode::kAborted, msg}; }
  static Status Mismatch(std::string_view msg = {}) { return {StatusCode::kMismatch, msg}; }
  static Status Fault(std::string_view msg = {}) { return {StatusCode::kFault, msg}; }
  static Status IoError(std::string_view msg = {}) { return {StatusCode::kIoError, msg}; }
  static Status Corruption(std::string_view msg = {}) { return {StatusCode::kCorruption, msg}; }
  static Status Shutdown(std::string_view msg = {}) { return {StatusCode::kShutdown, msg}; }
  static Status Version(std::string_view msg = {}) { return {StatusCode::kVersion, msg}; }
  static Status TooSmall(std::string_view msg = {}) { return {StatusCode::kTooSmall, msg}; }
  static Status Busy(std::string_view msg = {}) { return {StatusCode::kBusy, msg}; }
  static Status State(std::string_view msg = {}) { return {StatusCode::kState, msg}; }
  static Status WrongQueue(std::string_view msg = {}) { return {StatusCode::kWrongQueue, msg}; }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  // Empty when ok (and for a failure built without one).
  const std::string& message() const;
  // "OK", or "<code name>: <message>".
  std::string ToString() const;

  bool IsInvalidArgument() const { return code() == StatusCode::kInvalidArgument; }
  bool IsNotSupported() const { return code() == StatusCode::kNotSupported; }
  bool IsPermission() const { return code() == StatusCode::kPermission; }
  bool IsNotFound() const { return code() == StatusCode::kNotFound; }
  bool IsExists() const { return code() == StatusCode::kExists; }
  bool IsLimit() const { return code() == StatusCode::kLimit; }
  bool IsTryAgain() const { return code() == StatusCode::kTryAgain; }
  bool IsTimedOut() const { return code() == StatusCode::kTimedOut; }
  bool IsAborted() const { return code() == StatusCode::kAborted; }
  bool IsMismatch() const { return code() == StatusCode::kMismatch; }
  bool IsFault() const { return code() == StatusCode::kFault; }
  bool IsIoError() const { return code() == StatusCode::kIoError; }
  bool IsCorruption() const { return code() == StatusCode::kCorruption; }
  bool IsShutdown() const { return code() == StatusCode::kShutdown; }
  bool IsVersion() const { return code() == StatusCode::kVersion; }
  bool IsTooSmall() const { return code() == StatusCode::kTooSmall; }
  bool IsBusy() const { return code() == StatusCode::kBusy; }
  bool IsState() const { return code() == StatusCode::kState; }
  bool IsWrongQueue() const { return code() == StatusCode::kWrongQueue; }

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::unique_ptr<Rep> rep_;  // null when ok
};

// For test failure messages and logs.
std::ostream& operator<<(std::ostream& os, StatusCode code);
std::ostream& operator<<(std::ostream& os, const Status& status);

}  // namespace hz

#endif  // HZ_COMMON_STATUS_H_
