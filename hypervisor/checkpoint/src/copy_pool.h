// Parallel memcpy for snapshots: a few long-lived threads and the caller take
// 1 MiB pieces of the copy list from a shared counter until none is left.
// The caller never waits for a helper that the scheduler has not run yet: it
// copies what is left itself and waits at most for pieces already started.
#ifndef HZ_CHECKPOINT_COPY_POOL_H_
#define HZ_CHECKPOINT_COPY_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "hz/common/thread_priority.h"

namespace hz::checkpoint {

struct CopyOp {
  uint8_t* dst;
  const uint8_t* src;
  size_t len;
};

class CopyPool {
 public:
  // threads: total copiers including the caller (1: no helper threads).
  // nice: the helpers' nice value (thread_priority.h).
  explicit CopyPool(unsigned threads, BulkPriority priority = {});
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  // Runs all copies; returns when every byte is copied (true), or, once
  // cancelled (polled between 1 MiB pieces, from every copier) returns true,
  // when no copier touches the buffers any more (false). Concurrent callers
  // take turns.
  bool Run(const std::vector<CopyOp>& ops, const std::function<bool()>& cancelled = {});

 private:
  void Worker();
  void Drain();  // copies pieces until none is left

  std::mutex run_mu_;  // one Run at a time
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  std::vector<std::thread> threads_;
  std::vector<CopyOp> pieces_;                        // the current run, cut into pieces
  std::atomic<size_t> next_{0};                       // next piece to take
  std::atomic<size_t> done_{0};                       // pieces copied (or skipped after a cancel)
  const std::function<bool()>* cancelled_ = nullptr;  // the current run's
  uint64_t generation_ = 0;
  unsigned active_helpers_ = 0;  // helpers inside Drain for this run
  bool stop_ = false;
};

}  // namespace hz::checkpoint

#endif  // HZ_CHECKPOINT_COPY_POOL_H_
