#include "vdev/split_queue.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>

#include "notify_fd.h"
#include "ring_layout.h"
#include "spdlog/fmt/fmt.h"
#include "spdlog/spdlog.h"

extern "C" int vdev_vring_need_event(unsigned short event_idx, unsigned short new_idx,
                                     unsigned short old_idx);

namespace vdev {

// Hot path (busy-poll runs it tens of millions of times a second): PopBatch
// and CompleteBatch serve a run of chains per call, so the per-call checks
// (started, avail index, turn budget) and the bookkeeping (counters, indices)
// are paid once per run; Pop and Complete share their checks and the walk
// but skip the run set-up, for devices that take one chain at a time.
// Each descriptor is fetched with two 8-byte loads (addr; len | flags |
// next). PopBatch takes the commonest chain, one readable then one writable
// direct buffer, in its own loop with a few compares. Any other walk is
// inline while the chain is plain: direct descriptors whose buffers lie
// wholly in the region the previous buffer hit (a copy of that region,
// dropped whenever the map changes: Start, Remap, Stop), one segment each,
// readable then writable, no more than the chain's inline array holds (and
// never more than the ring size, which bounds the loop). The first
// descriptor that is anything else (indirect, elsewhere, crossing the
// region's end, zero-length, one segment too many) hands the walk, with the
// descriptor already read, to an out-of-line walk that handles everything
// with the same checks, so no descriptor is read twice. The per-direction
// byte limit is checked once per chain (totals cannot overflow: see Walk).
// Error reporting is out of line. A used entry that already holds the
// values to publish (the same head completed in the same slot a ring ago)
// is not rewritten, which keeps the driver's copy of the cache line valid.

namespace {

// Ring layout (virtio 1.x, 2.7): descriptor i at desc + 16*i; avail flags,
// idx, ring[size], used_event; used flags, idx, ring[size] of {id, len},
// avail_event. ring_layout.c checks these against <linux/virtio_ring.h>.
constexpr size_t kDescSize = VDEV_VRING_DESC_SIZE;
constexpr size_t kRingHeader = VDEV_VRING_AVAIL_RING;  // flags + idx
static_assert(VDEV_VRING_USED_RING == kRingHeader);
constexpr size_t kUsedElemSize = VDEV_VRING_USED_ELEM_SIZE;
// The flags that decide how a walk treats a descriptor.
constexpr uint16_t kShapeFlags =
    VDEV_VRING_DESC_F_NEXT | VDEV_VRING_DESC_F_WRITE | VDEV_VRING_DESC_F_INDIRECT;

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

// Where the non-empty buffer [addr, addr+len) starts in r, when it lies
// wholly inside r. Overflow-safe: an addr below r.gpa wraps *off past
// r.size, and a zero len wraps len - 1. (The walks leave such buffers to
// WalkSlow, which appends nothing for an empty one.)
[[gnu::always_inline]] inline bool HoldsWhole(const MemoryMap::HostRange& r, uint64_t addr,
                                              uint32_t len, uint64_t* off) {
  *off = addr - r.gpa;
  return *off < r.size && uint64_t{len} - 1 < r.size - *off;
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

uint8_t* SplitQueue::AvailEvent() const {
  return used_ + kRingHeader + kUsedElemSize * size_;
}

uint16_t SplitQueue::UsedEvent() const {
  return Load<uint16_t>(avail_ + kRingHeader + 2 * size_);
}

void SplitQueue::set_polling(bool on) {
  polling_ = on;
  avail_event_valid_ = false;
  if (!started_) return;
  if (!event_idx_) {
    Store<uint16_t>(used_, on ? VDEV_VRING_USED_F_NO_NOTIFY : 0);
  } else if (on) {
    ArmAvailEvent();
  }
}

bool SplitQueue::EndPolling() {
  set_polling(false);
  if (!started_) return false;
  // With EVENT_IDX this arms avail_event; without, the flag cleared above
  // is what the driver reads. Either way the driver may have published
  // after our last look and before it saw the change: look again.
  if (event_idx_) return EnableNotifyAndRecheck() || HasAvailable();
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  return HasAvailable();
}

bool SplitQueue::DriverPollsUsed() const {
  if (!started_) return false;
  if (!event_idx_) return Load<uint16_t>(avail_) & VDEV_VRING_AVAIL_F_NO_INTERRUPT;
  // A driver that sleeps re-arms used_event at the used index it has seen
  // as it goes to sleep, so between its sleeps used_event lies at or behind
  // ours; vdev's front-end turns interrupts off by putting it half the index
  // range ahead. (Linux writes 0 instead, read here as sleeping while the
  // used index is in the lower half of its range: such a driver merely
  // keeps kicking.)
  const uint16_t ahead = static_cast<uint16_t>(UsedEvent() - used_idx_);
  return ahead != 0 && ahead <= 0x8000;
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
  if (!StartRing(std::move(memory), error)) return false;
  ArmAvailEvent();
  if (journal_ != nullptr) {
    journal_->size = 0;  // nothing to recover while the marks are reset
    std::memset(journal_->marks, 0, size_);
    journal_->used_idx = used_idx_;
    journal_->skipped = static_cast<uint16_t>(last_avail_ - used_idx_);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    journal_->size = size_;
  }
  return true;
}

bool SplitQueue::Recover(MemoryMapPtr memory, std::string* error) {
  if (journal_ == nullptr || journal_->size != size_) {
    *error = fmt::format("queue {}: no journal of a ring of size {}", index_, size_);
    return false;
  }
  if (!StartRing(std::move(memory), error)) return false;
  // Completions published after the journal's used index: their marks go.
  const auto published = static_cast<uint16_t>(used_idx_ - journal_->used_idx);
  if (published > size_) {
    StopRing();  // the journal stays for another try
    *error = fmt::format("queue {}: used idx {} is more than {} past the journal's {}", index_,
                         used_idx_, size_, journal_->used_idx);
    return false;
  }
  JournalPublished(journal_->used_idx);
  uint16_t marked = 0;
  for (uint16_t head = 0; head < size_; ++head) {
    if (!journal_->marks[head]) continue;
    inflight_[head] = 1;
    returned_.push_back(head);
    ++marked;
  }
  in_flight_ = marked;
  last_avail_ = static_cast<uint16_t>(used_idx_ + marked + journal_->skipped);
  avail_cache_ = last_avail_;
  const uint16_t avail_idx = Load<uint16_t>(avail_ + 2, __ATOMIC_ACQUIRE);
  if (static_cast<uint16_t>(avail_idx - last_avail_) > size_) {
    StopRing();  // the journal stays for another try
    *error = fmt::format("queue {}: avail idx {} is out of step with the journal (next {})", index_,
                         avail_idx, last_avail_);
    return false;
  }
  ArmAvailEvent();
  return true;
}

bool SplitQueue::StartRing(MemoryMapPtr memory, std::string* error) {
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
  returned_.clear();
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

void SplitQueue::ArmAvailEvent() {
  // Polling, an avail_event the device has passed already: the driver
  // kicks for none of its next chains (left armed, it would for the first).
  // Otherwise, whatever a predecessor left there (one that was polling the
  // ring when it crashed asked for no kick), the driver's next chain kicks.
  if (!event_idx_) return;
  Store<uint16_t>(AvailEvent(), static_cast<uint16_t>(polling_ ? last_avail_ - 1 : last_avail_));
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
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

void SplitQueue::Stop(bool keep_journal) {
  if (journal_ != nullptr && !keep_journal) journal_->size = 0;
  StopRing();
}

void SplitQueue::StopRing() {
  started_ = false;
  ring_id_ = 0;
  memory_.reset();
  hot_ = {};
  desc_ = avail_ = used_ = nullptr;
  inflight_.clear();
  in_flight_ = 0;
  returned_.clear();
  draining_ = false;
  UpdatePopping();
}

void SplitQueue::MarkBroken(const std::string& why) {
  if (!broken_) {
    spdlog::error("vdev: queue {} broken: {}", index_, why);
    if (err_fd_ >= 0 && NotifyEventFd(err_fd_) == NotifyResult::kRefused) {
      spdlog::error("vdev: queue {}: the error eventfd was made blocking; not signalled", index_);
    }
  }
  broken_ = true;
  UpdatePopping();
}

// A call fd the front-end made blocking again is refused for good: the
// queue stops (its completions so far are published), and this thread is
// never at the mercy of the front-end's counter.
void SplitQueue::SignalCall() {
  if (NotifyEventFd(call_fd_) == NotifyResult::kRefused) {
    MarkBroken("the front-end made the call eventfd blocking (or it is unusable)");
  }
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
  Store<uint16_t>(AvailEvent(), last_avail_);
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
  if (!returned_.empty()) [[unlikely]]
    return true;
  if (last_avail_ != avail_cache_) return true;
  if (!RefreshAvail()) return false;
  return last_avail_ != avail_cache_;
}

[[gnu::always_inline]] inline uint8_t* SplitQueue::UsedEntry(uint16_t idx) const {
  return used_ + kRingHeader + kUsedElemSize * (idx & (size_ - 1));
}

// Writes one used entry (at e) unless it already holds these values (the
// same head completed in the same slot a ring's worth of entries ago, with
// the same length): the store would take the cache line from the driver,
// which then misses on it. The loads only decide that; nothing else uses
// them.
[[gnu::always_inline]] inline void SplitQueue::PushUsed(uint8_t* e, uint16_t head, uint32_t len) {
  if (Load<uint32_t>(e) != head) Store<uint32_t>(e, head);
  if (Load<uint32_t>(e + 4) != len) Store<uint32_t>(e + 4, len);
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
  if (len == 0) return true;  // no bytes, no segment
  slow_segments_.clear();
  if (!memory_->TranslateGpa(addr, len, &slow_segments_)) return false;
  for (const Segment& s : slow_segments_) out->Append(s);
  // Remember the region the buffer starts in: the next buffers most likely
  // lie in it too. (A buffer crossing into another region keeps missing the
  // cache and takes this path every time, which stays correct.)
  memory_->FindRange(addr, &hot_);
  return true;
}

SplitQueue::WalkResult SplitQueue::MalformedTotals(uint16_t head, uint64_t readable,
                                                   uint64_t writable) {
  return Malformed(head, fmt::format("{} readable / {} writable bytes over the chain limit {}",
                                     readable, writable, limits_.max_chain_bytes));
}

void SplitQueue::SkipMalformed(uint16_t head, Chain* out) {
  out->ClearSegments();
  out->readable_bytes_ = 0;
  out->writable_bytes_ = 0;
  PushUsed(UsedEntry(used_idx_), head, 0);
  ++used_idx_;
  ++stats_.completed;
  Flush();
}

const uint8_t* SplitQueue::IndirectTable(uint16_t head, bool nested, uint64_t addr, uint32_t len,
                                         uint16_t flags) {
  if (!indirect_) {
    Malformed(head, "indirect descriptor without VIRTIO_RING_F_INDIRECT_DESC");
    return nullptr;
  }
  if (nested) {
    Malformed(head, "nested indirect descriptor");
    return nullptr;
  }
  if (flags & VDEV_VRING_DESC_F_NEXT) {
    Malformed(head, "indirect descriptor with NEXT");
    return nullptr;
  }
  if (len == 0 || len % kDescSize != 0) {
    Malformed(head, fmt::format("indirect table length {} invalid", len));
    return nullptr;
  }
  if (len / kDescSize > limits_.max_indirect) {
    Malformed(head, fmt::format("indirect table of {} entries over limit", len / kDescSize));
    return nullptr;
  }
  if (!Aligned(addr, 16)) {
    Malformed(head, fmt::format("misaligned indirect table {:#x}", addr));
    return nullptr;
  }
  const uint8_t* host = memory_->GpaToHost(addr, len);
  if (host == nullptr || !Aligned(host, 16)) {
    Malformed(head, fmt::format("indirect table {:#x}+{} outside guest memory", addr, len));
    return nullptr;
  }
  return host;
}

// One descriptor as the driver wrote it: addr, then len | flags | next as
// one little-endian word, as in the ring.
struct SplitQueue::Desc {
  uint64_t addr;
  uint64_t rest;
  uint32_t len() const { return static_cast<uint32_t>(rest); }
  uint16_t flags() const { return static_cast<uint16_t>(rest >> 32); }
  uint16_t next() const { return static_cast<uint16_t>(rest >> 48); }
};

// Where a walk stands: the table it reads (the ring's, or one indirect
// table) and how many more descriptors that table may yield before the
// chain must be a loop.
struct SplitQueue::Cursor {
  const uint8_t* table;
  uint32_t table_size;
  uint32_t budget;
  uint32_t i;
  bool in_indirect;
};

// Reads descriptor i of table with two loads.
[[gnu::always_inline]] inline SplitQueue::Desc SplitQueue::LoadDesc(const uint8_t* table,
                                                                    uint32_t i) {
  static_assert(VDEV_VRING_DESC_LEN == 8 && VDEV_VRING_DESC_FLAGS == 12 &&
                VDEV_VRING_DESC_NEXT == 14);
  const uint8_t* p = table + kDescSize * i;
  return {Load<uint64_t>(p + VDEV_VRING_DESC_ADDR), Load<uint64_t>(p + VDEV_VRING_DESC_LEN)};
}

// Switches the walk to the indirect table d describes (checked out of line).
bool SplitQueue::EnterIndirect(uint16_t head, const Desc& d, Cursor* cur) {
  const uint8_t* table = IndirectTable(head, cur->in_indirect, d.addr, d.len(), d.flags());
  if (table == nullptr) return false;
  cur->table = table;
  cur->table_size = d.len() / kDescSize;
  cur->budget = cur->table_size;
  cur->i = 0;
  cur->in_indirect = true;
  return true;
}

// Checks the per-direction totals and fills in the chain's counts.
[[gnu::always_inline]] inline SplitQueue::WalkResult SplitQueue::FinishWalk(
    uint16_t head, Chain* out, uint32_t num_segments, uint32_t num_readable, uint64_t readable,
    uint64_t writable) {
  if (readable > limits_.max_chain_bytes || writable > limits_.max_chain_bytes) [[unlikely]] {
    return MalformedTotals(head, readable, writable);
  }
  out->num_segments_ = num_segments;
  out->num_readable_ = num_readable;
  out->readable_bytes_ = readable;
  out->writable_bytes_ = writable;
  return WalkResult::kOk;
}

// The walk of every chain but PopBatch's pairs (inline in Pop and in
// TakeOther): a direct chain whose buffers lie in the cached region and fit
// the chain's segment array (one segment per descriptor) is taken in two
// tight loops. The first descriptor that is anything else
// (indirect, elsewhere, zero-length, one segment too many) hands the walk,
// with that descriptor as read, over to WalkSlow, which continues from
// there; errors are reported out of line. Nothing is called in the middle of
// the loops: a call there would make every value they keep live across it
// (and the compiler then spills them). The readable and the writable
// descriptors have a loop each: the direction is where the code is, not a
// value to test.
//
// The end of the segment array doubles as the loop bound: it is capped at
// the ring size, and each descriptor taken here adds one segment, so no
// more than size_ descriptors are read before WalkSlow takes over with the
// remaining budget.
//
// Bytes per direction cannot overflow: a walk visits at most kMaxSize ring
// descriptors plus one table of under 2^28 entries (its byte length is 32
// bits), each under 2^32 bytes, far below 2^64. The limit is therefore
// checked once, in FinishWalk.
//
// The walk may start part-way (PopBatch hands over a longer chain): `taken`
// readable segments are already in out, adding up to `readable` bytes, and d
// is descriptor i, already read. taken must be below the loop bound.
[[gnu::always_inline]] inline SplitQueue::WalkResult SplitQueue::Walk(uint16_t head, Chain* out,
                                                                      Desc d, uint32_t i,
                                                                      uint32_t taken,
                                                                      uint64_t readable) {
  Segment* const segs = out->segments_;
  Segment* const segs_end = segs + std::min(out->capacity_, uint32_t{size_});
  Segment* seg = segs + taken;  // next segment to write
  // Readable descriptors, up to the first writable one (left in d).
  for (;;) {
    if (d.flags() & (VDEV_VRING_DESC_F_INDIRECT | VDEV_VRING_DESC_F_WRITE)) [[unlikely]] {
      if (!(d.flags() & VDEV_VRING_DESC_F_INDIRECT)) break;
      return WalkSlow(head, out, static_cast<uint32_t>(seg - segs), i, true, d.addr, d.rest, false);
    }
    uint64_t off;
    if (!HoldsWhole(hot_, d.addr, d.len(), &off)) [[unlikely]] {
      return WalkSlow(head, out, static_cast<uint32_t>(seg - segs), i, true, d.addr, d.rest, false);
    }
    *seg++ = {hot_.host + off, d.len()};
    readable += d.len();
    if (!(d.flags() & VDEV_VRING_DESC_F_NEXT)) {
      const auto n = static_cast<uint32_t>(seg - segs);
      return FinishWalk(head, out, n, n, readable, 0);
    }
    if (d.next() >= size_) [[unlikely]] {
      return MalformedNext(head, d.next());
    }
    i = d.next();
    if (seg == segs_end) [[unlikely]] {
      return WalkSlow(head, out, static_cast<uint32_t>(seg - segs), i, false, 0, 0, false);
    }
    d = LoadDesc(desc_, i);
  }
  const auto num_readable = static_cast<uint32_t>(seg - segs);
  out->num_readable_ = num_readable;  // for WalkSlow
  uint64_t writable = 0;
  // Writable descriptors, starting with the one in d.
  for (;;) {
    if ((d.flags() & (VDEV_VRING_DESC_F_INDIRECT | VDEV_VRING_DESC_F_WRITE)) !=
        VDEV_VRING_DESC_F_WRITE) [[unlikely]] {
      if (!(d.flags() & VDEV_VRING_DESC_F_INDIRECT)) {
        return MalformedWhy(head, "readable descriptor after a writable one");
      }
      return WalkSlow(head, out, static_cast<uint32_t>(seg - segs), i, true, d.addr, d.rest, true);
    }
    uint64_t off;
    if (!HoldsWhole(hot_, d.addr, d.len(), &off)) [[unlikely]] {
      return WalkSlow(head, out, static_cast<uint32_t>(seg - segs), i, true, d.addr, d.rest, true);
    }
    *seg++ = {hot_.host + off, d.len()};
    writable += d.len();
    if (!(d.flags() & VDEV_VRING_DESC_F_NEXT)) break;
    if (d.next() >= size_) [[unlikely]] {
      return MalformedNext(head, d.next());
    }
    i = d.next();
    if (seg == segs_end) [[unlikely]] {
      return WalkSlow(head, out, static_cast<uint32_t>(seg - segs), i, false, 0, 0, true);
    }
    d = LoadDesc(desc_, i);
  }
  return FinishWalk(head, out, static_cast<uint32_t>(seg - segs), num_readable, readable, writable);
}

// Continues a walk Walk handed over: indirect tables, buffers outside the
// cached region (or crossing its end), zero-length buffers, segments past
// the chain's array. One loop, one descriptor at a time, the same checks.
// Walk took `visited` descriptors of the ring (one segment each, in out;
// num_readable_ set once writing) and stopped at descriptor i: already
// fetched (addr, rest) when `fetched`, else still to read.
SplitQueue::WalkResult SplitQueue::WalkSlow(uint16_t head, Chain* out, uint32_t visited, uint32_t i,
                                            bool fetched, uint64_t addr, uint64_t rest,
                                            bool writing) {
  Desc d{addr, rest};
  out->num_segments_ = visited;
  if (!writing) out->num_readable_ = visited;
  // The totals so far: one segment per descriptor, of its length.
  uint64_t readable = 0;
  uint64_t writable = 0;
  for (uint32_t k = 0; k < visited; ++k) {
    (k < out->num_readable_ ? readable : writable) += out->segments_[k].len;
  }
  // The ring's budget less what Walk read (d included, if it read it).
  Cursor cur{desc_, size_, size_ - visited, i, false};
  if (fetched) {
    --cur.budget;  // Walk only fetches while visited < size_
  } else {
    if (cur.budget == 0) return MalformedLoop(head);
    --cur.budget;
    d = LoadDesc(cur.table, cur.i);
  }
  for (;;) {
    if (d.flags() & VDEV_VRING_DESC_F_INDIRECT) {
      // An indirect descriptor's WRITE flag means nothing (virtio 2.7.5.3.2).
      if (!EnterIndirect(head, d, &cur)) return WalkResult::kMalformed;
    } else {
      const uint32_t len = d.len();
      if (d.flags() & VDEV_VRING_DESC_F_WRITE) {
        if (!writing) {
          writing = true;
          out->num_readable_ = out->num_segments_;
        }
        writable += len;
      } else {
        if (writing) return MalformedWhy(head, "readable descriptor after a writable one");
        readable += len;
      }
      if (uint8_t* host = hot_.Translate(d.addr, len); host != nullptr && len != 0) {
        out->Append({host, len});
      } else if (!TranslateSlow(d.addr, len, out)) {
        return MalformedBuffer(head, "outside guest memory", d.addr, len);
      }
      if (!(d.flags() & VDEV_VRING_DESC_F_NEXT)) break;
      if (d.next() >= cur.table_size) return MalformedNext(head, d.next());
      cur.i = d.next();
    }
    if (cur.budget == 0) return MalformedLoop(head);
    --cur.budget;
    d = LoadDesc(cur.table, cur.i);
  }
  if (!writing) out->num_readable_ = out->num_segments_;
  return FinishWalk(head, out, out->num_segments_, out->num_readable_, readable, writable);
}

SplitQueue::WalkResult SplitQueue::MalformedLoop(uint16_t head) {
  return Malformed(head, "descriptor chain loops or exceeds its table");
}

// True when an avail entry may be taken now: one is published (the avail
// index is re-read, and notifications re-armed, when none is known) and the
// turn's budget allows it. Pop and PopBatch start every take with this.
[[gnu::always_inline]] inline bool SplitQueue::CanTake() {
  if (last_avail_ == avail_cache_) {
    if (!RefreshAvail()) return false;
    if (last_avail_ == avail_cache_ && !EnableNotifyAndRecheck()) return false;
    if (broken_) return false;
  }
  if (limits_.max_turn_time.count() != 0 && budget_ != 0 && TurnTimeSpent()) budget_ = 0;
  if (budget_ == 0) [[unlikely]] {
    if (!yielded_) {
      yielded_ = true;
      ++stats_.yields;
      if (on_yield_) on_yield_(index_);
    }
    return false;
  }
  return true;
}

bool SplitQueue::TurnTimeSpent() {
  const auto now = std::chrono::steady_clock::now();
  if (!turn_clock_started_) {
    turn_clock_started_ = true;
    turn_deadline_ = now + limits_.max_turn_time;
    return false;
  }
  return now >= turn_deadline_;
}

// What claiming a chain writes besides the chain, as of now. PopBatch's
// loop keeps a copy in locals.
[[gnu::always_inline]] inline SplitQueue::Claimant SplitQueue::CurrentClaimant() {
  return {inflight_.data(), journal_, ring_id_, memory_.get()};
}

// Stamps the chain walked into *c as this ring's and marks head in flight.
// The marks come last: after a byte store the compiler assumes that any
// member may have changed, and would reload them for what follows.
[[gnu::always_inline]] inline void SplitQueue::Claim(uint16_t head, Chain* c, const Claimant& k) {
  c->head_ = head;
  c->ring_id_ = k.ring_id;
  if (c->memory_.get() != k.memory) [[unlikely]]
    c->memory_ = memory_;
  k.inflight[head] = 1;
  if (k.journal != nullptr) [[unlikely]] {
    k.journal->marks[head] = 1;
    // Marked before anything the device does with the chain.
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
  }
}

// Walks head's chain on from descriptor d (index i, already read), with
// `taken` readable segments of `readable` bytes already in *c (see Walk),
// and takes it, or skips it when it is malformed.
[[gnu::always_inline]] inline SplitQueue::TakeResult SplitQueue::TakeFrom(uint16_t head, Chain* c,
                                                                          Desc d, uint32_t i,
                                                                          uint32_t taken,
                                                                          uint64_t readable) {
  if (Walk(head, c, d, i, taken, readable) != WalkResult::kOk) [[unlikely]] {
    SkipMalformed(head, c);
    return TakeResult::kSkipped;
  }
  Claim(head, c, CurrentClaimant());
  return TakeResult::kTaken;
}

// TakeFrom out of line, for PopBatch's chains of any other shape than a
// plain request/response pair: its loop then stays small.
SplitQueue::TakeResult SplitQueue::TakeOther(uint16_t head, Chain* c, Desc d, uint32_t i,
                                             uint32_t taken, uint64_t readable) {
  return TakeFrom(head, c, d, i, taken, readable);
}

// Takes the chain of avail entry idx into *c. A malformed chain is
// completed with length 0 (kSkipped); a head the ring cannot take is left
// to the caller (kBadHead, *head set), which breaks the ring.
[[gnu::always_inline]] inline SplitQueue::TakeResult SplitQueue::Take(uint16_t idx, Chain* c,
                                                                      uint16_t* head_out) {
  const uint16_t head = Load<uint16_t>(avail_ + kRingHeader + 2 * (idx & (size_ - 1)));
  *head_out = head;
  if (head >= size_ || inflight_[head]) [[unlikely]] {
    return TakeResult::kBadHead;
  }
  return TakeFrom(head, c, LoadDesc(desc_, head), head, 0, 0);
}

void SplitQueue::BadHead(uint16_t head) {
  BrokenHead(head >= size_ ? "outside the ring" : "already in flight", head);
}

// One chain at a time (devices that do not batch): the same checks and walk
// as PopBatch, without its run bookkeeping.
bool SplitQueue::Pop(Chain* out) {
  if (!popping_) return false;
  if (!returned_.empty()) [[unlikely]]
    return PopReturned({out, 1}) == 1;
  while (CanTake()) {
    --budget_;
    uint16_t head;
    switch (Take(last_avail_, out, &head)) {
      case TakeResult::kTaken:
        ++last_avail_;
        ++in_flight_;
        ++stats_.popped;
        return true;
      case TakeResult::kSkipped:
        ++last_avail_;
        break;
      case TakeResult::kBadHead:
        BadHead(head);
        return false;
    }
  }
  return false;
}

// Takes the avail entries [*idx, end) into chains from c on, and returns
// the chain past the last one taken; *idx ends past the last entry taken.
// Stops early at a head the ring cannot take (its value in *bad_head, *idx
// at its entry). The ring holds at least two descriptors (see PopBatch).
//
// The shape most requests have, a readable buffer then a writable one, both
// direct and in the cached region, is served here with a few loads and
// compares (Walk's loops cost about a quarter more); each descriptor is read
// once: a chain that turns out otherwise goes on out of line from the
// descriptor where it differs. What the loop reads for every chain is copied
// into locals first: the chains' stores (the in-flight mark is a byte, which
// may alias anything) would otherwise make the compiler reload the members
// for every chain. Both descriptors are checked before the chain is written,
// and two checks are folded into others (together with the locals, 94
// instructions per request in PopBatch against 105; callgrind over
// vdev_ring_ops_bench):
//   - the index mask bounds the head and the next index alike (for a
//     power-of-two size, i < size is i <= size - 1);
//   - the region the loop accepts buffers from is the cached one cut to
//     max_chain_bytes, so a buffer it accepts is within the limit (one
//     buffer per direction); one beyond the cut is left to the walk, which
//     checks the limit itself. (With the default limit, the largest
//     descriptor length, nothing is cut.)
[[gnu::always_inline]] inline Chain* SplitQueue::TakePairs(Chain* c, uint16_t* idx, uint16_t end,
                                                           uint16_t* bad_head) {
  const uint8_t* const avail_ring = avail_ + kRingHeader;
  const uint8_t* const desc = desc_;
  const uint32_t mask = size_ - 1u;
  const Claimant claimant = CurrentClaimant();
  const uint8_t* const inflight = claimant.inflight;
  const auto pair_region = [this] {
    MemoryMap::HostRange r = hot_;
    r.size = std::min(r.size, limits_.max_chain_bytes);
    return r;
  };
  MemoryMap::HostRange hot = pair_region();
  uint16_t i = *idx;
  for (; i != end; ++i) {
    const uint32_t head = Load<uint16_t>(avail_ring + 2 * (i & mask));
    if (head > mask || inflight[head]) [[unlikely]] {
      *bad_head = static_cast<uint16_t>(head);
      break;
    }
    const Desc d0 = LoadDesc(desc, head);
    uint64_t off0;
    if ((d0.flags() & kShapeFlags) != VDEV_VRING_DESC_F_NEXT ||
        !HoldsWhole(hot, d0.addr, d0.len(), &off0) || d0.next() > mask) [[unlikely]] {
      if (TakeOther(static_cast<uint16_t>(head), c, d0, head, 0, 0) == TakeResult::kTaken) ++c;
      hot = pair_region();  // the walk may have cached another region
      continue;
    }
    const Desc d1 = LoadDesc(desc, d0.next());
    uint64_t off1;
    if ((d1.flags() & kShapeFlags) != VDEV_VRING_DESC_F_WRITE ||
        !HoldsWhole(hot, d1.addr, d1.len(), &off1)) [[unlikely]] {
      c->segments_[0] = {hot.host + off0, d0.len()};  // room for kInlineSegments at least
      if (TakeOther(static_cast<uint16_t>(head), c, d1, d0.next(), 1, d0.len()) ==
          TakeResult::kTaken)
        ++c;
      hot = pair_region();
      continue;
    }
    uint8_t* const request = hot.host + off0;
    uint8_t* const response = hot.host + off1;
    // The device reads the request and writes the response next, and the
    // driver has just written the one and read the other: both lines sit in
    // the driver's CPU. Asking for them now overlaps their transfers with
    // the rest of the batch's walk instead of taking them one chain at a
    // time in the device (busy-poll batches of 32: 10-20% more requests/s).
    __builtin_prefetch(request);
    __builtin_prefetch(response, /*rw=*/1);
    Segment* const segs = c->segments_;
    segs[0] = {request, d0.len()};
    c->readable_bytes_ = d0.len();
    segs[1] = {response, d1.len()};
    c->writable_bytes_ = d1.len();
    c->num_segments_ = 2;
    c->num_readable_ = 1;
    Claim(static_cast<uint16_t>(head), c, claimant);
    ++c;
  }
  *idx = i;
  return c;
}

size_t SplitQueue::PopBatch(std::span<Chain> out) {
  if (!popping_) return 0;
  size_t n = 0;
  if (!returned_.empty()) [[unlikely]]
    n = PopReturned(out);
  while (n < out.size() && CanTake()) {
    // In a ring of one descriptor a chain of two is a loop (Walk finds it):
    // one entry at a time through Pop's path.
    if (size_ < 2) [[unlikely]] {
      n += Pop(&out[n]) ? 1 : 0;
      if (broken_) break;
      continue;
    }
    // A run of avail entries the driver published, the turn allows and out
    // has room for: the checks above hold for all of them, and the
    // bookkeeping below is settled once for the run.
    const auto todo = static_cast<uint16_t>(std::min<size_t>(
        {static_cast<uint16_t>(avail_cache_ - last_avail_), budget_, out.size() - n}));
    const uint16_t start = last_avail_;
    const uint16_t run_end = static_cast<uint16_t>(start + todo);
    Chain* const first = out.data() + n;
    uint16_t idx = start;
    uint16_t bad_head = 0;
    Chain* const c = TakePairs(first, &idx, run_end, &bad_head);
    last_avail_ = idx;
    budget_ -= static_cast<uint16_t>(idx - start);
    in_flight_ += static_cast<uint32_t>(c - first);
    stats_.popped += static_cast<uint64_t>(c - first);
    n = static_cast<size_t>(c - out.data());
    if (idx != run_end) [[unlikely]] {
      BadHead(bad_head);
      break;
    }
  }
  return n;
}

// One chain (devices that do not batch): CompleteBatch's checks without its
// loop set-up.
void SplitQueue::Complete(const Chain& chain, uint32_t written) {
  if (!started_ || chain.ring_id_ != ring_id_) return;  // the ring it came from is gone
  const uint16_t head = chain.head_;
  if (head >= size_ || !inflight_[head]) [[unlikely]] {
    NotInFlight(head);
    return;
  }
  inflight_[head] = 0;
  --in_flight_;
  ++stats_.completed;
  // The device cannot claim more than the driver offered.
  PushUsed(UsedEntry(used_idx_), head,
           static_cast<uint32_t>(std::min<uint64_t>(written, chain.writable_bytes_)));
  ++used_idx_;
}

void SplitQueue::CompleteBatch(std::span<const Chain> chains, std::span<const uint32_t> written) {
  if (!started_) return;  // every chain's ring is gone
  // Copies of the members the loop uses: its stores into the used ring
  // could otherwise make the compiler reload them for every chain.
  const uint64_t ring_id = ring_id_;
  const uint16_t size = size_;
  const uint16_t mask = static_cast<uint16_t>(size - 1);
  uint8_t* const inflight = inflight_.data();
  uint8_t* const used_ring = used_ + kRingHeader;
  const uint16_t used_start = used_idx_;
  uint16_t used_idx = used_start;
  const uint32_t* len = written.data();
  for (const Chain& chain : chains) {
    const uint32_t wrote = *len++;
    if (chain.ring_id_ != ring_id) continue;  // the ring it came from is gone
    const uint16_t head = chain.head_;
    if (head >= size || !inflight[head]) [[unlikely]] {
      NotInFlight(head);
      continue;
    }
    inflight[head] = 0;
    // The device cannot claim more than the driver offered.
    PushUsed(used_ring + kUsedElemSize * (used_idx & mask), head,
             static_cast<uint32_t>(std::min<uint64_t>(wrote, chain.writable_bytes_)));
    ++used_idx;
  }
  const auto done = static_cast<uint16_t>(used_idx - used_start);  // at most the ring size
  used_idx_ = used_idx;
  in_flight_ -= done;
  stats_.completed += done;
}

void SplitQueue::NotInFlight(uint16_t head) {
  spdlog::error("vdev: queue {}: completion of head {} that is not in flight (ignored)", index_,
                head);
}

void SplitQueue::Flush() {
  if (!started_ || used_idx_ == used_published_) return;
  Store<uint16_t>(used_ + 2, used_idx_, __ATOMIC_RELEASE);
  if (journal_ != nullptr) JournalPublished(used_published_);
  used_published_ = used_idx_;
  if (call_fd_ < 0) return;  // the driver polls
  // Order the used idx store before reading the driver's suppression state.
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  bool notify;
  if (event_idx_) {
    uint16_t used_event = UsedEvent();
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
    SignalCall();
  } else {
    ++stats_.suppressed;
  }
}

void SplitQueue::JournalPublished(uint16_t from) {
  // Cleared only after the used index that publishes them was stored.
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  for (uint16_t i = from; i != used_idx_; ++i) {
    const uint32_t head = Load<uint32_t>(UsedEntry(i));
    if (head < size_) journal_->marks[head] = 0;
  }
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  journal_->used_idx = used_idx_;
}

void SplitQueue::Return(const Chain& chain) {
  if (!started_ || chain.ring_id_ != ring_id_) return;  // the ring it came from is gone
  const uint16_t head = chain.head_;
  if (head >= size_ || !inflight_[head]) [[unlikely]] {
    NotInFlight(head);
    return;
  }
  returned_.push_back(head);
}

size_t SplitQueue::PopReturned(std::span<Chain> out) {
  size_t n = 0;
  while (n < out.size() && !returned_.empty()) {
    const uint16_t head = returned_.front();
    returned_.pop_front();
    Chain* c = &out[n];
    // The driver may not touch a chain it made available until it is used,
    // but the walk checks it again all the same.
    if (Walk(head, c, LoadDesc(desc_, head), head, 0, 0) != WalkResult::kOk) {
      inflight_[head] = 0;
      --in_flight_;
      SkipMalformed(head, c);
      continue;
    }
    Claim(head, c, CurrentClaimant());
    ++n;
  }
  return n;
}

bool SplitQueue::AdoptReturned(std::span<const uint16_t> heads) {
  if (!started_) return false;
  for (uint16_t head : heads) {
    if (head >= size_ || inflight_[head]) return false;
    inflight_[head] = 1;
    if (journal_ != nullptr) {
      journal_->marks[head] = 1;  // taken, not completed: marked, not skipped
      --journal_->skipped;
    }
    ++in_flight_;
    returned_.push_back(head);
  }
  return true;
}

}  // namespace vdev
