#include "copy_pool.h"

#include <algorithm>
#include <cstring>

#include "hz/common/thread_priority.h"

namespace hz::checkpoint {

namespace {
// Small enough that the copiers finish together, large enough that taking a
// piece costs nothing next to copying it.
constexpr size_t kPieceBytes = 1u << 20;
}  // namespace

CopyPool::CopyPool(unsigned threads, BulkPriority priority) {
  unsigned helpers = threads > 1 ? threads - 1 : 0;
  for (unsigned i = 0; i < helpers; ++i)
    threads_.push_back(
        ThreadAtNice(priority, "hz-ckpt-copy-" + std::to_string(i), [this] { Worker(); }));
}

CopyPool::~CopyPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void CopyPool::Drain() {
  const size_t n = pieces_.size();
  for (size_t i = next_.fetch_add(1, std::memory_order_relaxed); i < n;
       i = next_.fetch_add(1, std::memory_order_relaxed)) {
    const CopyOp& op = pieces_[i];
    if (!*cancelled_ || !(*cancelled_)()) {
      std::memcpy(op.dst, op.src, op.len);
    }
    done_.fetch_add(1, std::memory_order_release);
  }
}

bool CopyPool::Run(const std::vector<CopyOp>& ops, const std::function<bool()>& cancel) {
  auto cancelled = [&cancel] { return cancel && cancel(); };
  size_t total = 0;
  for (const CopyOp& op : ops) total += op.len;
  if (threads_.empty() || total < 2 * kPieceBytes) {
    // On the caller alone, without waiting for another caller's turn.
    for (const CopyOp& op : ops) {
      for (size_t off = 0; off < op.len; off += kPieceBytes) {
        if (cancelled()) return false;
        std::memcpy(op.dst + off, op.src + off, std::min(kPieceBytes, op.len - off));
      }
    }
    return !cancelled();
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  {
    // Helpers are outside Drain between runs, so the list can be rebuilt.
    std::unique_lock<std::mutex> l(mu_);
    done_cv_.wait(l, [this] { return active_helpers_ == 0; });
    pieces_.clear();
    for (const CopyOp& op : ops) {
      for (size_t off = 0; off < op.len; off += kPieceBytes) {
        pieces_.push_back({op.dst + off, op.src + off, std::min(kPieceBytes, op.len - off)});
      }
    }
    next_.store(0, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    cancelled_ = &cancel;
    ++generation_;
  }
  cv_.notify_all();
  Drain();
  // Only pieces a helper has already started can remain.
  while (done_.load(std::memory_order_acquire) != pieces_.size()) std::this_thread::yield();
  return !cancelled();
}

void CopyPool::Worker() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++active_helpers_;
    }
    Drain();
    {
      std::lock_guard<std::mutex> l(mu_);
      --active_helpers_;
    }
    done_cv_.notify_all();
  }
}

}  // namespace hz::checkpoint
