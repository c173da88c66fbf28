#include "staging_pool.h"

#include <sys/mman.h>

#include <cstring>
#include <mutex>

namespace hz::checkpoint {

namespace {

// mmap gives page alignment (O_DIRECT needs 4096); MAP_POPULATE faults the
// pages in now rather than during the first snapshot. Null on failure.
void* Map(size_t bytes, bool populate) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

struct Reservation {
  std::mutex mu;
  void* base = nullptr;
  size_t bytes = 0;
};

Reservation& Reserved() {
  static Reservation r;
  return r;
}

// The reserved mapping if it has exactly `bytes`, else null.
void* TakeReserved(size_t bytes) {
  Reservation& r = Reserved();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.base == nullptr || r.bytes != bytes) return nullptr;
  void* p = r.base;
  r.base = nullptr;
  r.bytes = 0;
  return p;
}

}  // namespace

const void* StagingPool::Reserve(size_t chunk_bytes, size_t num_chunks) {
  const size_t bytes = chunk_bytes * num_chunks;
  void* p = bytes != 0 ? Map(bytes, /*populate=*/true) : nullptr;
  Reservation& r = Reserved();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.base != nullptr) munmap(r.base, r.bytes);
  r.base = p;
  r.bytes = p != nullptr ? bytes : 0;
  return p;
}

StagingPool::StagingPool(size_t chunk_bytes, size_t num_chunks, bool populate)
    : chunk_bytes_(chunk_bytes), num_chunks_(num_chunks) {
  if (chunk_bytes == 0 || num_chunks == 0) return;
  map_bytes_ = chunk_bytes * num_chunks;
  void* p = TakeReserved(map_bytes_);
  if (p == nullptr) p = Map(map_bytes_, populate);
  if (p == nullptr) return;
  base_ = static_cast<uint8_t*>(p);
  free_.reserve(num_chunks);
  // Highest index first so pops hand out low indexes first.
  for (size_t i = num_chunks; i-- > 0;) free_.push_back(static_cast<uint32_t>(i));
}

StagingPool::~StagingPool() {
  if (base_ != nullptr) munmap(base_, map_bytes_);
}

void StagingPool::Populate() {
  // Faults in what is not yet, as a write would, without changing a byte:
  // chunks in use meanwhile are left as they are (Linux 5.14 and later;
  // elsewhere the pages fault in as they are used). A chunk at a time: each
  // call holds the process's memory map, and other threads' mmap calls (a
  // VM's memory, a thread's stack) wait for it.
  for (size_t i = 0; base_ != nullptr && i < num_chunks_; ++i) {
    madvise(chunk(static_cast<uint32_t>(i)), chunk_bytes_, MADV_POPULATE_WRITE);
  }
}

bool StagingPool::TryAcquire(size_t n, std::vector<uint32_t>* out) {
  if (n > free_.size()) return false;
  out->clear();
  out->reserve(n);
  for (size_t i = 0; i < n; ++i) {
    out->push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void StagingPool::Release(const std::vector<uint32_t>& chunks) {
  for (uint32_t c : chunks) free_.push_back(c);
}

std::vector<iovec> StagingPool::Iovecs() const {
  std::vector<iovec> v(num_chunks_);
  for (size_t i = 0; i < num_chunks_; ++i) {
    v[i].iov_base = chunk(static_cast<uint32_t>(i));
    v[i].iov_len = chunk_bytes_;
  }
  return v;
}

}  // namespace hz::checkpoint
