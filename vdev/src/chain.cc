#include <algorithm>
#include <cstring>
#include <utility>

#include "vdev/device.h"

namespace vdev {

namespace {

size_t SumLengths(const std::vector<Segment>& segments) {
  size_t total = 0;
  for (const Segment& s : segments) total += s.len;
  return total;
}

// Copies between a flat buffer and a segment list starting at a byte offset
// into the list. to_segments selects the direction.
size_t CopySegments(const std::vector<Segment>& segments, size_t offset, uint8_t* flat, size_t len,
                    bool to_segments) {
  size_t copied = 0;
  for (const Segment& s : segments) {
    if (copied == len) break;
    if (offset >= s.len) {
      offset -= s.len;
      continue;
    }
    size_t n = std::min(s.len - offset, len - copied);
    if (to_segments) {
      std::memcpy(s.data + offset, flat + copied, n);
    } else {
      std::memcpy(flat + copied, s.data + offset, n);
    }
    copied += n;
    offset = 0;
  }
  return copied;
}

}  // namespace

Chain::Chain(uint16_t head, std::vector<Segment> readable, std::vector<Segment> writable,
             MemoryMapPtr memory)
    : head_(head),
      readable_(std::move(readable)),
      writable_(std::move(writable)),
      readable_bytes_(SumLengths(readable_)),
      writable_bytes_(SumLengths(writable_)),
      memory_(std::move(memory)) {}

size_t Chain::Read(size_t offset, void* dst, size_t len) const {
  return CopySegments(readable_, offset, static_cast<uint8_t*>(dst), len, false);
}

size_t Chain::Write(size_t offset, const void* src, size_t len) const {
  return CopySegments(writable_, offset, static_cast<uint8_t*>(const_cast<void*>(src)), len, true);
}

}  // namespace vdev
