// The driver side of one split virtqueue (virtio 1.x, 2.6), laid out in guest
// memory: descriptor table, available ring and used ring, with optional
// EVENT_IDX notification suppression and indirect descriptor tables.
//
// Everything the device can write (the used ring, and in a hostile world the
// whole shared area) is treated as untrusted: the free list and each chain's
// bookkeeping live in private memory, and used entries naming a descriptor
// that is not in flight are reported as a protocol error.
//
// Shared cache lines are written only when their contents change: a
// descriptor or avail slot that already holds what AddChain would store is
// left alone, and completed chains return to the free list in completion
// order, so a driver that re-posts the same buffers in the same order (and
// polls each batch of completions whole) gets descriptors that need no
// rewriting. The device then reads them from its own cache.
//
// Thread-safety: none. One thread at a time drives a SplitRing.
#ifndef VDEV_FRONTEND_SPLIT_RING_H_
#define VDEV_FRONTEND_SPLIT_RING_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "vdev/frontend/guest_memory.h"
#include "vdev/frontend/status.h"

// <linux/virtio_ring.h> layouts, included by the implementation only (its
// legacy helpers are not valid C++).
struct vring_desc;
struct vring_avail;
struct vring_used;

namespace vdev::frontend {

// A guest-physical byte range in guest memory.
struct Buffer {
  uint64_t gpa = 0;
  uint32_t len = 0;
};

// One chain for SplitRing::AddChains: device-readable then device-writable
// buffers, and what the completion will carry back.
struct ChainBuffers {
  std::span<const Buffer> readable;
  std::span<const Buffer> writable;
  uint64_t cookie = 0;
};

// A chain the device has finished with.
struct Completion {
  uint16_t head = 0;
  uint32_t len = 0;     // bytes the device reports it wrote
  uint64_t cookie = 0;  // what the caller gave AddChain
};

class SplitRing {
 public:
  struct Options {
    uint16_t size = 256;  // power of two, 1..32768
    bool event_idx = false;
    bool indirect = false;
  };

  // Allocates the ring from `memory` (which must outlive the ring).
  static Status Create(GuestMemory* memory, const Options& options,
                       std::unique_ptr<SplitRing>* out);
  ~SplitRing();
  SplitRing(const SplitRing&) = delete;
  SplitRing& operator=(const SplitRing&) = delete;

  uint16_t size() const { return size_; }
  // Front-end virtual addresses of the three parts (SET_VRING_ADDR).
  uint64_t desc_user_addr() const { return reinterpret_cast<uint64_t>(desc_); }
  uint64_t avail_user_addr() const { return reinterpret_cast<uint64_t>(avail_); }
  uint64_t used_user_addr() const { return reinterpret_cast<uint64_t>(used_); }

  // Queues a chain of device-readable then device-writable buffers. With
  // use_indirect (and indirect negotiated) the chain occupies one ring
  // descriptor and a table allocated in guest memory. Not visible to the
  // device until Publish(). kNoSpace when the ring has too few descriptors.
  // (Inline: the usual chain, direct and fitting, is a few stores; anything
  // else, errors included, goes through AddChainSlow. Always inline: left to
  // itself GCC keeps it out of line in larger callers, and the call - nine
  // arguments, a Status built in memory, saved registers - doubles its cost.)
  [[gnu::always_inline]] Status AddChain(std::span<const Buffer> readable,
                                         std::span<const Buffer> writable, uint64_t cookie,
                                         bool use_indirect, uint16_t* head) {
    const size_t total = readable.size() + writable.size();
    // total - 1 wraps for an empty chain; num_free_ <= size_ covers chains
    // longer than the ring.
    if (total - 1 >= num_free_ || (use_indirect && indirect_)) [[unlikely]] {
      return AddChainSlow(readable, writable, cookie, use_indirect, head);
    }
    // Descriptors are taken in private free-list order and linked in it.
    // Nothing is committed (free list, chain state, avail ring) until every
    // buffer was checked; a zero-length buffer sends the whole chain to the
    // slow path, which reports it.
    const uint16_t first = free_head_;
    uint16_t cur = first;
    uint16_t last = first;
    size_t left = total;  // descriptors still to write, this one included
    for (const Buffer& b : readable) {
      if (b.len == 0) [[unlikely]] {
        return AddChainSlow(readable, writable, cookie, use_indirect, head);
      }
      const uint16_t next = next_free_[cur];
      const bool more = --left != 0;
      PutDesc(cur, b.gpa, b.len, more ? kDescNext : 0, more ? next : 0);
      last = cur;
      cur = next;
    }
    uint64_t writable_bytes = 0;
    for (const Buffer& b : writable) {
      if (b.len == 0) [[unlikely]] {
        return AddChainSlow(readable, writable, cookie, use_indirect, head);
      }
      const uint16_t next = next_free_[cur];
      const bool more = --left != 0;
      PutDesc(cur, b.gpa, b.len, static_cast<uint16_t>(kDescWrite | (more ? kDescNext : 0)),
              more ? next : 0);
      writable_bytes += b.len;
      last = cur;
      cur = next;
    }
    free_head_ = cur;
    ChainState& state = chains_[first];
    state.cookie = cookie;
    state.writable_bytes = writable_bytes;
    state.ndesc = static_cast<uint16_t>(total);
    state.last = last;
    state.in_flight = true;
    state.indirect = nullptr;
    Commit(first, static_cast<uint16_t>(total));
    if (head != nullptr) *head = first;
    return Status::Ok();
  }

  // Queues direct chains in order, exactly as AddChain would one at a time.
  // Request/response chains (one buffer each way) are written with the
  // ring's bookkeeping held in registers across the batch instead of
  // reloaded for every chain (stores into guest memory may alias any member,
  // so AddChain cannot keep them); other shapes go through AddChain. Stops
  // at the first chain AddChain would refuse and returns its status; *added
  // counts the chains queued before it. Not visible to the device until
  // Publish().
  Status AddChains(std::span<const ChainBuffers> chains, size_t* added);

  // Makes every chain added since the last Publish visible to the device.
  // Returns true when the device asked to be notified (EVENT_IDX avail_event
  // or the used ring's NO_NOTIFY flag).
  bool Publish();
  // The same for a device that busy-polls and is never notified: skips the
  // fence and the suppression check that only the answer needs.
  void PublishPolled();

  // Collects up to max completions. Sets *error and stops if the device
  // wrote a used entry that does not name an in-flight chain.
  size_t PollUsed(Completion* out, size_t max, Status* error);
  // Whether a used entry is waiting (cheap; no side effects).
  bool HasUsed() const;

  // Asks the device to notify on the next used entry (interrupt mode).
  // Returns true if used entries are already pending (then poll again
  // before sleeping, or a notification may have been missed).
  bool EnableNotifications();
  // Tells the device not to notify (busy-poll mode).
  void DisableNotifications();

  uint16_t free_descriptors() const { return num_free_; }
  uint16_t in_flight() const { return in_flight_; }
  // Next avail index the driver will publish (what GET_VRING_BASE reports
  // once the device has consumed everything).
  uint16_t avail_idx() const { return shadow_avail_idx_; }

  // Forgets every in-flight chain and zeroes the ring (reconnect to a fresh
  // back-end). Indirect tables of forgotten chains are freed.
  void Reset();

 private:
  struct ChainState {
    uint64_t cookie = 0;
    uint64_t writable_bytes = 0;
    uint16_t ndesc = 0;  // ring descriptors used (1 for indirect)
    uint16_t last = 0;   // last ring descriptor of the chain
    bool in_flight = false;
    void* indirect = nullptr;
  };

  // VRING_DESC_F_NEXT / _WRITE (checked against <linux/virtio_ring.h>).
  static constexpr uint16_t kDescNext = 1;
  static constexpr uint16_t kDescWrite = 2;

  SplitRing(GuestMemory* memory, const Options& options);
  // Every chain AddChain does not take inline: indirect ones and errors.
  Status AddChainSlow(std::span<const Buffer> readable, std::span<const Buffer> writable,
                      uint64_t cookie, bool use_indirect, uint16_t* head);
  Status AddIndirect(std::span<const Buffer> readable, std::span<const Buffer> writable,
                     uint64_t cookie, uint16_t* head);
  static bool HasEmptyBuffer(std::span<const Buffer> readable, std::span<const Buffer> writable);
  static void PutDesc(vring_desc* d, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next) {
    PutDescBytes(reinterpret_cast<uint8_t*>(d), addr, len, flags, next);
  }
  void PutDesc(uint16_t i, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next) {
    PutDescBytes(desc_bytes_ + kDescBytes * i, addr, len, flags, next);
  }
  static void PutDescBytes(uint8_t* d, uint64_t addr, uint32_t len, uint16_t flags, uint16_t next) {
    // addr, then len | flags | next as one word (the ring is little-endian).
    const uint64_t words[2] = {addr, static_cast<uint64_t>(len) |
                                         static_cast<uint64_t>(flags) << 32 |
                                         static_cast<uint64_t>(next) << 48};
    // A descriptor that already holds these bytes (the same buffer posted in
    // the same slot again, the usual case for fixed request/response buffers)
    // is left alone: a store would take the cache line away from the device,
    // which then misses on it when it reads the chain.
    uint64_t old[2];
    std::memcpy(old, d, sizeof(old));
    if (((old[0] ^ words[0]) | (old[1] ^ words[1])) != 0) std::memcpy(d, words, sizeof(words));
  }
  // Takes ndesc descriptors off the free count and puts head on the avail ring.
  void Commit(uint16_t head, uint16_t ndesc) {
    num_free_ = static_cast<uint16_t>(num_free_ - ndesc);
    ++in_flight_;
    // Like descriptors, an avail slot already naming this head is not rewritten.
    uint16_t& slot = avail_ring_[shadow_avail_idx_ & (size_ - 1)];
    if (slot != head) slot = head;
    ++shadow_avail_idx_;
  }
  static constexpr size_t kDescBytes = 16;
  void WriteUsedEvent(uint16_t value);
  uint16_t ReadUsedIdx() const;

  GuestMemory* memory_;
  uint16_t size_;
  bool event_idx_;
  bool indirect_;
  bool notifications_enabled_ = true;

  void* block_ = nullptr;  // the allocation holding all three parts
  size_t block_len_ = 0;
  vring_desc* desc_ = nullptr;
  vring_avail* avail_ = nullptr;
  vring_used* used_ = nullptr;
  uint8_t* desc_bytes_ = nullptr;   // desc_, for the inline AddChain
  uint16_t* avail_ring_ = nullptr;  // avail_->ring

  std::vector<uint16_t> next_free_;  // private free list links
  std::vector<ChainState> chains_;   // indexed by head
  uint16_t free_head_ = 0;
  uint16_t num_free_ = 0;
  uint16_t in_flight_ = 0;
  uint16_t shadow_avail_idx_ = 0;     // next avail slot we write
  uint16_t published_avail_idx_ = 0;  // last value stored to avail->idx
  uint16_t last_used_idx_ = 0;
};

}  // namespace vdev::frontend

#endif  // VDEV_FRONTEND_SPLIT_RING_H_
