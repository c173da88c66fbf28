// Where the planner looks for the ranks' buffers: the shortcut a host with
// one NUMA node takes must give the answer the per-buffer lookups would.
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
    // What the engine assumes without asking.
    EXPECT_EQ(counted, 1u);
    for (const void* a : addrs) EXPECT_LE(NumaNodeOf(a), 0);
  }
  EXPECT_EQ(CountNumaNodes({}), 1u);
  EXPECT_EQ(NumaNodeOf(nullptr), -1);
}

}  // namespace
}  // namespace hz::coll::internal
