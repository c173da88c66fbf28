#include "quiesce.h"

#include <algorithm>
#include <atomic>
#include <thread>

namespace hz::checkpoint {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic_ref<uint64_t> Seq(uint8_t* word) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(word));
}
std::atomic_ref<uint64_t> Step(uint8_t* word) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(word + 8));
}

}  // namespace

SeqlockCopyResult SeqlockCopy(uint8_t* word, const std::function<void()>& copy,
                              std::chrono::steady_clock::time_point deadline,
                              const SeqlockLimits& limits) {
  // The word is the tenant's: while it stays odd the copy sleeps between
  // looks, doubling the pause up to kMaxPause, instead of holding a core.
  constexpr std::chrono::microseconds kFirstPause{50};
  constexpr std::chrono::microseconds kMaxPause{10000};
  auto cancelled = [&limits] { return limits.cancelled && limits.cancelled(); };
  SeqlockCopyResult r;
  auto pause = kFirstPause;
  while (Clock::now() < deadline && r.attempts < limits.max_attempts && !cancelled()) {
    uint64_t before = Seq(word).load(std::memory_order_acquire);
    if (before & 1) {
      // The tenant is mid-update: back off rather than copy garbage.
      ++r.polls;
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
      pause = std::min(pause * 2, kMaxPause);
      continue;
    }
    pause = kFirstPause;
    uint64_t step = Step(word).load(std::memory_order_acquire);
    ++r.attempts;
    copy();
    if (cancelled()) break;  // the copy may have stopped part-way
    std::atomic_thread_fence(std::memory_order_acquire);
    uint64_t after = Seq(word).load(std::memory_order_acquire);
    if (after == before) {
      r.consistent = true;
      r.step = step;
      return r;
    }
  }
  return r;
}

void SeqlockBeginWrite(uint8_t* word) {
  auto seq = Seq(word);
  seq.store(seq.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  // Orders the odd seq before the state writes that follow.
  std::atomic_thread_fence(std::memory_order_release);
}

void SeqlockEndWrite(uint8_t* word, uint64_t step) {
  Step(word).store(step, std::memory_order_relaxed);
  auto seq = Seq(word);
  seq.store(seq.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

}  // namespace hz::checkpoint
