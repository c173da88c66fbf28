// Runs nccl_rank_program (an NCCL program that knows nothing of HarmonAIze)
// as N rank processes against a real harmonaized, each on its own VM socket.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "service_harness.h"

namespace hz::testing {
namespace {

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(svc_.Start()); }

  // Exit codes of the ranks; each process sets HZ_DEVICE to its socket.
  std::vector<int> Run(const std::string& mode, int n) {
    auto vms = svc_.TenantWithVms("nccl", n);
    EXPECT_EQ(vms.size(), static_cast<size_t>(n));
    if (vms.size() != static_cast<size_t>(n)) return {};
    std::string id_file = svc_.dir() + "/nccl-" + mode + ".id";
    return RunRanks(n, [&](int rank) {
      std::string dev = "vhost-user:" + vms[rank];
      setenv("HZ_DEVICE", dev.c_str(), 1);
      std::string r = std::to_string(rank), nr = std::to_string(n);
      execl(HZ_NCCL_RANK_PROGRAM, HZ_NCCL_RANK_PROGRAM, mode.c_str(), r.c_str(), nr.c_str(),
            id_file.c_str(), static_cast<char*>(nullptr));
      return 127;
    });
  }

  ServiceProcess svc_;
};

TEST_F(NcclTest, CollectivesAcrossThreeRankProcesses) {
  EXPECT_EQ(Run("collectives", 3), (std::vector<int>{0, 0, 0}));
}

TEST_F(NcclTest, CollectivesOnOneRank) {
  EXPECT_EQ(Run("collectives", 1), (std::vector<int>{0}));
}

TEST_F(NcclTest, ArgumentErrorsAndACountMismatch) {
  EXPECT_EQ(Run("errors", 2), (std::vector<int>{0, 0}));
}

TEST_F(NcclTest, APeerAbortIsARemoteErrorThatSticks) {
  EXPECT_EQ(Run("abort", 2), (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace hz::testing
