#include "copy_pool.h"

#include <cstring>

namespace hz::checkpoint {

namespace {
// Pieces are at most this long so the bytes split evenly across threads.
constexpr size_t kPieceBytes = 1u << 20;
}  // namespace

CopyPool::CopyPool(unsigned threads) {
  unsigned helpers = threads > 1 ? threads - 1 : 0;
  for (unsigned i = 0; i < helpers; ++i) threads_.emplace_back([this, i] { Worker(i + 1); });
}

CopyPool::~CopyPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void CopyPool::CopyRange(unsigned part) {
  for (size_t i = part_begin_[part]; i < part_begin_[part + 1]; ++i) {
    const CopyOp& op = parts_ops_[i];
    std::memcpy(op.dst, op.src, op.len);
  }
}

void CopyPool::Run(const std::vector<CopyOp>& ops) {
  std::lock_guard<std::mutex> run_lock(run_mu_);
  unsigned parts = static_cast<unsigned>(threads_.size()) + 1;
  size_t total = 0;
  for (const CopyOp& op : ops) total += op.len;
  if (parts == 1 || total < 2 * kPieceBytes) {
    for (const CopyOp& op : ops) {
      if (op.len != 0) std::memcpy(op.dst, op.src, op.len);
    }
    return;
  }
  // Cut into pieces, then give each part a contiguous run of about total/parts bytes.
  parts_ops_.clear();
  for (const CopyOp& op : ops) {
    for (size_t off = 0; off < op.len; off += kPieceBytes) {
      size_t n = std::min(kPieceBytes, op.len - off);
      parts_ops_.push_back({op.dst + off, op.src + off, n});
    }
  }
  part_begin_.assign(parts + 1, parts_ops_.size());
  part_begin_[0] = 0;
  size_t acc = 0;
  unsigned p = 1;
  for (size_t i = 0; i < parts_ops_.size() && p < parts; ++i) {
    acc += parts_ops_[i].len;
    while (p < parts && acc >= total * p / parts) part_begin_[p++] = i + 1;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    pending_ = parts - 1;
    ++generation_;
  }
  cv_.notify_all();
  CopyRange(0);
  std::unique_lock<std::mutex> l(mu_);
  done_cv_.wait(l, [this] { return pending_ == 0; });
}

void CopyPool::Worker(unsigned index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    CopyRange(index);
    {
      std::lock_guard<std::mutex> l(mu_);
      --pending_;
    }
    done_cv_.notify_one();
  }
}

}  // namespace hz::checkpoint
