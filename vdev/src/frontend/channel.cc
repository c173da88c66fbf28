#include "vdev/frontend/channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace vdev::frontend {

namespace {

std::string Errno(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

int RemainingMs(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, 1 << 30));
}

}  // namespace

Channel::~Channel() {
  Close();
}

void Channel::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Status Channel::Fail(Status s) {
  Close();
  return s;
}

Status Channel::Connect(const std::string& path, std::chrono::milliseconds timeout) {
  Close();
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("socket path empty or too long");
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Status::IoError(Errno("socket"));
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      // Non-blocking from here on: every wait goes through poll with a deadline.
      int flags = fcntl(fd, F_GETFL);
      if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        Status s = Status::IoError(Errno("fcntl"));
        close(fd);
        return s;
      }
      fd_ = fd;
      return Status::Ok();
    }
    const int err = errno;
    close(fd);
    const bool retry = err == ENOENT || err == ECONNREFUSED || err == EAGAIN || err == EINTR;
    if (!retry || Clock::now() >= deadline) {
      errno = err;
      return Status::IoError(Errno(("connect " + path).c_str()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Status Channel::Send(uint32_t request, uint32_t flags, const void* payload, uint32_t size,
                     std::span<const int> fds) {
  if (fd_ < 0) return Status::Disconnected("vhost-user channel is closed");
  if (fds.size() > vu::kMaxFds) return Status::InvalidArgument("too many fds for one message");
  vu::Header hdr{request, flags, size};
  iovec iov[2] = {{&hdr, sizeof(hdr)}, {const_cast<void*>(payload), size}};
  size_t total = sizeof(hdr) + size;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * vu::kMaxFds)];
  size_t sent = 0;
  bool fds_sent = fds.empty();
  const auto deadline = Clock::now() + timeout_;
  while (sent < total) {
    // Build the remaining iovec.
    iovec cur[2];
    int n = 0;
    size_t skip = sent;
    for (auto& v : iov) {
      if (skip >= v.iov_len) {
        skip -= v.iov_len;
        continue;
      }
      cur[n].iov_base = static_cast<char*>(v.iov_base) + skip;
      cur[n].iov_len = v.iov_len - skip;
      skip = 0;
      ++n;
    }
    msghdr msg{};
    msg.msg_iov = cur;
    msg.msg_iovlen = static_cast<size_t>(n);
    if (!fds_sent) {
      const size_t fd_bytes = sizeof(int) * fds.size();
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(fd_bytes);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(fd_bytes);
      std::memcpy(CMSG_DATA(c), fds.data(), fd_bytes);
    }
    ssize_t r = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (r > 0) {
      sent += static_cast<size_t>(r);
      fds_sent = true;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      int pr = poll(&p, 1, RemainingMs(deadline));
      if (pr == 0) return Fail(Status::Timeout("back-end does not read its socket"));
      if (pr < 0 && errno != EINTR) return Fail(Status::IoError(Errno("poll")));
      continue;
    }
    return Fail(Status::Disconnected(Errno("send")));
  }
  return Status::Ok();
}

Status Channel::ReadFull(void* buf, size_t len, Clock::time_point deadline) {
  auto* p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < len) {
    iovec iov{p + got, len - got};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * vu::kMaxFds)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t r = recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
    if (r > 0) {
      // A reply never carries fds we asked for; close whatever came.
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          close(fd);
        }
      }
      got += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return Status::Disconnected("back-end closed the connection");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Status::Disconnected(Errno("recv"));
    pollfd pfd{fd_, POLLIN, 0};
    int pr = poll(&pfd, 1, RemainingMs(deadline));
    if (pr == 0) return Status::Timeout("no reply from the back-end");
    if (pr < 0 && errno != EINTR) return Status::IoError(Errno("poll"));
  }
  return Status::Ok();
}

Status Channel::ReceiveUpTo(uint32_t request, void* payload, uint32_t max, uint32_t* size) {
  if (fd_ < 0) return Status::Disconnected("vhost-user channel is closed");
  const auto deadline = Clock::now() + timeout_;
  vu::Header hdr{};
  Status s = ReadFull(&hdr, sizeof(hdr), deadline);
  if (!s.ok()) return Fail(s);
  if (hdr.request != request) {
    return Fail(Status::ProtocolError("reply to request " + std::to_string(hdr.request) +
                                      ", expected " + std::to_string(request)));
  }
  if (hdr.flags != vu::kReplyFlags) {
    return Fail(Status::ProtocolError("reply flags " + std::to_string(hdr.flags)));
  }
  if (hdr.size > max) {
    return Fail(Status::ProtocolError("reply payload of " + std::to_string(hdr.size) +
                                      " bytes, at most " + std::to_string(max) + " expected"));
  }
  s = ReadFull(payload, hdr.size, deadline);
  if (!s.ok()) return Fail(s);
  *size = hdr.size;
  return Status::Ok();
}

Status Channel::Receive(uint32_t request, void* payload, uint32_t size) {
  uint32_t got = 0;
  Status s = ReceiveUpTo(request, payload, size, &got);
  if (!s.ok()) return s;
  if (got != size) {
    return Fail(Status::ProtocolError("reply payload of " + std::to_string(got) + " bytes, " +
                                      std::to_string(size) + " expected"));
  }
  return Status::Ok();
}

}  // namespace vdev::frontend
