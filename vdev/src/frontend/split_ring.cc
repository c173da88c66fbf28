#include "vdev/frontend/split_ring.h"

// Only the ring layouts are used; the legacy vring_init() helper is not C++.
#ifndef VIRTIO_RING_NO_LEGACY
#define VIRTIO_RING_NO_LEGACY
#endif
#include <linux/virtio_ring.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>

namespace vdev::frontend {

static_assert(std::endian::native == std::endian::little,
              "descriptors and used entries are little-endian and written with native stores");

namespace {

constexpr size_t AlignUp(size_t v, size_t a) {
  return (v + a - 1) & ~(a - 1);
}

uint16_t LoadAcquire(const uint16_t* p) {
  return std::atomic_ref<uint16_t>(*const_cast<uint16_t*>(p)).load(std::memory_order_acquire);
}
uint16_t LoadRelaxed(const uint16_t* p) {
  return std::atomic_ref<uint16_t>(*const_cast<uint16_t*>(p)).load(std::memory_order_relaxed);
}
uint32_t LoadRelaxed32(const uint32_t* p) {
  return std::atomic_ref<uint32_t>(*const_cast<uint32_t*>(p)).load(std::memory_order_relaxed);
}
void StoreRelease(uint16_t* p, uint16_t v) {
  std::atomic_ref<uint16_t>(*p).store(v, std::memory_order_release);
}
void StoreRelaxed(uint16_t* p, uint16_t v) {
  std::atomic_ref<uint16_t>(*p).store(v, std::memory_order_relaxed);
}

// virtio 1.x 2.7.10: notify if event_idx lies in (old, new].
bool NeedEvent(uint16_t event_idx, uint16_t new_idx, uint16_t old_idx) {
  return static_cast<uint16_t>(new_idx - event_idx - 1) < static_cast<uint16_t>(new_idx - old_idx);
}

}  // namespace

SplitRing::SplitRing(GuestMemory* memory, const Options& options)
    : memory_(memory),
      size_(options.size),
      event_idx_(options.event_idx),
      indirect_(options.indirect),
      next_free_(options.size),
      chains_(options.size) {}

Status SplitRing::Create(GuestMemory* memory, const Options& options,
                         std::unique_ptr<SplitRing>* out) {
  const uint32_t n = options.size;
  if (n == 0 || n > 32768 || (n & (n - 1)) != 0) {
    return Status::InvalidArgument("queue size must be a power of two up to 32768");
  }
  std::unique_ptr<SplitRing> ring(new SplitRing(memory, options));
  // virtio 1.x 2.7: descriptor table 16-byte aligned, available ring 2, used
  // ring 4; the event fields trail each ring.
  const size_t desc_len = 16 * n;
  const size_t avail_off = desc_len;
  const size_t avail_len = 4 + 2 * n + 2;
  const size_t used_off = AlignUp(avail_off + avail_len, 4);
  const size_t used_len = 4 + 8 * n + 2;
  ring->block_len_ = used_off + used_len;
  uint64_t gpa = 0;
  ring->block_ = memory->Allocate(ring->block_len_, 4096, &gpa);
  if (ring->block_ == nullptr) return Status::NoSpace("no guest memory for the ring");
  auto* base = static_cast<uint8_t*>(ring->block_);
  ring->desc_ = reinterpret_cast<vring_desc*>(base);
  ring->avail_ = reinterpret_cast<vring_avail*>(base + avail_off);
  ring->used_ = reinterpret_cast<vring_used*>(base + used_off);
  ring->desc_bytes_ = base;
  ring->avail_ring_ = ring->avail_->ring;
  static_assert(sizeof(vring_desc) == kDescBytes && VRING_DESC_F_NEXT == kDescNext &&
                VRING_DESC_F_WRITE == kDescWrite);
  ring->Reset();
  *out = std::move(ring);
  return Status::Ok();
}

SplitRing::~SplitRing() {
  for (auto& c : chains_) {
    if (c.in_flight && c.indirect != nullptr) memory_->Free(c.indirect);
  }
  if (block_ != nullptr) memory_->Free(block_);
}

void SplitRing::Reset() {
  for (auto& c : chains_) {
    if (c.in_flight && c.indirect != nullptr) memory_->Free(c.indirect);
    c = ChainState();
  }
  std::memset(block_, 0, block_len_);
  for (uint16_t i = 0; i < size_; ++i) next_free_[i] = static_cast<uint16_t>(i + 1);
  free_head_ = 0;
  num_free_ = size_;
  in_flight_ = 0;
  shadow_avail_idx_ = 0;
  published_avail_idx_ = 0;
  last_used_idx_ = 0;
  if (!notifications_enabled_) DisableNotifications();
}

Status SplitRing::AddChainSlow(std::span<const Buffer> readable, std::span<const Buffer> writable,
                               uint64_t cookie, bool use_indirect, uint16_t* head) {
  const size_t total = readable.size() + writable.size();
  if (total == 0) return Status::InvalidArgument("a chain needs at least one buffer");
  if (total > size_) return Status::InvalidArgument("chain longer than the queue size");
  if (HasEmptyBuffer(readable, writable)) return Status::InvalidArgument("zero-length buffer");
  const bool indirect = use_indirect && indirect_;
  const uint16_t need = indirect ? 1 : static_cast<uint16_t>(total);
  if (need > num_free_) return Status::NoSpace("not enough free descriptors");
  if (indirect) return AddIndirect(readable, writable, cookie, head);
  // A direct chain that fits and has no empty buffer: the inline AddChain
  // writes it (nothing was committed when it sent the chain here).
  return AddChain(readable, writable, cookie, /*use_indirect=*/false, head);
}

Status SplitRing::AddChains(std::span<const ChainBuffers> chains, size_t* added) {
  size_t i = 0;
  while (i < chains.size()) {
    // A run of request/response chains (one non-empty buffer each way), no
    // longer than the free descriptors hold, with the ring's state in
    // locals; it is stored back before anything else looks at it. The run
    // is bounded up front so that the loop keeps no free count of its own.
    const size_t run_end = i + std::min<size_t>(chains.size() - i, num_free_ / 2);
    const size_t run_start = i;
    uint16_t free_head = free_head_;
    uint16_t avail_idx = shadow_avail_idx_;
    const uint16_t mask = static_cast<uint16_t>(size_ - 1);
    const uint16_t* const next_free = next_free_.data();
    ChainState* const states = chains_.data();
    uint8_t* const desc = desc_bytes_;
    uint16_t* const avail_ring = avail_ring_;
    for (; i < run_end; ++i) {
      const ChainBuffers& c = chains[i];
      if (c.readable.size() != 1 || c.writable.size() != 1) break;
      const Buffer& r = c.readable[0];
      const Buffer& w = c.writable[0];
      if (r.len == 0 || w.len == 0) break;
      const uint16_t first = free_head;
      const uint16_t last = next_free[first];
      PutDescBytes(desc + kDescBytes * first, r.gpa, r.len, kDescNext, last);
      PutDescBytes(desc + kDescBytes * last, w.gpa, w.len, kDescWrite, 0);
      free_head = next_free[last];
      // A chain's indirect table is already null: PollUsed clears it when
      // the chain leaves flight.
      ChainState& state = states[first];
      state.cookie = c.cookie;
      state.writable_bytes = w.len;
      state.ndesc = 2;
      state.last = last;
      state.in_flight = true;
      uint16_t& slot = avail_ring[avail_idx & mask];
      if (slot != first) slot = first;
      ++avail_idx;
    }
    const auto taken = static_cast<uint16_t>(i - run_start);
    in_flight_ = static_cast<uint16_t>(in_flight_ + taken);
    num_free_ = static_cast<uint16_t>(num_free_ - 2 * taken);
    free_head_ = free_head;
    shadow_avail_idx_ = avail_idx;
    if (i == chains.size()) break;
    // Any other chain (another shape, an empty buffer, no room) goes
    // through AddChain, which queues it or says why not.
    const ChainBuffers& c = chains[i];
    Status s = AddChain(c.readable, c.writable, c.cookie, /*use_indirect=*/false, nullptr);
    if (!s.ok()) {
      *added = i;
      return s;
    }
    ++i;
  }
  *added = chains.size();
  return Status::Ok();
}

bool SplitRing::HasEmptyBuffer(std::span<const Buffer> readable, std::span<const Buffer> writable) {
  for (const Buffer& b : readable) {
    if (b.len == 0) return true;
  }
  for (const Buffer& b : writable) {
    if (b.len == 0) return true;
  }
  return false;
}

Status SplitRing::AddIndirect(std::span<const Buffer> readable, std::span<const Buffer> writable,
                              uint64_t cookie, uint16_t* head) {
  const size_t nr = readable.size();
  const size_t total = nr + writable.size();
  uint64_t table_gpa = 0;
  void* table = memory_->Allocate(total * sizeof(vring_desc), 16, &table_gpa);
  if (table == nullptr) return Status::NoSpace("no guest memory for an indirect table");
  auto* t = static_cast<vring_desc*>(table);
  uint64_t writable_bytes = 0;
  for (size_t i = 0; i < total; ++i) {
    const bool write = i >= nr;
    const Buffer& b = write ? writable[i - nr] : readable[i];
    const bool more = i + 1 < total;
    const uint16_t flags =
        static_cast<uint16_t>((write ? VRING_DESC_F_WRITE : 0) | (more ? VRING_DESC_F_NEXT : 0));
    PutDesc(&t[i], b.gpa, b.len, flags, more ? static_cast<uint16_t>(i + 1) : 0);
    if (write) writable_bytes += b.len;
  }
  const uint16_t first = free_head_;
  PutDesc(&desc_[first], table_gpa, static_cast<uint32_t>(total * sizeof(vring_desc)),
          VRING_DESC_F_INDIRECT, 0);
  free_head_ = next_free_[first];
  ChainState& state = chains_[first];
  state.cookie = cookie;
  state.writable_bytes = writable_bytes;
  state.ndesc = 1;
  state.last = first;
  state.in_flight = true;
  state.indirect = table;
  Commit(first, 1);
  if (head != nullptr) *head = first;
  return Status::Ok();
}

bool SplitRing::Publish() {
  const uint16_t old_idx = published_avail_idx_;
  const uint16_t new_idx = shadow_avail_idx_;
  if (old_idx == new_idx) return false;
  StoreRelease(&avail_->idx, new_idx);
  published_avail_idx_ = new_idx;
  // The device may be deciding to sleep right now: order our idx store before
  // reading its suppression state (the other half is in the device).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (event_idx_) {
    const auto* avail_event = reinterpret_cast<const uint16_t*>(&used_->ring[size_]);
    return NeedEvent(LoadRelaxed(avail_event), new_idx, old_idx);
  }
  return (LoadRelaxed(&used_->flags) & VRING_USED_F_NO_NOTIFY) == 0;
}

void SplitRing::PublishPolled() {
  if (published_avail_idx_ == shadow_avail_idx_) return;
  StoreRelease(&avail_->idx, shadow_avail_idx_);
  published_avail_idx_ = shadow_avail_idx_;
}

uint16_t SplitRing::ReadUsedIdx() const {
  return LoadAcquire(&used_->idx);
}

bool SplitRing::HasUsed() const {
  return ReadUsedIdx() != last_used_idx_;
}

void SplitRing::WriteUsedEvent(uint16_t value) {
  StoreRelaxed(&avail_->ring[size_], value);
}

size_t SplitRing::PollUsed(Completion* out, size_t max, Status* error) {
  const uint16_t used_idx = ReadUsedIdx();
  const uint16_t pending = static_cast<uint16_t>(used_idx - last_used_idx_);
  if (pending == 0) return 0;
  if (pending > in_flight_) [[unlikely]] {
    *error = Status::ProtocolError("used index advanced past the chains in flight");
    return 0;
  }
  const size_t todo = std::min<size_t>(max, pending);
  // Completed chains go back on the free list in completion order, ahead of
  // what was free before: a driver that re-posts the same buffers in the
  // same order then gets the same descriptors with the same contents, which
  // PutDesc does not need to rewrite.
  uint16_t batch_head = 0;
  uint16_t batch_tail = 0;  // last descriptor of the previous chain freed
  // Working copies in registers: the stores to out[] and next_free_ could
  // alias the members, which would make every iteration reload them.
  uint16_t used = last_used_idx_;
  uint16_t num_free = num_free_;
  const uint16_t size = size_;
  const uint16_t mask = static_cast<uint16_t>(size - 1);
  size_t n = 0;
  for (; n < todo; ++n) {
    // Each field of the entry is fetched once.
    const vring_used_elem& e = used_->ring[used & mask];
    const uint32_t id = LoadRelaxed32(&e.id);
    const uint32_t len = LoadRelaxed32(&e.len);
    if (id >= size || !chains_[id].in_flight) [[unlikely]] {
      *error = Status::ProtocolError("used entry names a descriptor that is not in flight");
      break;
    }
    ChainState& c = chains_[id];
    if (len > c.writable_bytes) [[unlikely]] {
      *error = Status::ProtocolError("used length exceeds the chain's writable bytes");
      break;
    }
    if (c.indirect != nullptr) {
      memory_->Free(c.indirect);
      c.indirect = nullptr;
    }
    c.in_flight = false;
    if (n == 0) {
      batch_head = static_cast<uint16_t>(id);
    } else {
      next_free_[batch_tail] = static_cast<uint16_t>(id);
    }
    batch_tail = c.last;
    num_free = static_cast<uint16_t>(num_free + c.ndesc);
    out[n].head = static_cast<uint16_t>(id);
    out[n].len = len;
    out[n].cookie = c.cookie;
    ++used;
  }
  last_used_idx_ = used;
  num_free_ = num_free;
  if (n > 0) {
    next_free_[batch_tail] = free_head_;
    free_head_ = batch_head;
  }
  in_flight_ = static_cast<uint16_t>(in_flight_ - n);
  if (event_idx_ && n > 0) {
    // Keep the device's notification threshold just past what we consumed
    // (interrupt mode) or half a ring-index space away (busy-poll mode).
    // Only when something was consumed: an empty poll must not dirty a
    // cache line the device reads.
    WriteUsedEvent(notifications_enabled_ ? last_used_idx_
                                          : static_cast<uint16_t>(last_used_idx_ + 0x8000));
  }
  return n;
}

bool SplitRing::EnableNotifications() {
  notifications_enabled_ = true;
  if (event_idx_) {
    WriteUsedEvent(last_used_idx_);
  } else {
    StoreRelaxed(&avail_->flags, 0);
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return HasUsed();
}

void SplitRing::DisableNotifications() {
  notifications_enabled_ = false;
  StoreRelaxed(&avail_->flags, VRING_AVAIL_F_NO_INTERRUPT);
  if (event_idx_) WriteUsedEvent(static_cast<uint16_t>(last_used_idx_ + 0x8000));
}

}  // namespace vdev::frontend
