#include "vdev/handoff.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "spdlog/fmt/fmt.h"

namespace vdev {

namespace {

constexpr uint32_t kMagic = 0x4f484456;  // "VDHO"
constexpr uint32_t kLastFrame = 1;
// Payload bytes per frame: large payloads go in several frames, so a frame
// header's length field is bounded independently of the whole.
constexpr uint32_t kBytesPerFrame = 1u << 20;

struct FrameHeader {
  uint32_t magic;
  uint32_t kind;
  uint32_t flags;
  uint32_t length;  // payload bytes following this header
  uint32_t fds;     // descriptors attached to this header
};

// Waits until the socket can `events` or the deadline passes.
std::string Wait(int socket, short events, HandoffDeadline deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return "timed out";
    struct pollfd p = {socket, events, 0};
    int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 60000)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::string("poll: ") + std::strerror(errno);
    if (n > 0) return {};
  }
}

std::string SendAll(int socket, const uint8_t* data, size_t len, std::span<const int> fds,
                    HandoffDeadline deadline) {
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kFdsPerFrame)];
  bool fds_sent = fds.empty();
  while (len > 0) {
    if (std::string e = Wait(socket, POLLOUT, deadline); !e.empty()) return e;
    struct iovec iov = {const_cast<uint8_t*>(data), len};
    struct msghdr mh = {};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    if (!fds_sent) {
      mh.msg_control = control;
      mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      struct cmsghdr* c = CMSG_FIRSTHDR(&mh);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    ssize_t n = sendmsg(socket, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) return std::string("sendmsg: ") + std::strerror(errno);
    fds_sent = true;  // descriptors go with the first byte sent
    data += n;
    len -= static_cast<size_t>(n);
  }
  return {};
}

// Reads exactly len bytes, taking ownership of any descriptors that arrive.
std::string ReceiveAll(int socket, uint8_t* data, size_t len, std::vector<UniqueFd>* fds,
                       HandoffDeadline deadline) {
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kFdsPerFrame)];
  while (len > 0) {
    if (std::string e = Wait(socket, POLLIN, deadline); !e.empty()) return e;
    struct iovec iov = {data, len};
    struct msghdr mh = {};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof(control);
    ssize_t n = recvmsg(socket, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n < 0) return std::string("recvmsg: ") + std::strerror(errno);
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds->emplace_back(fd);
      }
    }
    if (mh.msg_flags & MSG_CTRUNC) return "more descriptors in one frame than allowed";
    if (n == 0) return "the peer closed the channel";
    data += n;
    len -= static_cast<size_t>(n);
  }
  return {};
}

}  // namespace

std::string SendHandoff(int socket, HandoffKind kind, std::string_view payload,
                        std::span<const int> fds, HandoffDeadline deadline) {
  size_t sent_bytes = 0, sent_fds = 0;
  do {
    const size_t bytes = std::min<size_t>(payload.size() - sent_bytes, kBytesPerFrame);
    const size_t nfds = std::min(fds.size() - sent_fds, kFdsPerFrame);
    const bool last = sent_bytes + bytes == payload.size() && sent_fds + nfds == fds.size();
    FrameHeader h{kMagic, static_cast<uint32_t>(kind), last ? kLastFrame : 0,
                  static_cast<uint32_t>(bytes), static_cast<uint32_t>(nfds)};
    if (std::string e = SendAll(socket, reinterpret_cast<const uint8_t*>(&h), sizeof(h),
                                fds.subspan(sent_fds, nfds), deadline);
        !e.empty()) {
      return e;
    }
    if (std::string e =
            SendAll(socket, reinterpret_cast<const uint8_t*>(payload.data()) + sent_bytes, bytes,
                    {}, deadline);
        !e.empty()) {
      return e;
    }
    sent_bytes += bytes;
    sent_fds += nfds;
  } while (sent_bytes < payload.size() || sent_fds < fds.size());
  return {};
}

std::string ReceiveHandoff(int socket, HandoffKind expected, HandoffMessage* out,
                           HandoffDeadline deadline, const HandoffLimits& limits) {
  HandoffMessage msg;
  for (;;) {
    FrameHeader h;
    std::vector<UniqueFd> arrived;
    if (std::string e =
            ReceiveAll(socket, reinterpret_cast<uint8_t*>(&h), sizeof(h), &arrived, deadline);
        !e.empty()) {
      return e;
    }
    if (h.magic != kMagic) return "not a hand-over frame";
    if (h.kind != static_cast<uint32_t>(expected)) {
      return fmt::format("expected a frame of kind {}, got {}", static_cast<uint32_t>(expected),
                         h.kind);
    }
    if ((h.flags & ~kLastFrame) != 0) return fmt::format("unknown frame flags {:#x}", h.flags);
    if (h.length > kBytesPerFrame || h.fds > kFdsPerFrame) return "frame larger than allowed";
    if (arrived.size() != h.fds) {
      return fmt::format("frame announced {} descriptors, {} arrived", h.fds, arrived.size());
    }
    if (msg.payload.size() + h.length > limits.max_payload) return "payload over its limit";
    if (msg.fds.size() + arrived.size() > limits.max_fds) return "too many descriptors";
    for (UniqueFd& fd : arrived) msg.fds.push_back(std::move(fd));
    const size_t have = msg.payload.size();
    msg.payload.resize(have + h.length);
    std::vector<UniqueFd> stray;
    if (std::string e = ReceiveAll(socket, reinterpret_cast<uint8_t*>(msg.payload.data()) + have,
                                   h.length, &stray, deadline);
        !e.empty()) {
      return e;
    }
    if (!stray.empty()) return "descriptors arrived inside a frame's payload";
    if (h.flags & kLastFrame) break;
  }
  *out = std::move(msg);
  return {};
}

}  // namespace vdev
