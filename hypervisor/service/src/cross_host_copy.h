// Copies between a rank's buffer (an IoVec of its memory) and a flat host
// buffer, for the operations of communicators across hosts. The caller
// holds the communicator's lock and has checked it is not aborted (the
// rank's memory may be gone otherwise).
#ifndef HZ_SERVICE_CROSS_HOST_COPY_H_
#define HZ_SERVICE_CROSS_HOST_COPY_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "hz/collectives/types.h"

namespace hz::service {

// The bytes [offset, offset + bytes) of a buffer, as a buffer of their own.
inline coll::IoVec Slice(const coll::IoVec& v, size_t offset, size_t bytes) {
  coll::IoVec out;
  for (const coll::IoSpan& span : v) {
    if (bytes == 0) break;
    if (offset >= span.len) {
      offset -= span.len;
      continue;
    }
    const size_t n = std::min(span.len - offset, bytes);
    out.push_back({span.data + offset, n});
    bytes -= n;
    offset = 0;
  }
  return out;
}

// Copies between [offset, offset + bytes) of a buffer and `flat`.
inline void Gather(const coll::IoVec& from, size_t offset, size_t bytes, uint8_t* flat) {
  for (const coll::IoSpan& span : Slice(from, offset, bytes)) {
    std::memcpy(flat, span.data, span.len);
    flat += span.len;
  }
}

inline void Scatter(const uint8_t* flat, size_t bytes, const coll::IoVec& to, size_t offset) {
  for (const coll::IoSpan& span : Slice(to, offset, bytes)) {
    std::memcpy(span.data, flat, span.len);
    flat += span.len;
  }
}

}  // namespace hz::service

#endif  // HZ_SERVICE_CROSS_HOST_COPY_H_
