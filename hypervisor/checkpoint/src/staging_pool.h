// A fixed set of equally sized, 4096-aligned chunks allocated and touched once
// at start-up, so a snapshot never allocates or page-faults and the engine's
// memory never grows with the load. Not synchronized: the engine's mutex
// guards Acquire/Release.
#ifndef HZ_CHECKPOINT_STAGING_POOL_H_
#define HZ_CHECKPOINT_STAGING_POOL_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hz::checkpoint {

class StagingPool {
 public:
  // populate: the memory is faulted in now (else as it is used, or by
  // Populate); a reservation of the same size is taken either way.
  StagingPool(size_t chunk_bytes, size_t num_chunks, bool populate = true);
  // Faults in chunk_bytes * num_chunks bytes now, for the next pool of
  // exactly that size to take instead of faulting in its own (a live
  // upgrade's successor does this before its predecessor freezes the
  // tenants). One reservation at a time; a later one replaces it. Returns
  // where the memory is (null when it could not be mapped).
  static const void* Reserve(size_t chunk_bytes, size_t num_chunks);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  bool ok() const { return base_ != nullptr; }
  size_t chunk_bytes() const { return chunk_bytes_; }
  size_t total() const { return num_chunks_; }
  size_t free_count() const { return free_.size(); }
  uint8_t* chunk(uint32_t index) const { return base_ + size_t{index} * chunk_bytes_; }

  // Takes n chunks if that many are free; all or nothing.
  bool TryAcquire(size_t n, std::vector<uint32_t>* out);
  void Release(const std::vector<uint32_t>& chunks);

  // One iovec per chunk, in index order (for io_uring_register_buffers).
  std::vector<iovec> Iovecs() const;
  // Faults in the memory a pool made without populate; any thread, while
  // chunks are in use.
  void Populate();

 private:
  size_t chunk_bytes_;
  size_t num_chunks_;
  uint8_t* base_ = nullptr;
  size_t map_bytes_ = 0;
  std::vector<uint32_t> free_;
};

}  // namespace hz::checkpoint

#endif  // HZ_CHECKPOINT_STAGING_POOL_H_
