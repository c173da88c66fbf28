// Result of a front-end operation: ok, or a code and a human-readable reason.
// As in LevelDB, an ok Status is one null pointer: the data path returns one
// per chain, and building or destroying it must cost next to nothing.
#ifndef VDEV_FRONTEND_STATUS_H_
#define VDEV_FRONTEND_STATUS_H_

#include <memory>
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
  Status(const Status& other)
      : state_(other.state_ ? std::make_unique<State>(*other.state_) : nullptr) {}
  Status& operator=(const Status& other) {
    if (this != &other) state_ = other.state_ ? std::make_unique<State>(*other.state_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

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

  bool ok() const { return state_ == nullptr; }
  Code code() const { return state_ ? state_->code : Code::kOk; }
  const std::string& message() const;
  std::string ToString() const;

 private:
  struct State {
    Code code;
    std::string message;
  };

  Status(Code code, std::string msg)
      : state_(std::make_unique<State>(State{code, std::move(msg)})) {}

  std::unique_ptr<State> state_;  // null when ok
};

}  // namespace vdev::frontend

#endif  // VDEV_FRONTEND_STATUS_H_
