#include <algorithm>
#include <cstring>
#include <utility>

#include "vdev/device.h"

namespace vdev {

namespace {

size_t SumLengths(std::span<const Segment> segments) {
  size_t total = 0;
  for (const Segment& s : segments) total += s.len;
  return total;
}

// Copies between a flat buffer and a segment list starting at a byte offset
// into the list. to_segments selects the direction.
size_t CopySegments(std::span<const Segment> segments, size_t offset, uint8_t* flat, size_t len,
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

Chain::Chain(uint16_t head, const std::vector<Segment>& readable,
             const std::vector<Segment>& writable, MemoryMapPtr memory)
    : head_(head),
      readable_bytes_(SumLengths(readable)),
      writable_bytes_(SumLengths(writable)),
      memory_(std::move(memory)) {
  AssignSegments(readable, writable);
}

Chain::Chain(const Chain& other) {
  CopyFrom(other);
}

Chain& Chain::operator=(const Chain& other) {
  if (this != &other) CopyFrom(other);
  return *this;
}

Chain::Chain(Chain&& other) noexcept {
  *this = std::move(other);
}

Chain& Chain::operator=(Chain&& other) noexcept {
  if (this == &other) return *this;
  head_ = other.head_;
  readable_bytes_ = other.readable_bytes_;
  writable_bytes_ = other.writable_bytes_;
  memory_ = std::move(other.memory_);
  ring_id_ = other.ring_id_;
  if (other.heap_ != nullptr) {
    // Take the heap array; other falls back to its (empty) inline array.
    heap_ = std::move(other.heap_);
    segments_ = heap_.get();
    capacity_ = other.capacity_;
    num_segments_ = other.num_segments_;
    num_readable_ = other.num_readable_;
    other.segments_ = other.inline_;
    other.capacity_ = kInlineSegments;
  } else {
    AssignSegments(other.readable(), other.writable());
  }
  other.ClearSegments();
  other.readable_bytes_ = 0;
  other.writable_bytes_ = 0;
  return *this;
}

void Chain::CopyFrom(const Chain& other) {
  head_ = other.head_;
  readable_bytes_ = other.readable_bytes_;
  writable_bytes_ = other.writable_bytes_;
  memory_ = other.memory_;
  ring_id_ = other.ring_id_;
  AssignSegments(other.readable(), other.writable());
}

void Chain::AssignSegments(std::span<const Segment> r, std::span<const Segment> w) {
  const size_t n = r.size() + w.size();
  if (n > capacity_) {
    heap_ = std::make_unique<Segment[]>(n);
    segments_ = heap_.get();
    capacity_ = static_cast<uint32_t>(n);
  }
  std::copy(r.begin(), r.end(), segments_);
  std::copy(w.begin(), w.end(), segments_ + r.size());
  num_readable_ = static_cast<uint32_t>(r.size());
  num_segments_ = static_cast<uint32_t>(n);
}

void Chain::Grow() {
  // A walk is bounded by the ring size (and each buffer by the regions it
  // crosses), so capacity_ stays far below 2^31 and doubling cannot wrap.
  const uint32_t capacity = capacity_ * 2;
  auto bigger = std::make_unique<Segment[]>(capacity);
  std::copy(segments_, segments_ + num_segments_, bigger.get());
  heap_ = std::move(bigger);
  segments_ = heap_.get();
  capacity_ = capacity;
}

size_t Chain::Read(size_t offset, void* dst, size_t len) const {
  return CopySegments(readable(), offset, static_cast<uint8_t*>(dst), len, false);
}

size_t Chain::Write(size_t offset, const void* src, size_t len) const {
  return CopySegments(writable(), offset, static_cast<uint8_t*>(const_cast<void*>(src)), len, true);
}

}  // namespace vdev
