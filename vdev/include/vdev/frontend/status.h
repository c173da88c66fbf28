// Result of a front-end operation: ok, or a code and a human-readable reason.
#ifndef VDEV_FRONTEND_STATUS_H_
#define VDEV_FRONTEND_STATUS_H_

#include <string>
#include <utility>

namespace vdev::frontend {

class Status {
 public:
  enum class Code {
    kOk,
    kInvalidArgument,  // the caller asked for something impossible
    kNoSpace,          // ring or guest memory full; retry after completions
    kUnsupported,      // the back-end did not negotiate what this needs
    kIoError,          // a system call failed
    kTimeout,          // the back-end did not answer in time
    kProtocolError,    // the back-end sent something malformed
    kDisconnected,     // the connection is closed or was broken by an error
  };

  Status() = default;

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return {Code::kInvalidArgument, std::move(msg)};
  }
  static Status NoSpace(std::string msg) { return {Code::kNoSpace, std::move(msg)}; }
  static Status Unsupported(std::string msg) { return {Code::kUnsupported, std::move(msg)}; }
  static Status IoError(std::string msg) { return {Code::kIoError, std::move(msg)}; }
  static Status Timeout(std::string msg) { return {Code::kTimeout, std::move(msg)}; }
  static Status ProtocolError(std::string msg) { return {Code::kProtocolError, std::move(msg)}; }
  static Status Disconnected(std::string msg) { return {Code::kDisconnected, std::move(msg)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}

  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace vdev::frontend

#endif  // VDEV_FRONTEND_STATUS_H_
