#include "staging_pool.h"

#include <sys/mman.h>

#include <cstring>

namespace hz::checkpoint {

StagingPool::StagingPool(size_t chunk_bytes, size_t num_chunks)
    : chunk_bytes_(chunk_bytes), num_chunks_(num_chunks) {
  if (chunk_bytes == 0 || num_chunks == 0) return;
  map_bytes_ = chunk_bytes * num_chunks;
  // mmap gives page alignment (O_DIRECT needs 4096); MAP_POPULATE faults the
  // pages in now rather than during the first snapshot.
  void* p = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return;
  base_ = static_cast<uint8_t*>(p);
  free_.reserve(num_chunks);
  // Highest index first so pops hand out low indexes first.
  for (size_t i = num_chunks; i-- > 0;) free_.push_back(static_cast<uint32_t>(i));
}

StagingPool::~StagingPool() {
  if (base_ != nullptr) munmap(base_, map_bytes_);
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
