// The micro-level control loop: per operation, how to execute it. Inputs are
// the operation's size and rank count, where the ranks' memory lives (NUMA),
// how busy the workers are, and the tenant's constraints, which bind.
#ifndef HZ_COLLECTIVES_PLANNER_H_
#define HZ_COLLECTIVES_PLANNER_H_

#include <cstdint>
#include <vector>

#include "hz/collectives/engine.h"

namespace hz::coll::internal {

struct PlanInput {
  Op op = Op::kAllReduce;
  uint64_t count = 0;
  uint64_t total_bytes = 0;  // bytes read plus written
  uint32_t nranks = 1;
  size_t esize = 1;
  size_t acc_size = 0;  // reductions: accumulator bytes per element
  uint32_t workers = 1;
  size_t queued_tasks = 0;   // scheduler backlog when the op is planned
  uint32_t numa_nodes = 1;   // distinct nodes holding the ranks' buffers
  uint16_t max_threads = 0;  // tenant cap, 0 = none
  uint64_t inline_max_bytes = 0;
  uint64_t single_thread_max_bytes = 0;  // EngineOptions::single_thread_max_bytes
  uint64_t block_bytes_override = 0;
  uint64_t stream_min_bytes = 0;  // 0: never stream
};

struct Plan {
  Algorithm algorithm = Algorithm::kNone;
  uint32_t threads = 0;
  uint64_t block_bytes = 0;    // per rank per block
  bool stream_stores = false;  // outputs bypass the caches
};

Plan ChoosePlan(const PlanInput& in);

// Whether the host has more than one NUMA node online.
bool SeveralNumaNodesOnline();
// NUMA node of the page holding addr, or -1 when unknown.
int NumaNodeOf(const void* addr);
// Distinct known nodes among addrs (at least 1). On a host with one node
// online every buffer is on it: no buffer is looked up (a system call each,
// two per rank of an operation).
uint32_t CountNumaNodes(const std::vector<const void*>& addrs);

}  // namespace hz::coll::internal

#endif  // HZ_COLLECTIVES_PLANNER_H_
