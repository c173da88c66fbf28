// One matched operation ready to execute: all ranks' buffers, split into
// blocks that workers run independently. Blocks never overlap in the bytes
// they write, so they may run in any order on any thread, and each output
// element is reduced in rank order, so results do not depend on either.
#ifndef HZ_COLLECTIVES_JOB_H_
#define HZ_COLLECTIVES_JOB_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "hz/collectives/engine.h"
#include "kernels.h"
#include "scheduler.h"
#include "span_list.h"

namespace hz::coll::internal {

class Comm;

struct RankIo {
  SpanList send;
  SpanList recv;
};

struct Job {
  Op op = Op::kAllReduce;
  uint64_t count = 0;
  uint8_t dtype = 0;
  uint8_t redop = 0;
  uint32_t root = 0;
  uint32_t nranks = 0;
  size_t esize = 0;
  const ReduceKernel* kernel = nullptr;  // reductions only
  // Collectives: index = rank. Send/recv: one entry, the sender's send and
  // the receiver's recv.
  std::vector<RankIo> io;

  // Block layout, set by Layout().
  uint64_t block_elems = 0;
  uint64_t blocks_per_unit = 0;  // blocks over one count-sized range
  uint64_t nblocks = 0;
  uint64_t total_bytes = 0;                          // bytes read plus written, for costs and plans
  std::vector<std::pair<uint32_t, uint32_t>> pairs;  // all-to-all: rank pairs i <= j

  // Execution plan and progress.
  Algorithm algorithm = Algorithm::kNone;
  uint32_t threads = 1;
  bool stream_stores = false;  // non-temporal stores for outputs (large ops)
  std::atomic<uint64_t> next_block{0};
  std::atomic<uint32_t> active_runners{0};
  // The runners Start queued on the scheduler, which the caller's runner
  // cancels once no block is left for them (see EngineImpl::RunRunner). Set
  // and read by the caller's thread only.
  std::vector<Scheduler::Ticket> queued_runners;

  // Completion: one callback per participating rank.
  std::vector<Done> dones;
  std::vector<uint32_t> done_ranks;
  std::shared_ptr<Comm> comm;
  bool collective = true;  // false for a send/recv pair
};

// Bytes read plus written by the whole operation (independent of blocking).
uint64_t TouchedBytes(const Job& job);
// Splits the operation into blocks of about block_bytes per rank.
void Layout(Job& job, uint64_t block_bytes);
// Bytes read plus written by one block, the scheduler's cost unit.
uint64_t BlockCost(const Job& job);
// Executes block b (b < nblocks). Thread-safe for distinct blocks.
void RunBlock(const Job& job, uint64_t b);

}  // namespace hz::coll::internal

#endif  // HZ_COLLECTIVES_JOB_H_
