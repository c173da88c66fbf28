// A buffer made of many unaligned extents, addressed by logical byte offset.
#ifndef HZ_COLLECTIVES_SPAN_LIST_H_
#define HZ_COLLECTIVES_SPAN_LIST_H_

#include <cstdint>
#include <vector>

#include "hz/collectives/types.h"

namespace hz::coll::internal {

// Immutable after construction, so blocks on different workers may use one
// SpanList at once. Callers check bounds (offset + len <= size()) first.
class SpanList {
 public:
  SpanList() = default;
  // Drops zero-length extents. The caller has validated the extents (no null
  // data with a non-zero length, no overflow of the total).
  explicit SpanList(const IoVec& v);

  uint64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  size_t extents() const { return spans_.size(); }
  // Copies between the list and contiguous memory, piece by piece.
  void Read(uint64_t off, void* dst, uint64_t len) const;
  void Write(uint64_t off, const void* src, uint64_t len) const;

  // Host address of the first byte, for NUMA placement; nullptr if empty.
  const void* first_byte() const { return spans_.empty() ? nullptr : spans_[0].data; }

 private:
  friend class SpanCursor;
  // Index of the extent holding byte off (off < size_).
  size_t Find(uint64_t off) const;

  std::vector<IoSpan> spans_;
  std::vector<uint64_t> starts_;  // logical offset of each extent
  uint64_t size_ = 0;
};

// A position in a SpanList that moves forward through it. A reduction walks
// its buffers piece by piece, and a guest's buffer arrives as one extent per
// page it does not have contiguous, thousands for a large one: from a cursor
// each piece's address is an addition, where a lookup per buffer and piece
// cost a sizeable part of the engine's time on such buffers.
class SpanCursor {
 public:
  // At byte off of list (past its end when off >= list.size()); list must
  // outlive the cursor.
  SpanCursor(const SpanList& list, uint64_t off);

  // The byte under the cursor, and the bytes from it to the end of its
  // extent (nullptr and 0 past the end of the list).
  uint8_t* data() const { return data_; }
  uint64_t run() const { return run_; }
  // Moves n bytes on, across as many extents as that takes.
  void Skip(uint64_t n) {
    if (n < run_) {
      data_ += n;
      run_ -= n;
    } else {
      SkipExtents(n);
    }
  }

 private:
  void SkipExtents(uint64_t n);  // n >= run_
  void Enter(size_t i, uint64_t in);

  const SpanList* list_ = nullptr;
  size_t index_ = 0;
  uint8_t* data_ = nullptr;
  uint64_t run_ = 0;
};

// Copies len bytes between the list at a cursor and contiguous memory,
// across as many extents as they span; the cursor is the caller's copy and
// does not move. With stream, WriteAt uses non-temporal stores (src must not
// overlap the list; the caller fences).
void ReadAt(SpanCursor at, void* dst, uint64_t len);
void WriteAt(SpanCursor at, const void* src, uint64_t len, bool stream = false);

// dst[doff, doff + len) = src[soff, soff + len), piece by piece with memmove,
// so identical or overlapping pieces are safe. With stream, pieces that do
// not overlap use non-temporal stores (the caller fences).
void CopySpans(const SpanList& dst, uint64_t doff, const SpanList& src, uint64_t soff, uint64_t len,
               bool stream = false);

}  // namespace hz::coll::internal

#endif  // HZ_COLLECTIVES_SPAN_LIST_H_
