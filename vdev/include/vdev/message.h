// vhost-user message framing, independent of any socket: a MessageReader is
// fed the bytes and file descriptors of a stream and yields whole messages
// whose header was validated (version, flags, payload size). Per-request
// payload and fd checks are in ValidateMessage.
#ifndef VDEV_MESSAGE_H_
#define VDEV_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "vdev/vhost_user.h"

namespace vdev {

// Owns one file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct Message {
  vu::Header header{};
  alignas(8) uint8_t payload[vu::kMaxPayload] = {};
  std::vector<UniqueFd> fds;

  uint32_t request() const { return header.request; }
  bool need_reply() const { return header.flags & vu::kFlagNeedReply; }
  // Reads a payload struct; callers validated header.size first.
  template <typename T>
  T Get() const {
    static_assert(sizeof(T) <= vu::kMaxPayload);
    T v;
    std::memcpy(&v, payload, sizeof(T));
    return v;
  }
};

// Why a message (or the stream) was refused; empty when accepted.
using Error = std::string;

// Turns a byte stream into messages. Want() says how many bytes the current
// step needs (the header, then the payload), so a socket reader can read
// exactly that much and never consume the next message's bytes and fds.
class MessageReader {
 public:
  size_t Want() const;
  // Appends bytes (n <= Want()) and the fds that arrived with them. Returns
  // an error for a stream that cannot continue (bad version or flags,
  // oversized payload, too many fds); the reader is then unusable.
  Error Feed(const uint8_t* data, size_t n, std::vector<UniqueFd>* fds);
  // True once a whole message is ready; Take() moves it out.
  bool Ready() const { return ready_; }
  // True once any byte of the next message has arrived.
  bool Started() const { return have_ > 0; }
  Message Take();
  // A live upgrade hands a message the front-end sent only part of to the
  // successor: the bytes so far (feed them back through Feed, Want() at a
  // time) and the descriptors that came with them.
  std::string PartialBytes() const;
  const std::vector<UniqueFd>& partial_fds() const { return msg_.fds; }

 private:
  Message msg_;
  size_t have_ = 0;  // bytes of header + payload received
  bool ready_ = false;
};

// Checks a message's payload size and fd count for its request type. Returns
// an empty string for a well-formed message, else why not. Unknown requests
// are refused.
Error ValidateMessage(const Message& msg);

// Name of a request for logs.
const char* RequestName(uint32_t request);

// Builds a reply: header with flags exactly kReplyFlags and the payload.
std::vector<uint8_t> MakeReply(uint32_t request, const void* payload, uint32_t size);
// Any message: header with these flags, then the payload.
std::vector<uint8_t> MakeMessage(uint32_t request, uint32_t flags, const void* payload,
                                 uint32_t size);
std::vector<uint8_t> MakeU64Reply(uint32_t request, uint64_t value);

}  // namespace vdev

#endif  // VDEV_MESSAGE_H_
