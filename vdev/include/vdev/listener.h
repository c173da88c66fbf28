// Listening sockets that control who may connect and that survive running
// out of descriptors. Used by vdev::Server and by services with listeners of
// their own.
#ifndef VDEV_LISTENER_H_
#define VDEV_LISTENER_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

namespace vdev {

// Who may connect to a Unix socket: connecting needs write permission on
// the socket file, so mode and group decide it.
struct SocketAccess {
  mode_t mode = 0600;
  uid_t owner = static_cast<uid_t>(-1);  // -1: the process's user
  gid_t group = static_cast<gid_t>(-1);  // -1: the process's group
};

// Opens `acceptor`, binds it to `path` and listens. The socket file appears
// at `path` already listening and with `access` applied, so no one can
// connect while it is looser than asked or be refused while it starts; an
// existing file at `path` is replaced. Returns false with *error otherwise.
bool ListenUnix(boost::asio::local::stream_protocol::acceptor& acceptor, const std::string& path,
                const SocketAccess& access, std::string* error);

// Re-arms an acceptor after a failed accept. A listening socket whose accept
// fails for lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM)
// stays readable: re-arming at once spins a thread and floods the log, and
// giving up leaves the socket dead after the shortage passed. The retries
// are spaced out, doubling from kFirstDelay to kMaxDelay, and a run of
// failures is logged twice: when it starts and when an accept works again.
class AcceptBackoff {
 public:
  static constexpr std::chrono::milliseconds kFirstDelay{10};
  static constexpr std::chrono::milliseconds kMaxDelay{1000};

  // `name` says which listener in the log lines.
  AcceptBackoff(const boost::asio::any_io_executor& executor, std::string name);

  // Call with the result of every accept. True: the socket is good, handle
  // it and accept again. False: nothing to handle; after an error `rearm` runs
  // once the back-off delay passed (never once the acceptor was closed, which
  // reports operation_aborted, or after Cancel).
  bool Accepted(const boost::system::error_code& ec, std::function<void()> rearm);
  // Drops a pending re-arm (the acceptor is closing).
  void Cancel();
  // Failed accepts so far (any thread).
  uint64_t failures() const { return failures_.load(std::memory_order_relaxed); }

 private:
  boost::asio::steady_timer timer_;
  std::string name_;
  unsigned run_ = 0;  // failures since the last accept that worked
  bool cancelled_ = false;
  std::atomic<uint64_t> failures_{0};
};

}  // namespace vdev

#endif  // VDEV_LISTENER_H_
