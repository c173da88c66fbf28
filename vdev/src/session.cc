#include "vdev/session.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "blocking_call_guard.h"
#include "notify_fd.h"
#include "spdlog/fmt/fmt.h"
#include "spdlog/spdlog.h"

namespace vdev {

namespace {

bool HasOwnReply(uint32_t request) {
  switch (request) {
    case vu::kGetFeatures:
    case vu::kGetProtocolFeatures:
    case vu::kGetVringBase:
    case vu::kGetQueueNum:
    case vu::kGetConfig:
    case vu::kGetMaxMemSlots:
    case vu::kGetStatus:
      return true;
    default:
      return false;
  }
}

}  // namespace

bool SessionHost::SendBackendMessage(int fd, const std::vector<uint8_t>& bytes) {
  // Never block the connection on a slow front-end: a config-change
  // notification that does not fit in the socket buffer is dropped.
  ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  return n == static_cast<ssize_t>(bytes.size());
}

Session::Session(std::unique_ptr<Device> device, SessionHost* host, SessionOptions options,
                 std::string name)
    : device_(std::move(device)),
      host_(host),
      options_(std::move(options)),
      name_(std::move(name)) {
  // The eventfd watchdog's warnings belong in the back-end's log.
  SetGuardWarningSink([](const std::string& message) { spdlog::warn("{}", message); });
  uint32_t n = device_->NumQueues();
  if (n > vu::kMaxQueues) {
    spdlog::warn("vdev[{}]: device asks for {} queues; vhost-user addresses at most {}", name_, n,
                 vu::kMaxQueues);
    n = vu::kMaxQueues;
  }
  queues_.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    queues_[i].q = std::make_unique<SplitQueue>(static_cast<uint16_t>(i), options_.queue_limits);
    // A turn's budget ran out: finish the work in a later handler (or the
    // scheduler's later turn). Outside a turn (a device popping in a posted
    // completion) the device is inside Pop: never run a turn from there.
    queues_[i].q->set_on_yield([this](uint16_t q) {
      if (in_turn_) {
        WantTurn(q);
      } else {
        host_->Post([this, q] { Kick(q); });
      }
    });
  }
  if (options_.turn_scheduler) {
    turns_ = options_.turn_scheduler->Join(options_.share_key, options_.share_weight, [this] {
      host_->Post([this] {
        // Gone (disconnected) since, or another session goes first.
        if (turns_ && turns_->Resumed()) RunTurn();
      });
    });
  }
}

Session::~Session() {
  Disconnect();
}

void Session::Start() {
  device_->OnConnect(*this);
}

void Session::Disconnect() {
  if (disconnected_) return;
  disconnected_ = true;
  pending_stop_ = -1;
  // A turn granted to this session goes to the next one waiting.
  turns_.reset();
  wanting_turns_.clear();
  StopAllQueues();
  device_->OnReset();
  device_->OnDisconnect();
}

bool Session::StopDrained() const {
  return pending_stop_ >= 0 && queues_[pending_stop_].q->in_flight() == 0;
}

std::vector<uint8_t> Session::PendingStopRequest() const {
  if (pending_stop_ < 0) return {};
  const vu::VringState state{static_cast<uint32_t>(pending_stop_), 0};
  return MakeMessage(vu::kGetVringBase, vu::kVersion, &state, sizeof(state));
}

std::vector<uint8_t> Session::FinishStop() {
  if (pending_stop_ < 0) return {};
  const uint16_t i = static_cast<uint16_t>(pending_stop_);
  pending_stop_ = -1;
  SplitQueue& q = *queues_[i].q;
  if (q.in_flight() > 0) {
    spdlog::warn(
        "vdev[{}]: GET_VRING_BASE {}: {} chains still in flight after {} ms; answering base {}, "
        "their completions will be dropped",
        name_, i, q.in_flight(), options_.stop_drain_timeout.count(), q.last_avail());
  }
  StopQueue(i);
  vu::VringState out{i, q.last_avail()};
  return MakeReply(vu::kGetVringBase, &out, sizeof(out));
}

void Session::Post(std::function<void()> fn) {
  host_->Post(std::move(fn));
}

MemoryMapPtr Session::Memory() const {
  std::lock_guard<std::mutex> lock(memory_mu_);
  return memory_;
}

uint64_t Session::OfferedFeatures() const {
  return device_->Features() | vu::kFVersion1 | vu::kFProtocolFeatures;
}

uint64_t Session::OfferedProtocolFeatures() const {
  uint64_t f = (1ull << vu::kPfMq) | (1ull << vu::kPfReplyAck) | (1ull << vu::kPfResetDevice) |
               (1ull << vu::kPfConfigureMemSlots) | (1ull << vu::kPfStatus) |
               (1ull << vu::kPfBackendReq);
  // QEMU warns when CONFIG is offered for a device without config space.
  if (!device_->ConfigSpace().empty()) f |= 1ull << vu::kPfConfig;
  return f;
}

void Session::NotifyConfigChanged() {
  if (!backend_fd_.valid() || !Negotiated(vu::kPfBackendReq)) {
    spdlog::debug("vdev[{}]: config change not sent (no back-end channel)", name_);
    return;
  }
  // A suspended device (every ring stopped by GET_VRING_BASE) must not send
  // back-end requests.
  bool any_started =
      std::any_of(queues_.begin(), queues_.end(), [](const QueueState& s) { return s.started; });
  if (ever_started_ && !any_started) {
    spdlog::debug("vdev[{}]: config change not sent while suspended", name_);
    return;
  }
  vu::Header h{vu::kBackendConfigChange, vu::kVersion, 0};
  std::vector<uint8_t> bytes(sizeof(h));
  std::memcpy(bytes.data(), &h, sizeof(h));
  if (!host_->SendBackendMessage(backend_fd_.get(), bytes)) {
    spdlog::warn("vdev[{}]: could not send CONFIG_CHANGE_MSG", name_);
  }
}

Session::Result Session::Replay(Message msg) {
  replaying_ = true;
  Result result = Handle(std::move(msg));
  replaying_ = false;
  return result;
}

Session::Result Session::Handle(Message msg) {
  Result result;
  const uint32_t request = msg.request();
  const bool need_reply = msg.need_reply();
  spdlog::debug("vdev[{}]: {} size={} fds={}{}", name_, RequestName(request), msg.header.size,
                msg.fds.size(), need_reply ? " need_reply" : "");
  Error error = ValidateMessage(msg);
  if (error.empty() && StopPending()) error = "message while a GET_VRING_BASE reply is pending";
  if (error.empty()) error = Dispatch(msg, &result.reply);
  result.stop_pending = StopPending();
  msg.fds.clear();  // closes every descriptor that was not kept
  if (error.empty()) {
    // REPLY_ACK: messages without a reply of their own are acknowledged.
    if (need_reply && !HasOwnReply(request)) result.reply = MakeU64Reply(request, 0);
    return result;
  }
  spdlog::error("vdev[{}]: {} refused: {}", name_, RequestName(request), error);
  if (need_reply && !HasOwnReply(request)) {
    result.reply = MakeU64Reply(request, 1);
  } else if (request == vu::kGetConfig && msg.header.size >= sizeof(vu::ConfigHeader)) {
    result.reply.clear();
    GetConfig(msg, &result.reply);  // answers with an empty payload: the error form
  } else {
    result.reply.clear();
    result.close = true;
  }
  return result;
}

Error Session::CheckIndex(uint32_t index) const {
  if (index < queues_.size()) return {};
  return fmt::format("queue index {} out of range ({} queues)", index, queues_.size());
}

Error Session::Dispatch(Message& msg, std::vector<uint8_t>* reply) {
  const uint32_t request = msg.request();
  switch (request) {
    case vu::kGetFeatures:
      *reply = MakeU64Reply(request, OfferedFeatures());
      return {};
    case vu::kSetFeatures: {
      uint64_t f = msg.Get<uint64_t>();
      if (f & ~OfferedFeatures()) {
        return fmt::format("features {:#x} include bits not offered ({:#x})", f, OfferedFeatures());
      }
      acked_features_ = f;
      features_set_ = true;
      for (QueueState& s : queues_) {
        s.q->set_features(f & vu::kFRingEventIdx, f & vu::kFRingIndirectDesc);
      }
      device_->OnFeatures(f);
      if (!(f & vu::kFProtocolFeatures)) {
        for (uint16_t i = 0; i < queues_.size(); ++i) {
          queues_[i].enabled = true;
          Reconcile(i);
        }
      }
      return {};
    }
    case vu::kGetProtocolFeatures:
      *reply = MakeU64Reply(request, OfferedProtocolFeatures());
      return {};
    case vu::kSetProtocolFeatures: {
      uint64_t f = msg.Get<uint64_t>();
      if (f & ~OfferedProtocolFeatures()) {
        return fmt::format("protocol features {:#x} include bits not offered ({:#x})", f,
                           OfferedProtocolFeatures());
      }
      acked_protocol_ = f;
      return {};
    }
    case vu::kSetOwner:
      return {};
    case vu::kResetOwner:
      // Deprecated; the spec allows treating it as "disable all rings" and
      // asks back-ends to keep the connection's state.
      for (uint16_t i = 0; i < queues_.size(); ++i) {
        StopQueue(i);
        queues_[i].enabled = false;
      }
      return {};
    case vu::kResetDevice:
      for (uint16_t i = 0; i < queues_.size(); ++i) {
        StopQueue(i);
        queues_[i].enabled = false;
        queues_[i].q->set_last_avail(0);
      }
      status_ = 0;
      device_->OnReset();
      return {};
    case vu::kGetQueueNum:
      *reply = MakeU64Reply(request, queues_.size());
      return {};
    case vu::kGetMaxMemSlots:
      *reply = MakeU64Reply(request, options_.max_mem_slots);
      return {};
    case vu::kSetMemTable:
      return SetMemTable(msg);
    case vu::kAddMemReg:
      return AddMemReg(msg);
    case vu::kRemMemReg:
      return RemMemReg(msg);
    case vu::kSetVringNum: {
      auto st = msg.Get<vu::VringState>();
      if (Error e = CheckIndex(st.index); !e.empty()) return e;
      if (queues_[st.index].started) return "SET_VRING_NUM on a started ring";
      if (!SplitQueue::ValidSize(st.num) || st.num > device_->MaxQueueSize()) {
        return fmt::format("queue size {} invalid (power of two up to {})", st.num,
                           std::min<uint32_t>(device_->MaxQueueSize(), SplitQueue::kMaxSize));
      }
      queues_[st.index].q->set_size(static_cast<uint16_t>(st.num));
      return {};
    }
    case vu::kSetVringAddr: {
      auto a = msg.Get<vu::VringAddr>();
      if (Error e = CheckIndex(a.index); !e.empty()) return e;
      QueueState& s = queues_[a.index];
      s.q->set_addresses(a.desc_user_addr, a.avail_user_addr, a.used_user_addr);
      if (s.q->started()) {
        // Address change on a running ring (dirty-log toggles re-send it).
        Error e;
        if (!s.q->Remap(memory_, &e)) {
          Reconcile(static_cast<uint16_t>(a.index));
          return e;
        }
      }
      return {};
    }
    case vu::kSetVringBase: {
      auto st = msg.Get<vu::VringState>();
      if (Error e = CheckIndex(st.index); !e.empty()) return e;
      if (queues_[st.index].started) return "SET_VRING_BASE on a started ring";
      if (st.num > 0xffff) return fmt::format("split ring base {} out of range", st.num);
      queues_[st.index].q->set_last_avail(static_cast<uint16_t>(st.num));
      return {};
    }
    case vu::kGetVringBase: {
      auto st = msg.Get<vu::VringState>();
      if (Error e = CheckIndex(st.index); !e.empty()) return e;
      const uint16_t i = static_cast<uint16_t>(st.index);
      SplitQueue& q = *queues_[i].q;
      if (queues_[i].delivered && q.in_flight() > 0 && options_.stop_drain_timeout.count() > 0) {
        // Drain before answering: the base we report says every chain
        // before it is done, so completions must land while the ring is
        // still ours. Nothing new is popped meanwhile.
        q.set_draining();
        device_->OnQueueStopping(q);
        q.Flush();
        if (q.in_flight() > 0) {
          spdlog::debug("vdev[{}]: GET_VRING_BASE {} waits for {} chains in flight", name_, i,
                        q.in_flight());
          pending_stop_ = i;
          return {};
        }
      }
      StopQueue(i);
      vu::VringState out{st.index, q.last_avail()};
      *reply = MakeReply(request, &out, sizeof(out));
      return {};
    }
    case vu::kSetVringKick:
    case vu::kSetVringCall:
    case vu::kSetVringErr:
      return SetVringFd(msg);
    case vu::kSetVringEnable: {
      auto st = msg.Get<vu::VringState>();
      if (Error e = CheckIndex(st.index); !e.empty()) return e;
      if (st.num > 1) return fmt::format("SET_VRING_ENABLE value {} is not 0 or 1", st.num);
      if (features_set_ && !(acked_features_ & vu::kFProtocolFeatures)) {
        return "SET_VRING_ENABLE without VHOST_USER_F_PROTOCOL_FEATURES";
      }
      queues_[st.index].enabled = st.num == 1;
      Reconcile(static_cast<uint16_t>(st.index));
      return {};
    }
    case vu::kGetConfig:
      GetConfig(msg, reply);
      return {};
    case vu::kSetConfig:
      return SetConfig(msg);
    case vu::kSetBackendReqFd:
      backend_fd_ = std::move(msg.fds[0]);
      return {};
    case vu::kSetStatus: {
      uint64_t v = msg.Get<uint64_t>();
      if (v > 0xff) return fmt::format("status {:#x} does not fit a byte", v);
      status_ = static_cast<uint8_t>(v);
      if (status_ == 0) {
        // Device reset by the driver: rings stop, per-driver state goes; the
        // ring configuration (fds, sizes) stays for the next start.
        for (uint16_t i = 0; i < queues_.size(); ++i) StopQueue(i);
        device_->OnReset();
      }
      return {};
    }
    case vu::kGetStatus:
      *reply = MakeU64Reply(request, status_);
      return {};
    default:
      return fmt::format("unsupported request {}", request);
  }
}

Error Session::SetVringFd(Message& msg) {
  uint64_t v = msg.Get<uint64_t>();
  uint32_t index = static_cast<uint32_t>(v & vu::kVringIdxMask);
  bool nofd = v & vu::kVringNoFd;
  if (Error e = CheckIndex(index); !e.empty()) return e;
  if (nofd && msg.request() == vu::kSetVringKick && !options_.allow_nofd_kick &&
      !Polled(static_cast<uint16_t>(index))) {
    return fmt::format("queue {} without a kick eventfd would need polling, which is not allowed",
                       index);
  }
  QueueState& s = queues_[index];
  UniqueFd fd = nofd ? UniqueFd() : std::move(msg.fds[0]);
  if (fd.valid()) {
    if (!IsEventFd(fd.get())) {
      return fmt::format("{} fd for queue {} is not an eventfd", RequestName(msg.request()), index);
    }
    // Notification writes and kick drains must never block the connection.
    SetNonBlocking(fd.get());
  }
  switch (msg.request()) {
    case vu::kSetVringCall:
      s.call = std::move(fd);
      s.q->set_call_fd(s.call.get());
      return {};
    case vu::kSetVringErr:
      s.err = std::move(fd);
      s.q->set_err_fd(s.err.get());
      return {};
    default:
      break;
  }
  // SET_VRING_KICK: (re)starts the ring. Replayed after a crash, it goes
  // on where the crashed process stood if that process got as far as
  // starting the ring (its journal describes the ring then).
  uint16_t i = static_cast<uint16_t>(index);
  const bool resume = replaying_ && s.q->journaled();
  if (s.started) StopQueue(i, /*keep_journal=*/resume);
  s.kick = std::move(fd);
  s.nofd_kick = nofd;
  Error error;
  if (!(resume ? s.q->Recover(memory_, &error) : s.q->Start(memory_, &error))) return error;
  s.started = true;
  ever_started_ = true;
  if (s.kick.valid()) {
    host_->WatchKick(i, s.kick.get());
    s.watching = true;
  }
  // Without PROTOCOL_FEATURES a ring is enabled as soon as it starts; with
  // it (or before SET_FEATURES says which) it waits for SET_VRING_ENABLE.
  if (features_set_ && !(acked_features_ & vu::kFProtocolFeatures)) s.enabled = true;
  Reconcile(i);
  return {};
}

void Session::StopQueue(uint16_t i, bool keep_journal) {
  QueueState& s = queues_[i];
  if (s.watching) {
    host_->UnwatchKick(i);
    s.watching = false;
  }
  s.kick.reset();
  bool was_started = s.started;
  s.started = false;
  Reconcile(i);
  if (was_started) {
    s.q->Flush();
    s.q->Stop(keep_journal);
  }
}

void Session::StopAllQueues() {
  for (uint16_t i = 0; i < queues_.size(); ++i) StopQueue(i);
}

bool Session::Polled(uint16_t i) const {
  if (options_.busy_poll || queues_[i].nofd_kick) return true;
  return std::find(options_.busy_poll_queues.begin(), options_.busy_poll_queues.end(), i) !=
         options_.busy_poll_queues.end();
}

void Session::Reconcile(uint16_t i) {
  QueueState& s = queues_[i];
  bool run = s.started && s.enabled && s.q->started() && !disconnected_;
  if (run && !s.delivered) {
    s.q->set_polling(Polled(i));
    s.delivered = true;
    spdlog::debug("vdev[{}]: queue {} running (size {}, {})", name_, i, s.q->size(),
                  Polled(i) ? "busy-poll" : "kick");
    device_->OnQueueStarted(*s.q);
    // Chains made available before the ring ran (or a kick that fired while
    // it was disabled) must not wait for the next kick.
    s.q->NewTurn();
    if (s.delivered && !frozen_ && s.q->HasAvailable()) {
      if (turns_) {
        WantTurn(i);
      } else {
        device_->OnKick(*s.q);
      }
    }
  } else if (!run && s.delivered) {
    if (s.polled_awhile) EndPollingAwhile(i, /*serve=*/false);
    s.delivered = false;
    spdlog::debug("vdev[{}]: queue {} stopped", name_, i);
    device_->OnQueueStopped(i);
  }
  UpdatePolling();
}

void Session::UpdatePolling() {
  // The busy-poll loop walks this list on every pass: keep it precomputed.
  polled_.clear();
  polls_for_good_ = false;
  for (uint16_t i = 0; i < queues_.size(); ++i) {
    const QueueState& s = queues_[i];
    if (!s.delivered) continue;
    const bool for_good = Polled(i);
    if (for_good || s.polled_awhile) polled_.push_back(i);
    polls_for_good_ = polls_for_good_ || for_good;
  }
  bool want = !polled_.empty() && !frozen_;
  if (want != polling_) {
    polling_ = want;
    host_->SetPolling(want);
  }
}

void Session::Kick(uint16_t queue) {
  if (queue >= queues_.size() || !queues_[queue].delivered || frozen_) return;
  if (turns_) {
    WantTurn(queue);
    return;
  }
  queues_[queue].q->NewTurn();
  device_->OnKick(*queues_[queue].q);
}

void Session::WantTurn(uint16_t i) {
  QueueState& s = queues_[i];
  if (!s.turn_wanted) {
    s.turn_wanted = true;
    wanting_turns_.push_back(i);
  }
  // In a turn, its end asks for the next one.
  if (!in_turn_ && turns_->Request()) RunTurn();
}

void Session::RunTurn() {
  turns_->Begin();
  in_turn_ = true;
  while (!wanting_turns_.empty()) {
    const uint16_t i = wanting_turns_.front();
    wanting_turns_.pop_front();
    QueueState& s = queues_[i];
    s.turn_wanted = false;
    if (!s.delivered) continue;  // stopped since it asked
    s.q->NewTurn();
    device_->OnKick(*s.q);
    break;
  }
  in_turn_ = false;
  if (turns_) turns_->End(!wanting_turns_.empty());
}

bool Session::Poll() {
  bool work = false;
  bool window_ended = false;
  if (frozen_) return false;
  // Indexing (not iterators): a device callback cannot change the list, but
  // stay safe if one ever does.
  for (size_t k = 0; k < polled_.size(); ++k) {
    const uint16_t i = polled_[k];
    QueueState& s = queues_[i];
    if (!s.delivered) continue;
    if (!s.polled_awhile) {
      if (s.q->HasAvailable()) {
        work = true;
        s.q->NewTurn();
        device_->OnKick(*s.q);
      }
      continue;
    }
    // Polled awhile: served as a kick would be (by turns where there are
    // any), and given up once its window passes with nothing new.
    const auto now = std::chrono::steady_clock::now();
    if (s.q->HasAvailable()) {
      work = true;
      s.last_work = now;
      Kick(i);
    } else if (now - s.last_work >= s.poll_window) {
      EndPollingAwhile(i, /*serve=*/true);
      window_ended = true;
    }
  }
  if (window_ended) UpdatePolling();
  return work;
}

void Session::PollAwhile(uint16_t queue, std::chrono::microseconds window) {
  if (queue >= queues_.size() || window.count() <= 0 || frozen_) return;
  QueueState& s = queues_[queue];
  if (!s.delivered || Polled(queue)) return;
  if (s.polled_awhile) {
    s.last_work = std::chrono::steady_clock::now();
    s.poll_window = std::max(s.poll_window, window);
    return;
  }
  // A driver that sleeps until its completion is signalled posts its next
  // chain only after that wake-up, and a thread polling for it would take
  // the CPU the wake-up needs (4 sleeping ranks of an all-reduce sharing
  // two CPUs with this thread: 20% slower). One that polls its used ring
  // posts at once.
  if (!s.q->DriverPollsUsed()) return;
  s.last_work = std::chrono::steady_clock::now();
  s.polled_awhile = true;
  s.poll_window = window;
  s.q->set_polling(true);
  UpdatePolling();
}

void Session::EndPollingAwhile(uint16_t i, bool serve) {
  QueueState& s = queues_[i];
  s.polled_awhile = false;
  // No kick comes for chains the driver added while it was asked not to.
  if (s.q->EndPolling() && serve) Kick(i);
}

Error Session::InstallMemory(std::vector<std::shared_ptr<MappedRegion>> regions) {
  if (Error e = MemoryMap::Validate(regions); !e.empty()) return e;
  uint64_t total = 0;
  for (const auto& r : regions) {
    if (r->size > options_.max_total_bytes - total) {
      return fmt::format("guest memory exceeds the limit of {} bytes", options_.max_total_bytes);
    }
    total += r->size;
  }
  {
    std::lock_guard<std::mutex> lock(memory_mu_);
    memory_ = std::make_shared<const MemoryMap>(std::move(regions));
  }
  for (uint16_t i = 0; i < queues_.size(); ++i) {
    Error e;
    if (!queues_[i].q->Remap(memory_, &e)) {
      spdlog::error("vdev[{}]: {}", name_, e);
      Reconcile(i);
    }
  }
  device_->OnMemory(memory_);
  return {};
}

Error Session::SetMemTable(Message& msg) {
  uint32_t n = msg.Get<uint32_t>();
  std::vector<std::shared_ptr<MappedRegion>> regions;
  for (uint32_t k = 0; k < n; ++k) {
    vu::MemRegion desc;
    std::memcpy(&desc, msg.payload + 8 + k * sizeof(desc), sizeof(desc));
    Error e;
    auto r = MapGuestRegion(desc, msg.fds[k].release(), options_.max_region_bytes, &e,
                            options_.require_sealed_memory);
    if (r == nullptr) return fmt::format("region {}: {}", k, e);
    spdlog::debug("vdev[{}]: region {} gpa={:#x} size={:#x} uva={:#x} offset={:#x}", name_, k,
                  desc.guest_phys_addr, desc.memory_size, desc.userspace_addr, desc.mmap_offset);
    regions.push_back(std::move(r));
  }
  return InstallMemory(std::move(regions));
}

Error Session::AddMemReg(Message& msg) {
  auto single = msg.Get<vu::SingleMemRegion>();
  size_t have = memory_ ? memory_->regions().size() : 0;
  if (have >= options_.max_mem_slots) {
    return fmt::format("ADD_MEM_REG beyond {} memory slots", options_.max_mem_slots);
  }
  Error e;
  auto r = MapGuestRegion(single.region, msg.fds[0].release(), options_.max_region_bytes, &e,
                          options_.require_sealed_memory);
  if (r == nullptr) return e;
  std::vector<std::shared_ptr<MappedRegion>> regions;
  if (memory_) regions = memory_->regions();
  regions.push_back(std::move(r));
  return InstallMemory(std::move(regions));
}

Error Session::RemMemReg(const Message& msg) {
  auto single = msg.Get<vu::SingleMemRegion>();
  const vu::MemRegion& d = single.region;
  if (!memory_) return "REM_MEM_REG without guest memory";
  std::vector<std::shared_ptr<MappedRegion>> regions = memory_->regions();
  // QEMU sends mmap_offset 0 on removal; match the rest.
  auto it = std::find_if(regions.begin(), regions.end(), [&](const auto& r) {
    return r->guest_phys_addr == d.guest_phys_addr && r->size == d.memory_size &&
           r->userspace_addr == d.userspace_addr;
  });
  if (it == regions.end()) {
    return fmt::format("REM_MEM_REG of unknown region gpa={:#x} size={:#x}", d.guest_phys_addr,
                       d.memory_size);
  }
  regions.erase(it);
  return InstallMemory(std::move(regions));
}

void Session::GetConfig(const Message& msg, std::vector<uint8_t>* reply) {
  auto h = msg.Get<vu::ConfigHeader>();
  std::vector<uint8_t> space = device_->ConfigSpace();
  uint64_t end = uint64_t{h.offset} + h.size;
  bool ok = msg.header.size == sizeof(vu::ConfigHeader) + h.size && h.size <= vu::kMaxConfigSize &&
            end <= space.size();
  if (!ok) {
    spdlog::error("vdev[{}]: GET_CONFIG offset={} size={} outside config space of {} bytes", name_,
                  h.offset, h.size, space.size());
    *reply = MakeReply(vu::kGetConfig, nullptr, 0);  // empty payload: the error form
    return;
  }
  std::vector<uint8_t> payload(sizeof(h) + h.size);
  std::memcpy(payload.data(), &h, sizeof(h));
  if (h.size > 0) std::memcpy(payload.data() + sizeof(h), space.data() + h.offset, h.size);
  *reply = MakeReply(vu::kGetConfig, payload.data(), static_cast<uint32_t>(payload.size()));
}

Error Session::SetConfig(const Message& msg) {
  auto h = msg.Get<vu::ConfigHeader>();
  size_t space = device_->ConfigSpace().size();
  if (uint64_t{h.offset} + h.size > space) {
    return fmt::format("SET_CONFIG offset={} size={} outside config space of {} bytes", h.offset,
                       h.size, space);
  }
  std::span<const uint8_t> data(msg.payload + sizeof(h), h.size);
  if (!device_->SetConfig(h.offset, data)) return "device refused SET_CONFIG";
  return {};
}

}  // namespace vdev
