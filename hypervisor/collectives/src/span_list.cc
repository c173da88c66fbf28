#include "span_list.h"

#include "stream_copy.h"

#include <algorithm>
#include <cstring>

namespace hz::coll::internal {

SpanList::SpanList(const IoVec& v) {
  spans_.reserve(v.size());
  starts_.reserve(v.size());
  for (const IoSpan& s : v) {
    if (s.len == 0) continue;
    spans_.push_back(s);
    starts_.push_back(size_);
    size_ += s.len;
  }
}

size_t SpanList::Find(uint64_t off) const {
  // Last extent starting at or before off.
  auto it = std::upper_bound(starts_.begin(), starts_.end(), off);
  return static_cast<size_t>(it - starts_.begin()) - 1;
}

void SpanList::Read(uint64_t off, void* dst, uint64_t len) const {
  ReadAt(SpanCursor(*this, off), dst, len);
}

void SpanList::Write(uint64_t off, const void* src, uint64_t len) const {
  WriteAt(SpanCursor(*this, off), src, len);
}

SpanCursor::SpanCursor(const SpanList& list, uint64_t off) : list_(&list) {
  if (off >= list.size_) {
    Enter(list.spans_.size(), 0);
    return;
  }
  const size_t i = list.Find(off);
  Enter(i, off - list.starts_[i]);
}

void SpanCursor::Enter(size_t i, uint64_t in) {
  index_ = i;
  if (i >= list_->spans_.size()) {
    data_ = nullptr;
    run_ = 0;
    return;
  }
  data_ = list_->spans_[i].data + in;
  run_ = list_->spans_[i].len - in;
}

void SpanCursor::SkipExtents(uint64_t n) {
  n -= run_;
  size_t i = index_ + 1;
  const std::vector<IoSpan>& spans = list_->spans_;
  while (i < spans.size() && n >= spans[i].len) n -= spans[i++].len;
  Enter(i, n);
}

void ReadAt(SpanCursor at, void* dst, uint64_t len) {
  auto* out = static_cast<uint8_t*>(dst);
  for (uint64_t n = 0; len > 0; len -= n, out += n, at.Skip(n)) {
    n = std::min(len, at.run());
    std::memmove(out, at.data(), n);
  }
}

void WriteAt(SpanCursor at, const void* src, uint64_t len, bool stream) {
  const auto* from = static_cast<const uint8_t*>(src);
  for (uint64_t n = 0; len > 0; len -= n, from += n, at.Skip(n)) {
    n = std::min(len, at.run());
    if (stream) {
      StreamCopy(at.data(), from, n);
    } else {
      std::memmove(at.data(), from, n);
    }
  }
}

void CopySpans(const SpanList& dst, uint64_t doff, const SpanList& src, uint64_t soff, uint64_t len,
               bool stream) {
  SpanCursor to(dst, doff), from(src, soff);
  for (uint64_t n = 0; len > 0; len -= n, to.Skip(n), from.Skip(n)) {
    n = std::min({len, to.run(), from.run()});
    uint8_t* d = to.data();
    const uint8_t* s = from.data();
    if (d == s) continue;  // in place: nothing to copy
    if (stream && (d + n <= s || s + n <= d)) {
      StreamCopy(d, s, n);
    } else {
      std::memmove(d, s, n);
    }
  }
}

}  // namespace hz::coll::internal
