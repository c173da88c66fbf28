// How long, over a recent window, collective work waited for a worker while
// every worker was busy: the engine's measure of the host memory congestion
// that SPEC.md §8.3.5 reports (CONGESTION/HOST_MEMORY).
//
// Why this measure: the workers are what moves the tenants' collective bytes
// through host memory, so a worker pool that cannot keep up is where memory
// bandwidth runs short for them. Time spent waiting while all workers are
// busy counts only real contention: a single tenant that keeps one worker
// busy, or a task that waits the few microseconds an idle worker takes to
// wake, is not congestion, while work that queues behind other work is,
// whatever the number of workers.
//
// Not thread-safe; times are nanoseconds of one monotonic clock that the
// caller supplies (tests inject it), never decreasing.
#ifndef HZ_COLLECTIVES_WAITING_WINDOW_H_
#define HZ_COLLECTIVES_WAITING_WINDOW_H_

#include <cstdint>
#include <vector>

namespace hz::coll {

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

  // The waiting time of the window that ends at now_ns.
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

}  // namespace hz::coll

#endif  // HZ_COLLECTIVES_WAITING_WINDOW_H_
