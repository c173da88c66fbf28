// Copies with non-temporal stores. For outputs much larger than the caches,
// skipping the read-for-ownership of every destination line saves about a
// third of the memory traffic of a store; for small outputs it would evict
// data the reader wants, so the planner enables it only for large operations.
#ifndef HZ_COLLECTIVES_STREAM_COPY_H_
#define HZ_COLLECTIVES_STREAM_COPY_H_

#include <cstddef>
#include <cstdint>

namespace hz::coll::internal {

// dst and src must not overlap (equal pointers are a no-op). From 16 bytes
// every destination byte is written by a non-temporal store, at any
// alignment of dst.
void StreamCopy(uint8_t* dst, const uint8_t* src, size_t n);
// Orders earlier non-temporal stores before later stores (completion).
void StreamFence();

}  // namespace hz::coll::internal

#endif  // HZ_COLLECTIVES_STREAM_COPY_H_
