// The scheduler reference of service_allreduce_bench's small sizes: how long
// one process takes to hand its CPU to another by yielding.
//
// Where ranks and the service's polling thread outnumber the CPUs, a small
// operation's time is made of such hand-overs: two ranks sharing a CPU must
// each run once more after the other has posted, so an operation takes at
// least two of them there, whatever the service does. Measured in the same
// run, the hand-over says how much of a latency is this host's scheduler
// (a process switch under page-table isolation costs several system calls'
// worth) rather than the service.
#ifndef HZ_TESTS_BENCH_SERVICE_PROCESS_TURN_H_
#define HZ_TESTS_BENCH_SERVICE_PROCESS_TURN_H_

#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <new>
#include <vector>

#include "ref_sizes.h"
#include "service_harness.h"

namespace hz::bench {

namespace process_turn_detail {

struct Shared {
  std::atomic<int> ready{0};
  std::atomic<bool> failed{false};  // a player could not play: the other stops
  std::atomic<int> turn{0};         // whose turn it is: 0 or 1
  std::atomic<int64_t> start_ns{0};
  std::atomic<int64_t> end_ns[2] = {};
};

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One of the two processes: pinned to cpu, it waits for its turn by
// yielding and then hands the turn over, `rounds` times. Its exit code.
inline int Player(Shared* s, int me, int cpu, int rounds) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    s->failed.store(true);
    return 1;
  }
  s->ready.fetch_add(1);
  while (s->ready.load() < 2) {
    if (s->failed.load()) return 1;
    sched_yield();
  }
  if (me == 0) s->start_ns.store(NowNs());
  for (int i = 0; i < rounds; ++i) {
    while (s->turn.load(std::memory_order_acquire) != me) {
      if (s->failed.load()) return 1;
      sched_yield();
    }
    s->turn.store(1 - me, std::memory_order_release);
  }
  s->end_ns[me].store(NowNs());
  return 0;
}

// Microseconds per hand-over in one pass of 2 * rounds; 0 if it failed.
inline double OnePass(int cpu, int rounds) {
  void* m =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 0;
  auto* s = new (m) Shared;
  // The players only pin themselves, yield and store: safe after fork in a
  // process with threads.
  const std::vector<int> codes =
      hz::testing::RunRanks(2, [&](int me) { return Player(s, me, cpu, rounds); });
  const bool ok = std::all_of(codes.begin(), codes.end(), [](int c) { return c == 0; });
  const int64_t end = std::max(s->end_ns[0].load(), s->end_ns[1].load());
  const double us = ok ? (end - s->start_ns.load()) / 1e3 / (2.0 * rounds) : 0;
  munmap(m, sizeof(Shared));
  return us;
}

}  // namespace process_turn_detail

// The median over `passes` passes of the time one process takes to hand a
// CPU to another that was waiting for it by yielding (both pinned to the
// CPU this thread runs on), in microseconds; 0 if it could not be measured.
inline double ProcessTurnUs(int passes = 5, int rounds = 5000) {
  const int cpu = sched_getcpu();
  if (cpu < 0) return 0;
  std::vector<double> v;
  for (int i = 0; i < passes; ++i) {
    const double us = process_turn_detail::OnePass(cpu, rounds);
    if (us <= 0) return 0;
    v.push_back(us);
  }
  return hz::coll::bench::MedianOf(v);
}

}  // namespace hz::bench

#endif  // HZ_TESTS_BENCH_SERVICE_PROCESS_TURN_H_
