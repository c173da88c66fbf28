#include "planner.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>

namespace hz::coll {

uint64_t DefaultStreamMinBytes() {
  // The size of the L3 that this CPU shares with its neighbours, as sysfs
  // reports it ("32768K"), at most 32 MiB. sysconf(_SC_LEVEL3_CACHE_SIZE)
  // is not used: on multi-chiplet CPUs glibc sums every chiplet's L3, which
  // no single operation can use. The cap: a virtual machine is shown its
  // host's whole L3, which every other tenant of the host shares. On one
  // that reported 480 MiB, a 2-rank 64 MiB all-reduce (256 MiB touched) ran
  // at 7.6 GB/s with streaming stores and 4.5 GB/s without; on a 32 MiB L3,
  // 16 MiB (64 MiB touched) ran faster streamed too.
  constexpr uint64_t kCap = uint64_t{32} << 20;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
    std::ifstream level(dir + "/level"), size(dir + "/size");
    int lv = 0;
    uint64_t kib = 0;
    char unit = 0;
    if (!(level >> lv) || lv != 3) continue;
    if (!(size >> kib >> unit) || unit != 'K' || kib == 0 || kib > (uint64_t{1} << 30)) break;
    return std::min(kib << 10, kCap);
  }
  return kCap;
}

}  // namespace hz::coll

namespace hz::coll::internal {
namespace {

// Reductions keep one block of every rank plus the accumulator in the
// per-core cache; copies only stream one block through it.
constexpr uint64_t kCacheBudget = 256 * 1024;
constexpr uint64_t kMinBlock = 16 * 1024;
constexpr uint64_t kMaxBlock = 256 * 1024;

// from <linux/mempolicy.h>; libnuma is not needed for this one call.
constexpr unsigned long kMpolFNode = 1UL << 0;
constexpr unsigned long kMpolFAddr = 1UL << 1;

}  // namespace

Plan ChoosePlan(const PlanInput& in) {
  Plan plan;
  if (in.op == Op::kBarrier || in.count == 0) {
    plan.algorithm = Algorithm::kNone;
    return plan;
  }
  plan.stream_stores = in.stream_min_bytes != 0 && in.total_bytes >= in.stream_min_bytes;
  uint64_t block = kMaxBlock;
  // Streamed reductions go from the inputs to the outputs in one pass, with
  // no accumulator to keep in the cache (job.cc), and pay a block's fixed
  // costs for each of 2p streams: the largest blocks. Through the service
  // (service_allreduce_bench, AMD EPYC), 16 and 64 MiB all-reduces over 8
  // ranks took 10-35% less time than with the cache budget's 28 KiB, and
  // over 4 ranks up to 15% less.
  if (in.acc_size != 0 && !plan.stream_stores) {
    // Rank inputs plus accumulator (scaled to element bytes) share the budget.
    uint64_t per_elem = in.nranks * in.esize + in.acc_size;
    block = kCacheBudget / per_elem * in.esize;
  }
  block = std::clamp(block, kMinBlock, kMaxBlock) / 4096 * 4096;
  if (in.block_bytes_override != 0) block = in.block_bytes_override;
  plan.block_bytes = block;

  const uint64_t per_rank = in.count * in.esize;
  const uint64_t nblocks_hint = (per_rank + block - 1) / block;
  if (in.total_bytes <= in.inline_max_bytes) {
    plan.algorithm = Algorithm::kInline;
    plan.threads = 1;
    return plan;
  }
  uint32_t cap = in.workers;
  if (in.max_threads != 0) cap = std::min<uint32_t>(cap, in.max_threads);
  // Under load, leave workers to others: the weighted queue shares them
  // anyway, and fewer runners per op means less switching between ops.
  if (in.queued_tasks >= in.workers) cap = std::max<uint32_t>(1, cap / 2);
  // Ranks spread over several nodes: more threads hide remote latency.
  const uint64_t single_max =
      in.numa_nodes > 1 ? in.single_thread_max_bytes / 2 : in.single_thread_max_bytes;
  const bool per_rank_units =
      in.op == Op::kAllGather || in.op == Op::kReduceScatter || in.op == Op::kAllToAll;
  uint64_t units = std::max<uint64_t>(1, nblocks_hint) * (per_rank_units ? in.nranks : 1);
  if (cap <= 1 || in.total_bytes <= single_max || units <= 1) {
    plan.algorithm = Algorithm::kSingleThread;
    plan.threads = 1;
    return plan;
  }
  plan.algorithm = Algorithm::kBlockedParallel;
  plan.threads = static_cast<uint32_t>(std::min<uint64_t>(cap, units));
  return plan;
}

bool SeveralNumaNodesOnline() {
  // Read once: nodes come and go only with memory hot-plug, which leaves a
  // node without the memory of running guests anyway. A kernel without NUMA
  // has no such file: one node.
  static const bool several = [] {
    std::ifstream online("/sys/devices/system/node/online");
    std::string nodes;  // "0", or a list such as "0-1" or "0,2"
    if (!(online >> nodes)) return false;
    return nodes.find_first_of(",-") != std::string::npos;
  }();
  return several;
}

int NumaNodeOf(const void* addr) {
  if (addr == nullptr) return -1;
  int node = -1;
  long rc = syscall(SYS_get_mempolicy, &node, nullptr, 0UL, const_cast<void*>(addr),
                    kMpolFNode | kMpolFAddr);
  return rc == 0 ? node : -1;
}

uint32_t CountNumaNodes(const std::vector<const void*>& addrs) {
  if (!SeveralNumaNodesOnline()) return 1;
  std::set<int> nodes;
  for (const void* a : addrs) {
    int n = NumaNodeOf(a);
    if (n >= 0) nodes.insert(n);
  }
  return std::max<uint32_t>(1, static_cast<uint32_t>(nodes.size()));
}

}  // namespace hz::coll::internal
