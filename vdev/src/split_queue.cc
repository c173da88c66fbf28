#include "vdev/split_queue.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>

#include "ring_layout.h"
#include "spdlog/fmt/fmt.h"
#include "spdlog/spdlog.h"

extern "C" int vdev_vring_need_event(unsigned short event_idx, unsigned short new_idx,
                                     unsigned short old_idx);

namespace vdev {

namespace {

// Ring layout (virtio 1.x, 2.7): descriptor i at desc + 16*i; avail flags,
// idx, ring[size], used_event; used flags, idx, ring[size] of {id, len},
// avail_event. ring_layout.c checks these against <linux/virtio_ring.h>.
constexpr size_t kDescSize = VDEV_VRING_DESC_SIZE;
constexpr size_t kRingHeader = VDEV_VRING_AVAIL_RING;  // flags + idx
static_assert(VDEV_VRING_USED_RING == kRingHeader);
constexpr size_t kUsedElemSize = VDEV_VRING_USED_ELEM_SIZE;

static_assert(std::endian::native == std::endian::little,
              "the ring is little-endian and is read with native loads");

// Guest memory is shared with a concurrently running driver: every access is
// a single atomic load or store, so a value is read exactly once.
template <typename T>
T Load(const uint8_t* p, int order = __ATOMIC_RELAXED) {
  return __atomic_load_n(static_cast<const T*>(static_cast<const void*>(p)), order);
}
template <typename T>
void Store(uint8_t* p, T v, int order = __ATOMIC_RELAXED) {
  __atomic_store_n(static_cast<T*>(static_cast<void*>(p)), v, order);
}

bool Aligned(uint64_t v, uint64_t a) {
  return (v & (a - 1)) == 0;
}
bool Aligned(const uint8_t* p, uint64_t a) {
  return Aligned(reinterpret_cast<uintptr_t>(p), a);
}

uint64_t NextRingId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

SplitQueue::SplitQueue(uint16_t index, QueueLimits limits) : index_(index), limits_(limits) {}

bool SplitQueue::ValidSize(uint32_t size) {
  return size >= 1 && size <= kMaxSize && (size & (size - 1)) == 0;
}

void SplitQueue::set_addresses(uint64_t desc_uva, uint64_t avail_uva, uint64_t used_uva) {
  desc_uva_ = desc_uva;
  avail_uva_ = avail_uva;
  used_uva_ = used_uva;
  has_addresses_ = true;
}

void SplitQueue::set_features(bool event_idx, bool indirect) {
  event_idx_ = event_idx;
  indirect_ = indirect;
}

void SplitQueue::set_polling(bool on) {
  polling_ = on;
  avail_event_valid_ = false;
  if (started_ && !event_idx_) {
    Store<uint16_t>(used_, on ? VDEV_VRING_USED_F_NO_NOTIFY : 0);
  }
}

bool SplitQueue::Translate(const MemoryMap& memory, std::string* error) {
  // size_ <= 32768, so none of these products overflow.
  uint64_t desc_len = kDescSize * size_;
  uint64_t avail_len = kRingHeader + 2ull * size_ + 2;
  uint64_t used_len = kRingHeader + kUsedElemSize * size_ + 2;
  if (!Aligned(desc_uva_, 16) || !Aligned(avail_uva_, 2) || !Aligned(used_uva_, 4)) {
    *error = fmt::format("queue {}: misaligned ring addresses desc={:#x} avail={:#x} used={:#x}",
                         index_, desc_uva_, avail_uva_, used_uva_);
    return false;
  }
  uint8_t* desc = memory.UvaToHost(desc_uva_, desc_len);
  uint8_t* avail = memory.UvaToHost(avail_uva_, avail_len);
  uint8_t* used = memory.UvaToHost(used_uva_, used_len);
  if (desc == nullptr || avail == nullptr || used == nullptr) {
    *error =
        fmt::format("queue {}: ring outside guest memory desc={:#x} avail={:#x} used={:#x} size={}",
                    index_, desc_uva_, avail_uva_, used_uva_, size_);
    return false;
  }
  // The three parts must not overlap (the spec lays them out disjoint); an
  // avail ring inside the used ring would let our own used-index stores make
  // new chains "available" forever.
  auto overlap = [](const uint8_t* a, uint64_t alen, const uint8_t* b, uint64_t blen) {
    return a < b + blen && b < a + alen;
  };
  if (overlap(desc, desc_len, avail, avail_len) || overlap(desc, desc_len, used, used_len) ||
      overlap(avail, avail_len, used, used_len)) {
    *error = fmt::format("queue {}: ring parts overlap", index_);
    return false;
  }
  // A region whose mmap_offset is not aligned makes aligned guest addresses
  // misaligned host addresses; atomic ring accesses need natural alignment.
  if (!Aligned(desc, 16) || !Aligned(avail, 2) || !Aligned(used, 4)) {
    *error = fmt::format("queue {}: ring maps to misaligned host memory", index_);
    return false;
  }
  desc_ = desc;
  avail_ = avail;
  used_ = used;
  return true;
}

bool SplitQueue::Start(MemoryMapPtr memory, std::string* error) {
  if (!ValidSize(size_)) {
    *error = fmt::format("queue {}: invalid size {}", index_, size_);
    return false;
  }
  if (!has_addresses_) {
    *error = fmt::format("queue {}: no ring addresses", index_);
    return false;
  }
  if (memory == nullptr || memory->regions().empty()) {
    *error = fmt::format("queue {}: no guest memory", index_);
    return false;
  }
  if (!Translate(*memory, error)) return false;
  memory_ = std::move(memory);
  hot_ = {};
  inflight_.assign(size_, 0);
  in_flight_ = 0;
  ring_id_ = NextRingId();
  started_ = true;
  broken_ = false;
  draining_ = false;
  UpdatePopping();
  avail_cache_ = last_avail_;
  used_idx_ = Load<uint16_t>(used_ + 2, __ATOMIC_ACQUIRE);
  used_published_ = used_idx_;
  signalled_valid_ = false;
  avail_event_valid_ = false;
  NewTurn();
  Store<uint16_t>(used_, (polling_ && !event_idx_) ? VDEV_VRING_USED_F_NO_NOTIFY : 0);
  return true;
}

bool SplitQueue::Remap(MemoryMapPtr memory, std::string* error) {
  if (!started_) return true;
  if (memory == nullptr || !Translate(*memory, error)) {
    if (memory == nullptr) *error = fmt::format("queue {}: guest memory removed", index_);
    // The old mapping stays held (memory_) so the stale pointers stay valid,
    // but the ring does nothing more until restarted.
    MarkBroken(*error);
    hot_ = {};
    return false;
  }
  memory_ = std::move(memory);
  // The cached region may be gone from the new map.
  hot_ = {};
  return true;
}

void SplitQueue::Stop() {
  started_ = false;
  ring_id_ = 0;
  memory_.reset();
  hot_ = {};
  desc_ = avail_ = used_ = nullptr;
  inflight_.clear();
  in_flight_ = 0;
  draining_ = false;
  UpdatePopping();
}

void SplitQueue::MarkBroken(const std::string& why) {
  if (!broken_) {
    spdlog::error("vdev: queue {} broken: {}", index_, why);
    if (err_fd_ >= 0) Signal(err_fd_);
  }
  broken_ = true;
  UpdatePopping();
}

void SplitQueue::Signal(int fd) {
  uint64_t one = 1;
  // EAGAIN means the counter is saturated: the peer is signalled anyway.
  [[maybe_unused]] ssize_t r = write(fd, &one, sizeof(one));
}

bool SplitQueue::RefreshAvail() {
  uint16_t idx = Load<uint16_t>(avail_ + 2, __ATOMIC_ACQUIRE);
  if (static_cast<uint16_t>(idx - last_avail_) > size_) {
    MarkBroken(fmt::format("avail idx {} is more than {} ahead of {}", idx, size_, last_avail_));
    return false;
  }
  avail_cache_ = idx;
  return true;
}

bool SplitQueue::EnableNotifyAndRecheck() {
  // Without EVENT_IDX, used->flags stays 0 outside busy-poll, so the driver
  // kicks on every add and nothing needs re-arming.
  if (polling_ || !event_idx_) return false;
  if (avail_event_valid_ && avail_event_written_ == last_avail_) return false;
  Store<uint16_t>(used_ + kRingHeader + kUsedElemSize * size_, last_avail_);
  avail_event_written_ = last_avail_;
  avail_event_valid_ = true;
  // The driver may have added a chain after our last read but before it saw
  // the new avail_event; it would not kick for it. Re-check after a fence.
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (!RefreshAvail()) return false;
  return last_avail_ != avail_cache_;
}

bool SplitQueue::HasAvailable() {
  if (!popping_) return false;
  if (last_avail_ != avail_cache_) return true;
  if (!RefreshAvail()) return false;
  return last_avail_ != avail_cache_;
}

[[gnu::always_inline]] inline void SplitQueue::PushUsed(uint16_t head, uint32_t len) {
  uint8_t* e = used_ + kRingHeader + kUsedElemSize * (used_idx_ & (size_ - 1));
  // An entry that already holds these values (the same head completed in
  // the same slot as a ring's worth of entries ago, with the same length) is
  // not rewritten: the store would take the cache line from the driver, which
  // then misses on it. The loads only decide that; nothing else uses them.
  if (Load<uint32_t>(e) != head) Store<uint32_t>(e, head);
  if (Load<uint32_t>(e + 4) != len) Store<uint32_t>(e + 4, len);
  ++used_idx_;
  ++stats_.completed;
}

SplitQueue::WalkResult SplitQueue::Malformed(uint16_t head, const std::string& why) {
  ++stats_.malformed;
  // A guest can produce these at will: log the first few loudly only.
  if (stats_.malformed <= 8) {
    spdlog::warn("vdev: queue {} head {}: {} (chain skipped)", index_, head, why);
  } else {
    spdlog::debug("vdev: queue {} head {}: {} (chain skipped)", index_, head, why);
  }
  return WalkResult::kMalformed;
}

// Error reports of the hot path, out of line so that building their messages
// does not weigh on Pop's stack frame and registers.
SplitQueue::WalkResult SplitQueue::MalformedWhy(uint16_t head, const char* why) {
  return Malformed(head, why);
}

SplitQueue::WalkResult SplitQueue::MalformedBuffer(uint16_t head, const char* what, uint64_t addr,
                                                   uint32_t len) {
  return Malformed(head, fmt::format("buffer {:#x}+{} {}", addr, len, what));
}

SplitQueue::WalkResult SplitQueue::MalformedNext(uint16_t head, uint16_t next) {
  return Malformed(head, fmt::format("next index {} out of range", next));
}

void SplitQueue::BrokenHead(const char* what, uint16_t head) {
  MarkBroken(fmt::format("avail entry {} names head {} {}", last_avail_, head, what));
}

bool SplitQueue::TranslateSlow(uint64_t addr, uint32_t len, Chain* out) {
  slow_segments_.clear();
  if (!memory_->TranslateGpa(addr, len, &slow_segments_)) return false;
  for (const Segment& s : slow_segments_) out->Append(s);
  // Remember the region the buffer starts in: the next buffers most likely
  // lie in it too. (A buffer crossing into another region keeps missing the
  // cache and takes this path every time, which stays correct.)
  memory_->FindRange(addr, &hot_);
  return true;
}

SplitQueue::WalkResult SplitQueue::IndirectTable(uint16_t head, bool nested, uint64_t addr,
                                                 uint32_t len, uint16_t flags,
                                                 const uint8_t** table, uint32_t* entries) {
  if (!indirect_) {
    return Malformed(head, "indirect descriptor without VIRTIO_RING_F_INDIRECT_DESC");
  }
  if (nested) return Malformed(head, "nested indirect descriptor");
  if (flags & VDEV_VRING_DESC_F_NEXT) return Malformed(head, "indirect descriptor with NEXT");
  if (len == 0 || len % kDescSize != 0) {
    return Malformed(head, fmt::format("indirect table length {} invalid", len));
  }
  uint32_t n = len / kDescSize;
  if (n > limits_.max_indirect) {
    return Malformed(head, fmt::format("indirect table of {} entries over limit", n));
  }
  if (!Aligned(addr, 16)) {
    return Malformed(head, fmt::format("misaligned indirect table {:#x}", addr));
  }
  const uint8_t* host = memory_->GpaToHost(addr, len);
  if (host == nullptr || !Aligned(host, 16)) {
    return Malformed(head, fmt::format("indirect table {:#x}+{} outside guest memory", addr, len));
  }
  *table = host;
  *entries = n;
  return WalkResult::kOk;
}

// The hot path of every chain: kept inline in Pop, with the error paths out of
// line (Malformed, IndirectTable, TranslateSlow).
[[gnu::always_inline]] inline SplitQueue::WalkResult SplitQueue::Walk(uint16_t head, Chain* out) {
  const uint8_t* table = desc_;
  uint32_t table_size = size_;
  uint32_t budget = size_;  // descriptors left in this table before it must be a loop
  uint32_t i = head;
  bool in_indirect = false;
  // Readable descriptors come first; `writing` flips once, at the first
  // writable one, where the readable segment count and total are recorded.
  bool writing = false;
  uint64_t total = 0;
  uint64_t readable_total = 0;
  for (;;) {
    if (budget == 0) [[unlikely]] {
      return MalformedWhy(head, "descriptor chain loops or exceeds its table");
    }
    --budget;
    // Two loads fetch the whole descriptor once: addr, then len | flags |
    // next (little-endian, like the ring itself).
    const uint8_t* d = table + kDescSize * i;
    static_assert(VDEV_VRING_DESC_LEN == 8 && VDEV_VRING_DESC_FLAGS == 12 &&
                  VDEV_VRING_DESC_NEXT == 14);
    const uint64_t addr = Load<uint64_t>(d + VDEV_VRING_DESC_ADDR);
    const uint64_t rest = Load<uint64_t>(d + VDEV_VRING_DESC_LEN);
    const auto len = static_cast<uint32_t>(rest);
    const auto flags = static_cast<uint16_t>(rest >> 32);
    const auto next = static_cast<uint16_t>(rest >> 48);

    if (flags & VDEV_VRING_DESC_F_INDIRECT) [[unlikely]] {
      if (IndirectTable(head, in_indirect, addr, len, flags, &table, &table_size) !=
          WalkResult::kOk) {
        return WalkResult::kMalformed;
      }
      budget = table_size;
      i = 0;
      in_indirect = true;
      continue;
    }

    const bool writable = flags & VDEV_VRING_DESC_F_WRITE;
    if (writable != writing) [[unlikely]] {
      if (!writable) return MalformedWhy(head, "readable descriptor after a writable one");
      writing = true;
      readable_total = total;
      total = 0;
      out->num_readable_ = out->num_segments_;
    }
    if (len > limits_.max_chain_bytes - total) [[unlikely]] {
      return MalformedBuffer(head, "over the chain limit", addr, len);
    }
    if (len != 0) {
      // Most buffers lie in the region the previous one hit: translate inline.
      if (uint8_t* host = hot_.Translate(addr, len); host != nullptr) [[likely]] {
        out->Append({host, len});
      } else {
        if (!TranslateSlow(addr, len, out)) {
          return MalformedBuffer(head, "outside guest memory", addr, len);
        }
      }
      total += len;
    }
    if (!(flags & VDEV_VRING_DESC_F_NEXT)) break;
    if (next >= table_size) [[unlikely]] {
      return MalformedNext(head, next);
    }
    i = next;
  }
  if (writing) {
    out->readable_bytes_ = readable_total;
    out->writable_bytes_ = total;
  } else {
    out->num_readable_ = out->num_segments_;
    out->readable_bytes_ = total;
    out->writable_bytes_ = 0;
  }
  return WalkResult::kOk;
}

bool SplitQueue::Pop(Chain* out) {
  if (!popping_) return false;
  for (;;) {
    if (last_avail_ == avail_cache_) {
      if (!RefreshAvail()) return false;
      if (last_avail_ == avail_cache_ && !EnableNotifyAndRecheck()) return false;
      if (broken_) return false;
    }
    if (budget_ == 0) [[unlikely]] {
      if (!yielded_) {
        yielded_ = true;
        if (on_yield_) on_yield_(index_);
      }
      return false;
    }
    --budget_;
    uint16_t slot = last_avail_ & (size_ - 1);
    uint16_t head = Load<uint16_t>(avail_ + kRingHeader + 2 * slot);
    if (head >= size_) [[unlikely]] {
      BrokenHead("outside the ring", head);
      return false;
    }
    if (inflight_[head]) [[unlikely]] {
      BrokenHead("already in flight", head);
      return false;
    }
    ++last_avail_;
    out->ClearSegments();
    if (Walk(head, out) != WalkResult::kOk) [[unlikely]] {
      out->ClearSegments();
      out->readable_bytes_ = 0;
      out->writable_bytes_ = 0;
      PushUsed(head, 0);
      Flush();
      continue;
    }
    inflight_[head] = 1;
    ++in_flight_;
    out->head_ = head;
    out->ring_id_ = ring_id_;
    if (out->memory_ != memory_) [[unlikely]]
      out->memory_ = memory_;
    ++stats_.popped;
    return true;
  }
}

void SplitQueue::Complete(const Chain& chain, uint32_t written) {
  if (!started_ || chain.ring_id_ != ring_id_) return;  // the ring it came from is gone
  uint16_t head = chain.head_;
  if (head >= size_ || !inflight_[head]) {
    spdlog::error("vdev: queue {}: completion of head {} that is not in flight (ignored)", index_,
                  head);
    return;
  }
  inflight_[head] = 0;
  --in_flight_;
  // The device cannot claim more than the driver offered.
  written = static_cast<uint32_t>(std::min<uint64_t>(written, chain.writable_bytes_));
  PushUsed(head, written);
}

void SplitQueue::Flush() {
  if (!started_ || used_idx_ == used_published_) return;
  Store<uint16_t>(used_ + 2, used_idx_, __ATOMIC_RELEASE);
  used_published_ = used_idx_;
  if (call_fd_ < 0) return;  // the driver polls
  // Order the used idx store before reading the driver's suppression state.
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  bool notify;
  if (event_idx_) {
    uint16_t used_event = Load<uint16_t>(avail_ + kRingHeader + 2 * size_);
    uint16_t old = signalled_used_;
    bool valid = signalled_valid_;
    signalled_used_ = used_idx_;
    signalled_valid_ = true;
    notify = !valid || vdev_vring_need_event(used_event, used_idx_, old);
  } else {
    notify = !(Load<uint16_t>(avail_) & VDEV_VRING_AVAIL_F_NO_INTERRUPT);
  }
  if (notify) {
    ++stats_.notifications;
    Signal(call_fd_);
  } else {
    ++stats_.suppressed;
  }
}

}  // namespace vdev
