// A CKPT_SAVE, CKPT_RESTORE, CKPT_POLICY or CKPT_DELETE in flight: resolved on the executor, run on
// a checkpoint-engine thread, answered on the executor again.
#ifndef HZ_SERVICE_CKPT_OP_H_
#define HZ_SERVICE_CKPT_OP_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "hz/service/ckpt_backend.h"
#include "hz/service/pending_table.h"
#include "hz/service/region_table.h"

namespace hz::service {

// Checkpoint slices resolved to host spans.
struct CkptSpans {
  std::vector<checkpoint::IoSpan> spans;               // one per slice, for the engine
  std::vector<std::vector<checkpoint::IoSpan>> guest;  // each slice's guest extents
  std::vector<std::vector<uint8_t>> bounce;            // for slices over several extents
  std::vector<RegionPin> pins;
};

struct CkptOp : PendingRequest {
  enum class Phase { kQueued, kRunning, kDone };

  bool Cancelled() const {
    return cancel.load(std::memory_order_relaxed) ||
           (draining != nullptr && draining->load(std::memory_order_relaxed));
  }
  // An engine status as the guest sees it: a cancelled request was aborted
  // by its session's end, or by the service's shutdown.
  uint32_t Wire(const Status& st) const;

  std::chrono::steady_clock::time_point start;
  // What the engine thread works on. The pins keep the regions (and the
  // guest memory map) alive until the answer.
  CkptBackend* backend = nullptr;
  TenantId tid;
  uint32_t stream = 0;
  uint64_t step = 0;
  uint32_t num_slices = 0;
  std::vector<uint8_t> meta;
  checkpoint::Policy policy;  // CKPT_POLICY's
  bool policy_op = false;
  CkptSpans spans;
  const std::atomic<bool>* draining = nullptr;  // the service's; outlives the engine
  // Set on the executor when the session ends; the engine polls it.
  std::atomic<bool> cancel{false};
  std::mutex mu;
  std::condition_variable cv;
  Phase phase = Phase::kQueued;  // under mu
  // The outcome, written by the engine thread before kDone.
  uint32_t status = HZ_S_OK;
  uint32_t detail = 0;
  std::vector<uint8_t> result;
  // The request's work, on the engine thread; touches only this object.
  std::function<void(CkptOp&)> work;
};

// The work of CKPT_SAVE, CKPT_RESTORE, CKPT_POLICY and CKPT_DELETE (on an
// engine thread).
void SaveWork(CkptOp& op);
void RestoreWork(CkptOp& op);
void PolicyWork(CkptOp& op);
void DeleteWork(CkptOp& op);

}  // namespace hz::service

#endif  // HZ_SERVICE_CKPT_OP_H_
