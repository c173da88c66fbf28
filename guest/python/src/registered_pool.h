// SPDX-License-Identifier: Apache-2.0
// Registered memory for tensors, staging and buffers: blocks from
// hz_mem_alloc, kept by size class after use, so a block is registered with
// the device once however many tensors and collectives reuse it. Registering
// is a control-queue round trip (and on virtio-user can grow the shared
// arena), far too slow to do per collective or per tensor.
#ifndef HZ_GUEST_PYTHON_SRC_REGISTERED_POOL_H_
#define HZ_GUEST_PYTHON_SRC_REGISTERED_POOL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace hz::py {

// Where blocks come from: hz_mem_alloc/hz_mem_free, or a fake in tests.
class MemorySource {
 public:
  virtual ~MemorySource() = default;
  // HZ_OK and a registered block, or an hz_err.
  virtual int Alloc(size_t bytes, void** ptr) = 0;
  virtual void Free(void* ptr) = 0;
};

struct PoolStats {
  uint64_t blocks = 0;        // blocks held (live and cached)
  uint64_t live_bytes = 0;    // handed out and not yet released
  uint64_t cached_bytes = 0;  // released, kept for reuse
  uint64_t hits = 0;          // allocations served from the cache
  uint64_t misses = 0;        // allocations that registered a new block
  uint64_t refusals = 0;      // allocations the device refused (caller falls back)
};

class RegisteredPool {
 public:
  // Smallest block: one page; size classes above it waste at most 1/4.
  static constexpr size_t kMinBlock = 4096;

  RegisteredPool(MemorySource* source, size_t max_cached_bytes)
      : source_(source), max_cached_(max_cached_bytes) {}
  ~RegisteredPool();
  RegisteredPool(const RegisteredPool&) = delete;
  RegisteredPool& operator=(const RegisteredPool&) = delete;

  // A registered block of at least `bytes`, or nullptr when the device
  // refuses (no registered memory or regions left even after dropping the
  // cache): the caller then uses ordinary memory.
  void* Allocate(size_t bytes);
  // Returns a block from Allocate; it stays registered for reuse unless the
  // cache is full. False when ptr is not a live block of this pool.
  bool Release(void* ptr);
  // True when [p, p+len) lies inside one block (live or cached).
  bool Contains(const void* p, size_t len) const;
  // Frees every cached block; returns the bytes given back.
  size_t Trim();
  PoolStats Stats() const;
  void set_max_cached(size_t bytes);

  // The block size that serves `bytes`: a page multiple with at most four
  // classes per power of two, so similar sizes share blocks.
  static size_t SizeClass(size_t bytes);

 private:
  struct Block {
    size_t size = 0;
    bool live = false;
  };

  size_t TrimLocked();

  MemorySource* source_;
  size_t max_cached_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Block> blocks_;      // every block by address
  std::multimap<size_t, uintptr_t> free_;  // cached blocks by size
  PoolStats stats_;
};

}  // namespace hz::py

#endif  // HZ_GUEST_PYTHON_SRC_REGISTERED_POOL_H_
