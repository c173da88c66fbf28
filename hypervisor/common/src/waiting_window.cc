#include "hz/common/waiting_window.h"

#include <algorithm>

namespace hz {

WaitingWindow::WaitingWindow(uint64_t window_ns, uint32_t slots, uint64_t start_ns)
    : slot_ns_(std::max<uint64_t>(1, window_ns / std::max(1u, slots))),
      ring_(std::max(1u, slots), 0),
      cur_(start_ns / slot_ns_),
      mark_(start_ns) {}

void WaitingWindow::SetWaiting(bool waiting, uint64_t now_ns) {
  Advance(now_ns);
  waiting_ = waiting;
}

void WaitingWindow::AddWaiting(uint64_t ns, uint64_t now_ns) {
  Advance(now_ns);
  acc_ += ns;
}

WaitingTime WaitingWindow::Measure(uint64_t now_ns) {
  Advance(now_ns);
  WaitingTime t;
  for (uint64_t w : ring_) t.waiting_ns += w;
  t.waiting_ns += acc_;
  t.window_ns = ring_.size() * slot_ns_ + (mark_ - cur_ * slot_ns_);
  t.waiting_ns = std::min(t.waiting_ns, t.window_ns);  // added waits may overlap
  return t;
}

void WaitingWindow::Advance(uint64_t to) {
  if (to <= mark_) return;  // a clock that stood still (or went back) adds nothing
  const uint64_t n = ring_.size();
  const uint64_t to_slot = to / slot_ns_;
  if (to_slot > cur_ + n) {
    // Every slot of the window lies after mark_: all waiting, or none.
    std::fill(ring_.begin(), ring_.end(), waiting_ ? slot_ns_ : 0);
    cur_ = to_slot;
    acc_ = waiting_ ? to - to_slot * slot_ns_ : 0;
    mark_ = to;
    return;
  }
  while (mark_ < to) {
    const uint64_t slot_end = (cur_ + 1) * slot_ns_;
    const uint64_t end = std::min(to, slot_end);
    if (waiting_) acc_ += end - mark_;
    mark_ = end;
    if (end == slot_end) {
      ring_[cur_ % n] = acc_;
      acc_ = 0;
      ++cur_;
    }
  }
}

}  // namespace hz
