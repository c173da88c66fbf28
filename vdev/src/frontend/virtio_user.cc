#include "vdev/frontend/virtio_user.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "notify_fd.h"

namespace vdev::frontend {

namespace {

using Clock = std::chrono::steady_clock;

// Protocol features this front-end knows how to use.
constexpr uint64_t kWantedProtocolFeatures =
    (1ull << vu::kPfMq) | (1ull << vu::kPfReplyAck) | (1ull << vu::kPfConfig) |
    (1ull << vu::kPfResetDevice) | (1ull << vu::kPfConfigureMemSlots);

std::string Errno(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

vu::MemRegion ToWire(const RegionInfo& r) {
  vu::MemRegion m{};
  m.guest_phys_addr = r.guest_phys_addr;
  m.memory_size = r.size;
  m.userspace_addr = r.userspace_addr();
  m.mmap_offset = r.mmap_offset;
  return m;
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

VirtioUser::VirtioUser() = default;

VirtioUser::~VirtioUser() {
  Disconnect();
}

// ---- control plane -------------------------------------------------------

Status VirtioUser::Request(uint32_t request, const void* payload, uint32_t size,
                           std::span<const int> fds) {
  const bool ack = has_protocol_feature(vu::kPfReplyAck);
  Status s =
      channel_.Send(request, vu::kVersion | (ack ? vu::kFlagNeedReply : 0), payload, size, fds);
  if (!s.ok() || !ack) return s;
  uint64_t result = 0;
  s = channel_.Receive(request, &result, sizeof(result));
  if (!s.ok()) return s;
  if (result != 0) {
    return Status::ProtocolError("back-end rejected request " + std::to_string(request));
  }
  return Status::Ok();
}

Status VirtioUser::RequestU64(uint32_t request, uint64_t value, std::span<const int> fds) {
  return Request(request, &value, sizeof(value), fds);
}

Status VirtioUser::Query(uint32_t request, void* reply, uint32_t size) {
  // GET_* messages always have a reply; NEED_REPLY would ask for a second one.
  Status s = channel_.Send(request, vu::kVersion, reply, size);
  if (!s.ok()) return s;
  return channel_.Receive(request, reply, size);
}

Status VirtioUser::GetU64(uint32_t request, uint64_t* value) {
  Status s = channel_.Send(request, vu::kVersion, nullptr, 0);
  if (!s.ok()) return s;
  return channel_.Receive(request, value, sizeof(*value));
}

Status VirtioUser::SendMemTable() {
  std::vector<RegionInfo> regions = memory_.Regions();
  if (regions.size() > vu::kMaxMemRegions) {
    return Status::Unsupported("more than 8 regions need CONFIGURE_MEM_SLOTS");
  }
  vu::MemTable table{};
  int fds[vu::kMaxMemRegions];
  table.nregions = static_cast<uint32_t>(regions.size());
  for (size_t i = 0; i < regions.size(); ++i) {
    table.regions[i] = ToWire(regions[i]);
    fds[i] = regions[i].fd;
  }
  const auto size = static_cast<uint32_t>(8 + sizeof(vu::MemRegion) * regions.size());
  return Request(vu::kSetMemTable, &table, size, {fds, regions.size()});
}

Status VirtioUser::Connect(const std::string& socket_path, const Options& options) {
  Disconnect();
  std::lock_guard lock(mu_);
  options_ = options;
  Status s = Handshake(socket_path);
  if (!s.ok()) {
    channel_.Close();
    CloseQueues();
    return s;
  }
  connected_.store(true, std::memory_order_release);
  return Status::Ok();
}

Status VirtioUser::Handshake(const std::string& socket_path) {
  const Options& o = options_;
  if (o.queue_size == 0 || o.queue_size > 32768 || (o.queue_size & (o.queue_size - 1)) != 0) {
    return Status::InvalidArgument("queue size must be a power of two up to 32768");
  }
  if (o.config_size > vu::kMaxConfigSize) {
    return Status::InvalidArgument("config space is at most 256 bytes");
  }
  channel_.set_timeout(o.reply_timeout);
  Status s = channel_.Connect(socket_path, o.connect_timeout);
  if (!s.ok()) return s;

  protocol_features_ = 0;
  s = GetU64(vu::kGetFeatures, &device_features_);
  if (!s.ok()) return s;
  if ((device_features_ & vu::kFVersion1) == 0) {
    return Status::Unsupported("back-end does not offer VIRTIO_F_VERSION_1");
  }
  if (device_features_ & vu::kFProtocolFeatures) {
    uint64_t offered = 0;
    s = GetU64(vu::kGetProtocolFeatures, &offered);
    if (!s.ok()) return s;
    const uint64_t wanted = offered & kWantedProtocolFeatures;
    // Sent before REPLY_ACK is in force, so never with NEED_REPLY.
    s = channel_.Send(vu::kSetProtocolFeatures, vu::kVersion, &wanted, sizeof(wanted));
    if (!s.ok()) return s;
    protocol_features_ = wanted;
  }
  if (has_protocol_feature(vu::kPfMq)) {
    uint64_t n = 0;
    s = GetU64(vu::kGetQueueNum, &n);
    if (!s.ok()) return s;
    max_queues_ = static_cast<uint16_t>(std::min<uint64_t>(n, 256));
  } else {
    max_queues_ = o.num_queues != 0 ? o.num_queues : 1;
  }
  const uint16_t nq = o.num_queues != 0 ? o.num_queues : max_queues_;
  if (nq == 0 || nq > max_queues_ || nq > 256) {
    return Status::InvalidArgument("back-end offers " + std::to_string(max_queues_) + " queues, " +
                                   std::to_string(nq) + " requested");
  }
  max_mem_slots_ = vu::kMaxMemRegions;
  if (has_protocol_feature(vu::kPfConfigureMemSlots)) {
    s = GetU64(vu::kGetMaxMemSlots, &max_mem_slots_);
    if (!s.ok()) return s;
  }
  s = Request(vu::kSetOwner, nullptr, 0);
  if (!s.ok()) return s;
  config_.clear();
  if (o.config_size > 0) {
    if (!has_protocol_feature(vu::kPfConfig)) {
      return Status::Unsupported("back-end does not offer VHOST_USER_PROTOCOL_F_CONFIG");
    }
    config_.resize(o.config_size);
    s = ReadConfigLocked(0, o.config_size, config_.data());
    if (!s.ok()) return s;
  }

  uint64_t accept = o.driver_features | vu::kFVersion1 | vu::kFProtocolFeatures;
  if (o.event_idx) accept |= vu::kFRingEventIdx;
  if (o.indirect) accept |= vu::kFRingIndirectDesc;
  features_ = device_features_ & accept;
  s = RequestU64(vu::kSetFeatures, features_);
  if (!s.ok()) return s;

  if (!memory_created_) {
    s = memory_.CreateRegion(o.memory_size, /*allocatable=*/true, nullptr);
    if (!s.ok()) return s;
    memory_created_ = true;
  }
  SplitRing::Options ro;
  ro.size = o.queue_size;
  ro.event_idx = (features_ & vu::kFRingEventIdx) != 0;
  ro.indirect = (features_ & vu::kFRingIndirectDesc) != 0;
  queues_.resize(nq);
  for (Queue& q : queues_) {
    s = SplitRing::Create(&memory_, ro, &q.ring);
    if (!s.ok()) return s;
    if (o.busy_poll) {
      q.ring->DisableNotifications();
    } else {
      q.kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      q.call_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      if (q.kick_fd < 0 || q.call_fd < 0) return Status::IoError(Errno("eventfd"));
    }
  }
  s = SendMemTable();
  if (!s.ok()) return s;
  for (uint16_t i = 0; i < nq; ++i) {
    s = StartQueueLocked(i, 0);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status VirtioUser::StartQueueLocked(uint16_t index, uint16_t base) {
  Queue& q = queues_[index];
  vu::VringState num{index, q.ring->size()};
  Status s = Request(vu::kSetVringNum, &num, sizeof(num));
  if (!s.ok()) return s;
  vu::VringState b{index, base};
  s = Request(vu::kSetVringBase, &b, sizeof(b));
  if (!s.ok()) return s;
  vu::VringAddr addr{};
  addr.index = index;
  addr.desc_user_addr = q.ring->desc_user_addr();
  addr.used_user_addr = q.ring->used_user_addr();
  addr.avail_user_addr = q.ring->avail_user_addr();
  s = Request(vu::kSetVringAddr, &addr, sizeof(addr));
  if (!s.ok()) return s;
  if (q.kick_fd >= 0) {
    const int fd = q.kick_fd;
    s = RequestU64(vu::kSetVringKick, index, {&fd, 1});
  } else {
    s = RequestU64(vu::kSetVringKick, index | vu::kVringNoFd);
  }
  if (!s.ok()) return s;
  if (q.call_fd >= 0) {
    const int fd = q.call_fd;
    s = RequestU64(vu::kSetVringCall, index, {&fd, 1});
  } else {
    s = RequestU64(vu::kSetVringCall, index | vu::kVringNoFd);
  }
  if (!s.ok()) return s;
  if (features_ & vu::kFProtocolFeatures) {
    vu::VringState enable{index, 1};
    s = Request(vu::kSetVringEnable, &enable, sizeof(enable));
    if (!s.ok()) return s;
  }
  q.started = true;
  q.broken = false;
  return Status::Ok();
}

Status VirtioUser::NoSuchQueue() {
  return Status::InvalidArgument("no such queue");
}

Status VirtioUser::CheckQueue(uint16_t queue) const {
  if (queue >= queues_.size()) return NoSuchQueue();
  return Status::Ok();
}

Status VirtioUser::StopQueue(uint16_t queue, uint16_t* base) {
  std::lock_guard lock(mu_);
  Status s = CheckQueue(queue);
  if (!s.ok()) return s;
  vu::VringState state{queue, 0};
  s = Query(vu::kGetVringBase, &state, sizeof(state));
  if (!s.ok()) {
    if (!channel_.is_open()) connected_.store(false, std::memory_order_release);
    return s;
  }
  if (state.index != queue) return Status::ProtocolError("GET_VRING_BASE answered another ring");
  queues_[queue].started = false;
  if (base != nullptr) *base = static_cast<uint16_t>(state.num);
  return Status::Ok();
}

Status VirtioUser::StartQueue(uint16_t queue, uint16_t base) {
  std::lock_guard lock(mu_);
  Status s = CheckQueue(queue);
  if (!s.ok()) return s;
  if (!channel_.is_open()) return Status::Disconnected("not connected");
  s = StartQueueLocked(queue, base);
  if (!channel_.is_open()) connected_.store(false, std::memory_order_release);
  return s;
}

Status VirtioUser::Stop() {
  Status first;
  {
    std::lock_guard lock(mu_);
    for (uint16_t i = 0; i < queues_.size() && channel_.is_open(); ++i) {
      if (!queues_[i].started) continue;
      vu::VringState state{i, 0};
      Status s = Query(vu::kGetVringBase, &state, sizeof(state));
      if (s.ok()) queues_[i].started = false;
      if (!s.ok() && first.ok()) first = s;
    }
  }
  Disconnect();
  return first;
}

void VirtioUser::CloseQueues() {
  for (Queue& q : queues_) {
    if (q.kick_fd >= 0) close(q.kick_fd);
    if (q.call_fd >= 0) close(q.call_fd);
  }
  queues_.clear();
}

void VirtioUser::Disconnect() {
  std::lock_guard lock(mu_);
  connected_.store(false, std::memory_order_release);
  channel_.Close();
  CloseQueues();
}

Status VirtioUser::ReadConfigLocked(uint32_t offset, uint32_t size, void* out) {
  if (size == 0 || size > vu::kMaxConfigSize || offset > vu::kMaxConfigSize - size) {
    return Status::InvalidArgument("config range outside 256 bytes");
  }
  struct {
    vu::ConfigHeader hdr;
    uint8_t data[vu::kMaxConfigSize];
  } msg{};
  msg.hdr = {offset, size, 0};
  const auto len = static_cast<uint32_t>(sizeof(vu::ConfigHeader) + size);
  Status s = channel_.Send(vu::kGetConfig, vu::kVersion, &msg, len);
  if (!s.ok()) return s;
  uint32_t got = 0;
  s = channel_.ReceiveUpTo(vu::kGetConfig, &msg, len, &got);
  if (!s.ok()) return s;
  // An empty payload is how a back-end refuses (vhost-user.rst).
  if (got == 0) return Status::ProtocolError("back-end refused GET_CONFIG");
  if (got != len || msg.hdr.offset != offset || msg.hdr.size != size) {
    channel_.Close();
    return Status::ProtocolError("malformed GET_CONFIG reply");
  }
  std::memcpy(out, msg.data, size);
  return Status::Ok();
}

Status VirtioUser::ReadConfig(uint32_t offset, uint32_t size, void* out) {
  std::lock_guard lock(mu_);
  if (!channel_.is_open()) return Status::Disconnected("not connected");
  if (!has_protocol_feature(vu::kPfConfig)) {
    return Status::Unsupported("back-end does not offer VHOST_USER_PROTOCOL_F_CONFIG");
  }
  Status s = ReadConfigLocked(offset, size, out);
  if (!channel_.is_open()) connected_.store(false, std::memory_order_release);
  return s;
}

// ---- memory --------------------------------------------------------------

Status VirtioUser::RegisterRegion(const RegionInfo& region) {
  if (!channel_.is_open()) return Status::Ok();  // sent with the table on connect
  Status s;
  if (has_protocol_feature(vu::kPfConfigureMemSlots)) {
    vu::SingleMemRegion m{};
    m.region = ToWire(region);
    const int fd = region.fd;
    s = Request(vu::kAddMemReg, &m, sizeof(m), {&fd, 1});
  } else {
    s = SendMemTable();
  }
  if (!channel_.is_open()) connected_.store(false, std::memory_order_release);
  return s;
}

Status VirtioUser::AddMemory(uint64_t size, bool allocatable, RegionInfo* out, uint64_t gpa) {
  std::lock_guard lock(mu_);
  RegionInfo info;
  Status s = memory_.CreateRegion(size, allocatable, &info, gpa);
  if (!s.ok()) return s;
  s = RegisterRegion(info);
  if (!s.ok()) {
    memory_.RemoveRegion(info.guest_phys_addr);
    return s;
  }
  if (out != nullptr) *out = info;
  return Status::Ok();
}

Status VirtioUser::AddMemoryFd(int fd, uint64_t offset, uint64_t size, RegionInfo* out,
                               uint64_t gpa) {
  std::lock_guard lock(mu_);
  RegionInfo info;
  Status s = memory_.AdoptRegion(fd, offset, size, &info, gpa);
  if (!s.ok()) return s;
  s = RegisterRegion(info);
  if (!s.ok()) {
    memory_.RemoveRegion(info.guest_phys_addr);
    return s;
  }
  if (out != nullptr) *out = info;
  return Status::Ok();
}

Status VirtioUser::RemoveMemory(uint64_t gpa) {
  std::lock_guard lock(mu_);
  RegionInfo info;
  if (!memory_.FindRegion(gpa, &info) || info.guest_phys_addr != gpa) {
    return Status::InvalidArgument("no region starts at that GPA");
  }
  // Checked before telling the back-end, so a refused removal changes nothing.
  if (memory_.HasAllocations(gpa)) {
    return Status::InvalidArgument("region still holds allocations (rings or buffers)");
  }
  if (channel_.is_open()) {
    Status s;
    if (has_protocol_feature(vu::kPfConfigureMemSlots)) {
      vu::SingleMemRegion m{};
      m.region = ToWire(info);
      s = Request(vu::kRemMemReg, &m, sizeof(m));
    } else {
      // Send the table without the region before unmapping it here.
      std::vector<RegionInfo> regions = memory_.Regions();
      vu::MemTable table{};
      int fds[vu::kMaxMemRegions];
      uint32_t n = 0;
      for (const RegionInfo& r : regions) {
        if (r.guest_phys_addr == gpa) continue;
        if (n == vu::kMaxMemRegions) return Status::Unsupported("too many regions");
        table.regions[n] = ToWire(r);
        fds[n] = r.fd;
        ++n;
      }
      table.nregions = n;
      s = Request(vu::kSetMemTable, &table, static_cast<uint32_t>(8 + sizeof(vu::MemRegion) * n),
                  {fds, n});
    }
    if (!channel_.is_open()) connected_.store(false, std::memory_order_release);
    if (!s.ok()) return s;
  }
  return memory_.RemoveRegion(gpa);
}

// ---- data path -----------------------------------------------------------

Status VirtioUser::AddChain(uint16_t queue, std::span<const HostBuffer> readable,
                            std::span<const HostBuffer> writable, uint64_t cookie, uint16_t* head,
                            bool indirect) {
  constexpr size_t kInline = 16;
  const size_t total = readable.size() + writable.size();
  Buffer inline_buf[kInline];
  std::vector<Buffer> heap;
  Buffer* bufs = inline_buf;
  if (total > kInline) {
    heap.resize(total);
    bufs = heap.data();
  }
  size_t i = 0;
  for (const HostBuffer& b : readable) {
    if (!memory_.GpaOf(b.data, b.len, &bufs[i].gpa)) {
      return Status::InvalidArgument("buffer outside guest memory");
    }
    bufs[i++].len = b.len;
  }
  for (const HostBuffer& b : writable) {
    if (!memory_.GpaOf(b.data, b.len, &bufs[i].gpa)) {
      return Status::InvalidArgument("buffer outside guest memory");
    }
    bufs[i++].len = b.len;
  }
  return AddChain(queue, std::span<const Buffer>(bufs, readable.size()),
                  std::span<const Buffer>(bufs + readable.size(), writable.size()), cookie, head,
                  indirect);
}

Status VirtioUser::Kick(uint16_t queue) {
  if (queue >= queues_.size()) [[unlikely]] {
    return Status::InvalidArgument("no such queue");
  }
  if (!connected()) return Status::Disconnected("not connected");
  Queue& q = queues_[queue];
  if (q.kick_fd < 0) {
    // Busy-poll: the back-end is never kicked, so whether it asked to be
    // does not matter.
    q.ring->PublishPolled();
    return Status::Ok();
  }
  // The back-end shares the kick eventfd's open file, so it can make it
  // blocking and fill its counter: NotifyEventFd refuses such an fd rather
  // than block this thread (a full counter on a non-blocking fd means a
  // notification is pending anyway).
  if (!q.ring->Publish()) return Status::Ok();
  if (NotifyEventFd(q.kick_fd) == NotifyResult::kRefused) {
    return Status::ProtocolError("the kick eventfd was made blocking (or is unusable)");
  }
  ++q.kicks_sent;
  return Status::Ok();
}

size_t VirtioUser::PollUsed(uint16_t queue, Completion* out, size_t max, Status* error) {
  if (queue >= queues_.size()) [[unlikely]] {
    if (error != nullptr) *error = Status::InvalidArgument("no such queue");
    return 0;
  }
  return PollQueue(queues_[queue], out, max, error);
}

size_t VirtioUser::PollQueue(Queue& q, Completion* out, size_t max, Status* error) {
  if (q.broken) [[unlikely]] {
    if (error != nullptr) *error = Status::ProtocolError("queue broken by a bogus used entry");
    return 0;
  }
  if (!q.ring->HasUsed()) return 0;
  Status ring_error;
  size_t n = q.ring->PollUsed(out, max, &ring_error);
  if (!ring_error.ok()) [[unlikely]] {
    q.broken = true;
    if (error != nullptr) *error = ring_error;
  }
  return n;
}

Status VirtioUser::WaitUsed(uint16_t queue, std::chrono::nanoseconds timeout, Completion* out,
                            size_t max, size_t* n, std::chrono::nanoseconds spin) {
  *n = 0;
  Status s = CheckQueue(queue);
  if (!s.ok()) return s;
  Queue& q = queues_[queue];
  // Completions already waiting need no deadline (and no clock read).
  if (q.ring->HasUsed() && !q.broken) {
    Status err;
    *n = PollQueue(q, out, max, &err);
    if (*n > 0) return Status::Ok();
    if (!err.ok()) return err;
  }
  const auto now = Clock::now();
  const auto deadline = now + timeout;
  // Interrupt mode's spin first, with notifications off; they are back on
  // before the thread sleeps (EnableNotifications below).
  const auto spin_until = now + std::min(spin, timeout);
  const bool spinning = spin.count() > 0 && q.call_fd >= 0;
  if (spinning) q.ring->DisableNotifications();
  const int sock = channel_.fd();
  for (uint32_t spins = 0;; ++spins) {
    if (q.broken || q.ring->HasUsed()) {
      Status err;
      *n = PollQueue(q, out, max, &err);
      if (*n > 0) return Status::Ok();
      if (!err.ok()) return err;
    }
    if (!connected()) return Status::Disconnected("not connected");
    if (q.call_fd < 0) {
      // Busy-poll: spin on the used index (one load a pass while nothing
      // arrives), looking at the clock and the socket only now and then.
      if ((spins & 1023) == 1023) {
        if (Clock::now() >= deadline) return Status::Timeout("no completion");
        if ((spins & 0xfffff) == 0xfffff) {
          pollfd p{sock, POLLRDHUP, 0};
          if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
            return Status::Disconnected("back-end went away");
          }
        }
      }
      CpuRelax();
      continue;
    }
    if (spinning && Clock::now() < spin_until) {
      // Yield, not pause: where the back-end's thread or other ranks share
      // this CPU, the completion waited for is theirs to produce, and a
      // spin that kept the CPU would hold them off until the scheduler's
      // tick (a 4 KiB all-reduce of 2 ranks on two CPUs: 139 us spinning on
      // pause, 31-35 us yielding, 45 us sleeping). Alone on a CPU, a yield
      // returns at once. Open MPI yields so when its ranks oversubscribe.
      sched_yield();
      continue;
    }
    // Interrupt mode: re-arm, re-check, then sleep on the call eventfd and
    // the socket (whose hang-up means the back-end is gone).
    if (q.ring->EnableNotifications()) continue;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() < 0) return Status::Timeout("no completion");
    pollfd p[2] = {{q.call_fd, POLLIN, 0}, {sock, POLLRDHUP, 0}};
    int r = poll(p, sock >= 0 ? 2 : 1, static_cast<int>(left.count()) + 1);
    if (r < 0 && errno != EINTR) return Status::IoError(Errno("poll"));
    // Emptied without blocking, also if the back-end (which shares the
    // file) cleared O_NONBLOCK and emptied it since poll() saw it readable.
    if ((p[0].revents & POLLIN) && !DrainEventFd(q.call_fd)) {
      return Status::ProtocolError("the call eventfd was made blocking");
    }
    if (sock >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
      // Collect whatever was completed before the back-end went away.
      *n = PollQueue(q, out, max, nullptr);
      if (*n > 0) return Status::Ok();
      return Status::Disconnected("back-end went away");
    }
    if (r == 0 && Clock::now() >= deadline) {
      *n = PollQueue(q, out, max, nullptr);
      return *n > 0 ? Status::Ok() : Status::Timeout("no completion");
    }
  }
}

}  // namespace vdev::frontend
