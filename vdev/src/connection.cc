#include "connection.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>

#include "spdlog/spdlog.h"

namespace vdev {

namespace asio = boost::asio;

namespace {

// Messages handled per socket wake-up before yielding to other handlers on
// the io_context (kicks, other connections).
constexpr int kMessagesPerWakeup = 64;
// Busy-poll passes per handler: amortises the cost of re-posting the loop
// while still letting socket messages and other connections in every few
// microseconds.
constexpr int kPollPassesPerHandler = 64;
// How long a reply may wait for socket buffer space before the connection is
// considered dead. Front-ends wait for replies, so the buffer is normally empty.
constexpr int kReplyTimeoutMs = 2000;

void SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0 && !(flags & O_NONBLOCK)) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

}  // namespace

Connection::Connection(asio::io_context& io, Socket socket, std::unique_ptr<Device> device,
                       SessionOptions options, std::string name, std::function<void()> on_closed)
    : io_(io),
      strand_(asio::make_strand(io)),
      socket_(std::move(socket)),
      session_(std::move(device), this, std::move(options), name),
      name_(std::move(name)),
      on_closed_(std::move(on_closed)) {
  kicks_.resize(session_.num_queues());
}

Connection::~Connection() {
  // Normally closed already; when the io_context is torn down first, stop the
  // session while the members it calls back into still exist.
  if (!closed_) {
    closed_ = true;
    session_.Disconnect();
    for (auto& k : kicks_) {
      if (k) k->sd.release();
    }
  }
}

void Connection::Start() {
  asio::post(strand_, [self = shared_from_this()] {
    spdlog::info("vdev[{}]: front-end connected", self->name_);
    self->session_.Start();
    self->WaitReadable();
  });
}

void Connection::Close(std::string reason) {
  asio::post(strand_,
             [self = shared_from_this(), reason = std::move(reason)] { self->DoClose(reason); });
}

void Connection::Post(std::function<void()> fn) {
  asio::post(strand_, [self = shared_from_this(), fn = std::move(fn)] {
    if (!self->closed_) fn();
  });
}

void Connection::DoClose(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  spdlog::info("vdev[{}]: connection closed: {}", name_, reason);
  polling_ = false;
  // The session unwatches kicks (releasing the fds it owns) and stops rings.
  session_.Disconnect();
  for (auto& k : kicks_) {
    if (k) {
      k->sd.release();
      k.reset();
    }
  }
  boost::system::error_code ec;
  socket_.close(ec);
  if (on_closed_) on_closed_();
}

void Connection::WaitReadable() {
  if (closed_) return;
  socket_.async_wait(Socket::wait_read,
                     asio::bind_executor(
                         strand_, [self = shared_from_this()](const boost::system::error_code& ec) {
                           if (self->closed_) return;
                           if (ec) {
                             self->DoClose("socket wait failed: " + ec.message());
                             return;
                           }
                           self->OnReadable();
                         }));
}

void Connection::OnReadable() {
  const int fd = socket_.native_handle();
  alignas(8) uint8_t buf[sizeof(vu::Header) + vu::kMaxPayload];
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * vu::kMaxFds)];
  for (int handled = 0; !closed_;) {
    size_t want = reader_.Want();
    struct iovec iov = {buf, want};
    struct msghdr mh = {};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof(control);
    ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        WaitReadable();
        return;
      }
      DoClose(std::string("recvmsg failed: ") + std::strerror(errno));
      return;
    }
    // Take ownership of every descriptor that arrived before judging anything,
    // so none leaks whatever happens next.
    std::vector<UniqueFd> fds;
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.emplace_back(received);
      }
    }
    if (mh.msg_flags & MSG_CTRUNC) {
      DoClose("too many file descriptors with one message (control data truncated)");
      return;
    }
    if (n == 0) {
      DoClose("front-end closed the socket");
      return;
    }
    if (Error e = reader_.Feed(buf, static_cast<size_t>(n), &fds); !e.empty()) {
      spdlog::error("vdev[{}]: {}", name_, e);
      DoClose("protocol error");
      return;
    }
    if (!reader_.Ready()) continue;
    Session::Result r = session_.Handle(reader_.Take());
    if (!r.reply.empty() && !SendReply(r.reply)) {
      DoClose("could not send a reply");
      return;
    }
    if (r.close) {
      DoClose("protocol error");
      return;
    }
    if (++handled == kMessagesPerWakeup) {
      asio::post(strand_, [self = shared_from_this()] {
        if (!self->closed_) self->OnReadable();
      });
      return;
    }
  }
}

bool Connection::SendReply(const std::vector<uint8_t>& bytes) {
  const int fd = socket_.native_handle();
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd p = {fd, POLLOUT, 0};
      if (poll(&p, 1, kReplyTimeoutMs) > 0) continue;
    }
    return false;
  }
  return true;
}

void Connection::WatchKick(uint16_t queue, int fd) {
  if (queue >= kicks_.size() || closed_) return;
  UnwatchKick(queue);
  SetNonBlocking(fd);
  auto w = std::make_unique<KickWatch>(io_, fd);
  w->generation = ++kick_generation_;
  uint64_t generation = w->generation;
  kicks_[queue] = std::move(w);
  ArmKick(queue, generation);
}

void Connection::UnwatchKick(uint16_t queue) {
  if (queue >= kicks_.size() || !kicks_[queue]) return;
  // release() cancels the pending wait and leaves the fd to the session.
  kicks_[queue]->sd.release();
  kicks_[queue].reset();
}

void Connection::ArmKick(uint16_t queue, uint64_t generation) {
  KickWatch* w = kicks_[queue].get();
  w->sd.async_wait(asio::posix::stream_descriptor::wait_read,
                   asio::bind_executor(strand_, [self = shared_from_this(), queue,
                                                 generation](const boost::system::error_code& ec) {
                     if (self->closed_ || ec) return;
                     KickWatch* cur = self->kicks_[queue].get();
                     if (cur == nullptr || cur->generation != generation)
                       return;  // replaced or removed
                     // Re-arm before draining: a kick landing after the drain then
                     // completes the new wait instead of being lost (edge-triggered).
                     self->ArmKick(queue, generation);
                     uint64_t count;
                     [[maybe_unused]] ssize_t r =
                         read(cur->sd.native_handle(), &count, sizeof(count));
                     self->session_.Kick(queue);
                   }));
}

void Connection::SetPolling(bool on) {
  polling_ = on;
  if (on) SchedulePoll();
}

void Connection::SchedulePoll() {
  if (poll_scheduled_ || closed_) return;
  poll_scheduled_ = true;
  asio::post(strand_, [self = shared_from_this()] {
    self->poll_scheduled_ = false;
    for (int i = 0; i < kPollPassesPerHandler && self->polling_ && !self->closed_; ++i) {
      self->session_.Poll();
    }
    if (!self->polling_ || self->closed_) return;
    self->SchedulePoll();
  });
}

}  // namespace vdev
