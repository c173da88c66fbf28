// How long, over a recent window, work waited for a shared resource that was
// fully busy with other work: the measure of congestion SPEC.md §8.3.5
// reports. The collective engine marks the time work is queued while every
// worker is busy (CONGESTION/HOST_MEMORY: the workers move the tenants'
// bytes through host memory); the checkpoint engine the time chunks are
// ready while the disk queue is full (STORAGE); the inter-host legs the time
// they run slower than their links measured (FABRIC).
//
// Why this measure: time spent waiting while the resource is fully busy
// counts only real contention. A single user that keeps one worker busy, or
// work that waits the few microseconds an idle worker takes to wake, is not
// congestion, while work that queues behind other work is.
//
// Not thread-safe; times are nanoseconds of one monotonic clock that the
// caller supplies (tests inject it), never decreasing.
#ifndef HZ_COMMON_WAITING_WINDOW_H_
#define HZ_COMMON_WAITING_WINDOW_H_

#include <cstdint>
#include <vector>

namespace hz {

struct WaitingTime {
  uint64_t waiting_ns = 0;  // of the window, how long work waited
  uint64_t window_ns = 0;   // the window measured
};

class WaitingWindow {
 public:
  // Measures over the last `window_ns` (at least that, at most one slot
  // more), in `slots` slots; time before `start_ns` counts as not waiting.
  WaitingWindow(uint64_t window_ns, uint32_t slots, uint64_t start_ns);

  // Work started (true) or stopped (false) waiting at now_ns.
  void SetWaiting(bool waiting, uint64_t now_ns);
  bool waiting() const { return waiting_; }

  // Work that ended at now_ns waited `ns` in all (a wait known only once it
  // is over); counted in the slot now_ns falls in.
  void AddWaiting(uint64_t ns, uint64_t now_ns);

  // The waiting time of the window that ends at now_ns (never more than
  // the window).
  WaitingTime Measure(uint64_t now_ns);

 private:
  // Credits the time up to `to` and closes the slots that ended before it.
  void Advance(uint64_t to);

  uint64_t slot_ns_;
  std::vector<uint64_t> ring_;  // waiting ns of the last ring_.size() closed slots
  uint64_t cur_;                // index of the open slot (absolute: time / slot_ns_)
  uint64_t mark_;               // time credited up to, inside the open slot
  uint64_t acc_ = 0;            // waiting ns of the open slot
  bool waiting_ = false;
};

}  // namespace hz

#endif  // HZ_COMMON_WAITING_WINDOW_H_
