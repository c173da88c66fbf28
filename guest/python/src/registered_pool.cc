// SPDX-License-Identifier: Apache-2.0
#include "registered_pool.h"

#include <algorithm>
#include <bit>
#include <iterator>

#include "harmonaize/hz.h"

namespace hz::py {

RegisteredPool::~RegisteredPool() {
  std::lock_guard<std::mutex> lock(mu_);
  TrimLocked();
  // Live blocks belong to tensors or buffers that outlived the pool's owner;
  // they hold a reference to it, so there are none unless a caller leaked.
}

size_t RegisteredPool::SizeClass(size_t bytes) {
  if (bytes <= kMinBlock) return kMinBlock;
  const size_t top = std::bit_floor(bytes - 1);  // highest power of two below bytes
  const size_t step = std::max(kMinBlock, top / 4);
  return (bytes + step - 1) / step * step;
}

void* RegisteredPool::Allocate(size_t bytes) {
  const size_t size = SizeClass(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = free_.find(size); it != free_.end()) {
    const uintptr_t addr = it->second;
    free_.erase(it);
    blocks_[addr].live = true;
    stats_.cached_bytes -= size;
    stats_.live_bytes += size;
    ++stats_.hits;
    return reinterpret_cast<void*>(addr);
  }
  void* p = nullptr;
  int rc = source_->Alloc(size, &p);
  if (rc != HZ_OK && TrimLocked() > 0) rc = source_->Alloc(size, &p);
  if (rc != HZ_OK) {
    ++stats_.refusals;
    return nullptr;
  }
  blocks_[reinterpret_cast<uintptr_t>(p)] = {size, true};
  ++stats_.blocks;
  ++stats_.misses;
  stats_.live_bytes += size;
  return p;
}

bool RegisteredPool::Release(void* ptr) {
  if (ptr == nullptr) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == blocks_.end() || !it->second.live) return false;
  const size_t size = it->second.size;
  stats_.live_bytes -= size;
  if (stats_.cached_bytes + size > max_cached_) {
    source_->Free(ptr);
    blocks_.erase(it);
    --stats_.blocks;
    return true;
  }
  it->second.live = false;
  free_.emplace(size, it->first);
  stats_.cached_bytes += size;
  return true;
}

bool RegisteredPool::Contains(const void* p, size_t len) const {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.upper_bound(addr);
  if (it == blocks_.begin()) return false;
  --it;
  const uintptr_t off = addr - it->first;
  return off <= it->second.size && len <= it->second.size - off;
}

size_t RegisteredPool::Trim() {
  std::lock_guard<std::mutex> lock(mu_);
  return TrimLocked();
}

size_t RegisteredPool::TrimLocked() {
  size_t freed = 0;
  for (const auto& [size, addr] : free_) {
    source_->Free(reinterpret_cast<void*>(addr));
    blocks_.erase(addr);
    freed += size;
  }
  stats_.blocks -= free_.size();
  stats_.cached_bytes -= freed;
  free_.clear();
  return freed;
}

PoolStats RegisteredPool::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void RegisteredPool::set_max_cached(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  max_cached_ = bytes;
  // Drop the largest cached blocks until the cache fits again.
  while (stats_.cached_bytes > max_cached_ && !free_.empty()) {
    auto it = std::prev(free_.end());
    source_->Free(reinterpret_cast<void*>(it->second));
    blocks_.erase(it->second);
    stats_.cached_bytes -= it->first;
    --stats_.blocks;
    free_.erase(it);
  }
}

}  // namespace hz::py
