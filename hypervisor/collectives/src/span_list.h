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

  // The bytes [off, off + len) when they lie in one extent, else nullptr;
  // and the bytes from off to the end of its extent (0 when off is past the
  // end). Both start from *hint: the extent the caller's last lookup found
  // (any value is safe; it is checked). A walk through the list
  // in order, as a block's pieces make, then finds each extent without a
  // search; a guest's buffer arrives as one extent per page it does not have
  // contiguous, thousands for a large one. Both update *hint.
  uint8_t* Contiguous(uint64_t off, uint64_t len, size_t* hint) const;
  uint64_t ExtentBytesFrom(uint64_t off, size_t* hint) const;
  size_t extents() const { return spans_.size(); }
  // Copies between the list and contiguous memory, piece by piece. With
  // stream, Write uses non-temporal stores (src must not overlap the list;
  // the caller fences).
  void Read(uint64_t off, void* dst, uint64_t len) const;
  void Write(uint64_t off, const void* src, uint64_t len, bool stream = false) const;

  // Host address of the first byte, for NUMA placement; nullptr if empty.
  const void* first_byte() const { return spans_.empty() ? nullptr : spans_[0].data; }

 private:
  friend void CopySpans(const SpanList&, uint64_t, const SpanList&, uint64_t, uint64_t, bool);
  // Index of the extent holding byte off (off < size_).
  size_t Find(uint64_t off) const;
  // The same, trying *hint and the extent after it first; updates *hint.
  size_t Find(uint64_t off, size_t* hint) const;

  std::vector<IoSpan> spans_;
  std::vector<uint64_t> starts_;  // logical offset of each extent
  uint64_t size_ = 0;
};

// dst[doff, doff + len) = src[soff, soff + len), piece by piece with memmove,
// so identical or overlapping pieces are safe. With stream, pieces that do
// not overlap use non-temporal stores (the caller fences).
void CopySpans(const SpanList& dst, uint64_t doff, const SpanList& src, uint64_t soff, uint64_t len,
               bool stream = false);

}  // namespace hz::coll::internal

#endif  // HZ_COLLECTIVES_SPAN_LIST_H_
