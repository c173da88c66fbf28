// How many threads the planner gives an operation, and where it looks for
// the ranks' buffers: the shortcut a host with one NUMA node takes must give
// the answer the per-buffer lookups would.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "planner.h"

namespace hz::coll::internal {
namespace {

// Nodes that sysfs lists a directory for, counted independently of the
// planner's reading of the "online" list.
int NodeDirectories() {
  std::error_code ec;
  int nodes = 0;
  for (const auto& e : std::filesystem::directory_iterator("/sys/devices/system/node", ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 4 && name.compare(0, 4, "node") == 0 &&
        name.find_first_not_of("0123456789", 4) == std::string::npos) {
      ++nodes;
    }
  }
  return nodes;
}

// A 2-rank fp32 all-reduce of `per_rank` bytes on an idle engine with two
// workers: each rank's input read and output written.
PlanInput AllReduce(uint64_t per_rank, uint64_t single_thread_max) {
  PlanInput in;
  in.count = per_rank / 4;
  in.esize = 4;
  in.acc_size = 4;
  in.nranks = 2;
  in.total_bytes = 2 * in.nranks * per_rank;
  in.workers = 2;
  in.inline_max_bytes = 64 * 1024;
  in.single_thread_max_bytes = single_thread_max;
  return in;
}

TEST(PlannerThreads, OperationsUpToTheLimitRunOnOneThread) {
  constexpr uint64_t kMiB = 1 << 20;
  // 1 MiB a rank moves 4 MiB: one thread under an 8 MiB limit, and at a limit
  // of exactly 4 MiB; split over both workers under a 1 MiB one.
  EXPECT_EQ(ChoosePlan(AllReduce(kMiB, 8 * kMiB)).algorithm, Algorithm::kSingleThread);
  EXPECT_EQ(ChoosePlan(AllReduce(kMiB, 4 * kMiB)).algorithm, Algorithm::kSingleThread);
  const Plan split = ChoosePlan(AllReduce(kMiB, kMiB));
  EXPECT_EQ(split.algorithm, Algorithm::kBlockedParallel);
  EXPECT_EQ(split.threads, 2u);
  // 0: everything past the inline size is split; the inline size still holds.
  EXPECT_EQ(ChoosePlan(AllReduce(kMiB, 0)).algorithm, Algorithm::kBlockedParallel);
  EXPECT_EQ(ChoosePlan(AllReduce(16 * 1024, 0)).algorithm, Algorithm::kInline);
  // Past the limit, split; buffers on two NUMA nodes halve the limit.
  EXPECT_EQ(ChoosePlan(AllReduce(4 * kMiB, 8 * kMiB)).algorithm, Algorithm::kBlockedParallel);
  PlanInput remote = AllReduce(2 * kMiB, 8 * kMiB);
  EXPECT_EQ(ChoosePlan(remote).algorithm, Algorithm::kSingleThread);
  remote.numa_nodes = 2;
  EXPECT_EQ(ChoosePlan(remote).algorithm, Algorithm::kBlockedParallel);
}

TEST(PlannerNuma, SeveralNodesOnlyWhereSysfsListsSeveral) {
  const int dirs = NodeDirectories();
  if (dirs == 0) {
    // A kernel without NUMA: one node, and no file to say otherwise.
    EXPECT_FALSE(SeveralNumaNodesOnline());
    return;
  }
  EXPECT_EQ(SeveralNumaNodesOnline(), dirs > 1) << dirs << " node directories";
}

TEST(PlannerNuma, OneNodeHostsPutEveryBufferOnIt) {
  std::vector<std::vector<char>> buffers;
  for (int i = 0; i < 8; ++i) buffers.emplace_back(size_t{1} << 20, static_cast<char>(i));
  std::vector<const void*> addrs;
  for (const auto& b : buffers) addrs.push_back(b.data());
  const uint32_t counted = CountNumaNodes(addrs);
  EXPECT_GE(counted, 1u);
  if (!SeveralNumaNodesOnline()) {
    // CountNumaNodes answers 1 without asking; asking agrees.
    EXPECT_EQ(counted, 1u);
    for (const void* a : addrs) EXPECT_LE(NumaNodeOf(a), 0);
  }
  EXPECT_EQ(CountNumaNodes({}), 1u);
  EXPECT_EQ(NumaNodeOf(nullptr), -1);
}

}  // namespace
}  // namespace hz::coll::internal
