// The front-end end of a vhost-user socket: framed messages with file
// descriptors, bounded waits, and no SIGPIPE. Any transport or framing error
// closes the channel, so a dead or misbehaving back-end yields one clean
// error and then kDisconnected, never a hang.
//
// Thread-safety: none; VirtioUser serializes its use.
#ifndef VDEV_FRONTEND_CHANNEL_H_
#define VDEV_FRONTEND_CHANNEL_H_

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "vdev/frontend/status.h"
#include "vdev/vhost_user.h"

namespace vdev::frontend {

class Channel {
 public:
  Channel() = default;
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Connects to a listening back-end, retrying while the socket does not
  // exist yet or refuses, until timeout.
  Status Connect(const std::string& path, std::chrono::milliseconds timeout);
  void Close();
  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  // Sends one message; fds ride as SCM_RIGHTS (at most vu::kMaxFds).
  Status Send(uint32_t request, uint32_t flags, const void* payload, uint32_t size,
              std::span<const int> fds = {});
  // Receives one reply to `request` whose payload must be exactly `size`
  // bytes (flags exactly vu::kReplyFlags). File descriptors that arrive with
  // it are closed.
  Status Receive(uint32_t request, void* payload, uint32_t size);
  // Receives one reply to `request` of up to max bytes; *size gets its size.
  Status ReceiveUpTo(uint32_t request, void* payload, uint32_t max, uint32_t* size);

 private:
  using Clock = std::chrono::steady_clock;
  // Reads exactly len bytes before the deadline.
  Status ReadFull(void* buf, size_t len, Clock::time_point deadline);
  Status Fail(Status s);  // closes and returns s

  int fd_ = -1;
  std::chrono::milliseconds timeout_{2000};
};

}  // namespace vdev::frontend

#endif  // VDEV_FRONTEND_CHANNEL_H_
