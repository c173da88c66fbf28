// Parallel memcpy for snapshots: a few long-lived threads split a list of
// copies by bytes; the calling thread takes a share too. Large states copy
// faster than one thread can; small ones are copied on the caller alone.
#ifndef HZ_CHECKPOINT_COPY_POOL_H_
#define HZ_CHECKPOINT_COPY_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace hz::checkpoint {

struct CopyOp {
  uint8_t* dst;
  const uint8_t* src;
  size_t len;
};

class CopyPool {
 public:
  // threads: total copiers including the caller (1: no helper threads).
  explicit CopyPool(unsigned threads);
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  // Runs all copies; returns when every byte is copied. One Run at a time
  // (callers serialize: Run takes a lock).
  void Run(const std::vector<CopyOp>& ops);

 private:
  void Worker(unsigned index);
  void CopyRange(unsigned part);

  std::mutex run_mu_;  // one Run at a time
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_cv_;
  std::vector<std::thread> threads_;
  std::vector<CopyOp> parts_ops_;   // pieces of the current run
  std::vector<size_t> part_begin_;  // parts_ops_ index where part p starts
  uint64_t generation_ = 0;
  unsigned pending_ = 0;
  bool stop_ = false;
};

}  // namespace hz::checkpoint

#endif  // HZ_CHECKPOINT_COPY_POOL_H_
