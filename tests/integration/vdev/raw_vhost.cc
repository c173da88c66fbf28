#include "raw_vhost.h"

#include <dirent.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#ifndef VIRTIO_RING_NO_LEGACY
#define VIRTIO_RING_NO_LEGACY
#endif
#include <linux/virtio_ring.h>

namespace vdev::testing {

ssize_t RecvWithFds(int fd, void* buf, size_t len, int flags, std::vector<int>* fds) {
  iovec iov{buf, len};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 16)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = recvmsg(fd, &msg, flags | MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_type != SCM_RIGHTS) continue;
    for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
      int rfd;
      std::memcpy(&rfd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds->push_back(rfd);
    }
  }
  return n;
}

uint64_t RawReply::u64() const {
  uint64_t v = ~0ull;
  if (payload.size() == sizeof(v)) std::memcpy(&v, payload.data(), sizeof(v));
  return v;
}

bool RawConn::Connect(const std::string& path) {
  Close();
  fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  for (int i = 0; i < 400; ++i) {
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return true;
    usleep(5000);
  }
  Close();
  return false;
}

void RawConn::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

bool RawConn::SendBytes(const void* data, size_t len, std::span<const int> fds) {
  if (fd_ < 0) return false;
  iovec iov{const_cast<void*>(data), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control;
  if (!fds.empty()) {
    control.resize(CMSG_SPACE(sizeof(int) * fds.size()));
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  size_t sent = 0;
  while (sent < len) {
    ssize_t r = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    sent += static_cast<size_t>(r);
    iov.iov_base = static_cast<char*>(iov.iov_base) + r;
    iov.iov_len -= static_cast<size_t>(r);
    msg.msg_control = nullptr;
    msg.msg_controllen = 0;
  }
  return true;
}

bool RawConn::Send(uint32_t request, uint32_t flags, const void* payload, uint32_t size,
                   std::span<const int> fds) {
  std::vector<uint8_t> buf(sizeof(vu::Header) + size);
  vu::Header hdr{request, flags, size};
  std::memcpy(buf.data(), &hdr, sizeof(hdr));
  if (size > 0) std::memcpy(buf.data() + sizeof(hdr), payload, size);
  return SendBytes(buf.data(), buf.size(), fds);
}

bool RawConn::SendU64(uint32_t request, uint64_t value, uint32_t flags, std::span<const int> fds) {
  return Send(request, flags, &value, sizeof(value), fds);
}

namespace {

// Reads exactly len bytes; closes any fds that arrive.
Got ReadExact(int fd, void* buf, size_t len, std::chrono::steady_clock::time_point deadline) {
  size_t got = 0;
  while (got < len) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (r == 0) return Got::kTimeout;
    if (r < 0) continue;
    std::vector<int> fds;
    ssize_t n = RecvWithFds(fd, static_cast<char*>(buf) + got, len - got, MSG_DONTWAIT, &fds);
    for (int rfd : fds) close(rfd);
    if (n == 0) return Got::kClosed;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Got::kClosed;  // ECONNRESET
    }
    got += static_cast<size_t>(n);
  }
  return Got::kReply;
}

}  // namespace

Got RawConn::Recv(RawReply* reply, std::chrono::milliseconds timeout) {
  if (fd_ < 0) return Got::kClosed;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Got g = ReadExact(fd_, &reply->hdr, sizeof(reply->hdr), deadline);
  if (g != Got::kReply) return g;
  if (reply->hdr.size > 4096) return Got::kClosed;  // nonsense; treat as broken
  reply->payload.resize(reply->hdr.size);
  return ReadExact(fd_, reply->payload.data(), reply->payload.size(), deadline);
}

bool RawConn::WaitClosed(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    char buf[256];
    Got g = ReadExact(fd_, buf, 1, deadline);
    if (g == Got::kClosed) return true;
    if (g == Got::kTimeout) return false;
  }
}

bool RawConn::GetU64(uint32_t request, uint64_t* value) {
  if (!Send(request, vu::kVersion, nullptr, 0)) return false;
  RawReply r;
  if (Recv(&r) != Got::kReply || r.hdr.request != request || r.hdr.flags != vu::kReplyFlags ||
      r.payload.size() != 8) {
    return false;
  }
  *value = r.u64();
  return true;
}

uint64_t RawConn::Acked(uint32_t request, const void* payload, uint32_t size,
                        std::span<const int> fds) {
  if (!Send(request, vu::kVersion | vu::kFlagNeedReply, payload, size, fds)) return ~0ull;
  RawReply r;
  if (Recv(&r) != Got::kReply || r.hdr.request != request) return ~0ull;
  return r.u64();
}

HandRing::HandRing(bool sealable) {
  memfd_ = memfd_create("hand-ring", MFD_CLOEXEC | (sealable ? MFD_ALLOW_SEALING : 0u));
  if (memfd_ >= 0 && ftruncate(memfd_, kSize) == 0) {
    void* p = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
    if (p != MAP_FAILED) host_ = static_cast<uint8_t*>(p);
  }
}

HandRing::~HandRing() {
  if (host_ != nullptr) munmap(host_, kSize);
  if (memfd_ >= 0) close(memfd_);
}

vu::MemRegion HandRing::region() const {
  return {kGpa, kSize, reinterpret_cast<uint64_t>(host_), 0};
}

void HandRing::SetDesc(uint16_t i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next) {
  auto* d = reinterpret_cast<vring_desc*>(host_ + kDescOff) + i;
  d->addr = addr;
  d->len = len;
  d->flags = flags;
  d->next = next;
}

void HandRing::PushAvail(uint16_t head, uint16_t n) {
  auto* a = reinterpret_cast<vring_avail*>(host_ + kAvailOff);
  a->ring[avail_idx_ % n] = head;
  SetAvailIdx(static_cast<uint16_t>(avail_idx_ + 1));
}

void HandRing::SetAvailIdx(uint16_t idx) {
  auto* a = reinterpret_cast<vring_avail*>(host_ + kAvailOff);
  avail_idx_ = idx;
  __atomic_store_n(&a->idx, idx, __ATOMIC_RELEASE);
}

uint16_t HandRing::UsedIdx() const {
  auto* u = reinterpret_cast<vring_used*>(host_ + kUsedOff);
  return __atomic_load_n(&u->idx, __ATOMIC_ACQUIRE);
}

void HandRing::UsedEntry(uint16_t slot, uint32_t* id, uint32_t* len) const {
  auto* u = reinterpret_cast<vring_used*>(host_ + kUsedOff);
  *id = u->ring[slot].id;
  *len = u->ring[slot].len;
}

bool RawHandshake(RawConn& c, std::string* why) {
  uint64_t features = 0, protocol = 0, queues = 0;
  if (!c.GetU64(vu::kGetFeatures, &features)) return *why = "GET_FEATURES", false;
  if (!(features & vu::kFProtocolFeatures)) return *why = "no protocol features", false;
  if (!c.GetU64(vu::kGetProtocolFeatures, &protocol)) return *why = "GET_PROTOCOL_FEATURES", false;
  const uint64_t want =
      protocol & ((1ull << vu::kPfReplyAck) | (1ull << vu::kPfMq) | (1ull << vu::kPfConfig) |
                  (1ull << vu::kPfResetDevice) | (1ull << vu::kPfConfigureMemSlots));
  if (!(want & (1ull << vu::kPfReplyAck))) return *why = "no REPLY_ACK", false;
  if (!c.SendU64(vu::kSetProtocolFeatures, want)) return *why = "SET_PROTOCOL_FEATURES", false;
  if (!c.GetU64(vu::kGetQueueNum, &queues)) return *why = "GET_QUEUE_NUM", false;
  if (c.Acked(vu::kSetOwner, nullptr, 0) != 0) return *why = "SET_OWNER", false;
  const uint64_t ack = features & (vu::kFVersion1 | vu::kFProtocolFeatures |
                                   vu::kFRingIndirectDesc | vu::kFRingEventIdx);
  if (c.AckedU64(vu::kSetFeatures, ack) != 0) return *why = "SET_FEATURES", false;
  return true;
}

bool RawSetMemTable(RawConn& c, const HandRing& ring, std::string* why) {
  vu::MemTable t{};
  t.nregions = 1;
  t.regions[0] = ring.region();
  const int fd = ring.memfd();
  if (c.Acked(vu::kSetMemTable, &t, 8 + sizeof(vu::MemRegion), {&fd, 1}) != 0) {
    return *why = "SET_MEM_TABLE", false;
  }
  return true;
}

bool RawSetupQueue(RawConn& c, const HandRing& ring, uint16_t q, uint16_t n, int kick, int call,
                   int err, std::string* why) {
  vu::VringState num{q, n};
  if (c.Acked(vu::kSetVringNum, &num, sizeof(num)) != 0) return *why = "SET_VRING_NUM", false;
  vu::VringState base{q, 0};
  if (c.Acked(vu::kSetVringBase, &base, sizeof(base)) != 0) return *why = "SET_VRING_BASE", false;
  vu::VringAddr addr{q,
                     0,
                     ring.uva(HandRing::kDescOff),
                     ring.uva(HandRing::kUsedOff),
                     ring.uva(HandRing::kAvailOff),
                     0};
  if (c.Acked(vu::kSetVringAddr, &addr, sizeof(addr)) != 0) return *why = "SET_VRING_ADDR", false;
  if (err >= 0 && c.AckedU64(vu::kSetVringErr, q, {&err, 1}) != 0) {
    return *why = "SET_VRING_ERR", false;
  }
  if (c.AckedU64(vu::kSetVringKick, q, {&kick, 1}) != 0) return *why = "SET_VRING_KICK", false;
  if (c.AckedU64(vu::kSetVringCall, q, {&call, 1}) != 0) return *why = "SET_VRING_CALL", false;
  vu::VringState enable{q, 1};
  if (c.Acked(vu::kSetVringEnable, &enable, sizeof(enable)) != 0) {
    return *why = "SET_VRING_ENABLE", false;
  }
  return true;
}

int CountOpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - 1;  // the directory's own fd
}

}  // namespace vdev::testing
