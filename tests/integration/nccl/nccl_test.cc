// Runs nccl_rank_program (an NCCL program that knows nothing of HarmonAIze)
// as N rank processes against a real harmonaized, each on its own VM socket.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "service_harness.h"

namespace hz::testing {
namespace {

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(svc_.Start()); }

  // Exit codes of the ranks; each process sets HZ_DEVICE to its socket.
  std::vector<int> Run(const std::string& mode, int n, const char* program = HZ_NCCL_RANK_PROGRAM) {
    auto vms = svc_.TenantWithVms("nccl", n);
    EXPECT_EQ(vms.size(), static_cast<size_t>(n));
    if (vms.size() != static_cast<size_t>(n)) return {};
    std::string id_file = svc_.dir() + "/nccl-" + mode + ".id";
    return RunRanks(n, [&](int rank) {
      std::string dev = "vhost-user:" + vms[rank];
      setenv("HZ_DEVICE", dev.c_str(), 1);
      for (const auto& [name, value] : env_) setenv(name.c_str(), value.c_str(), 1);
      std::string r = std::to_string(rank), nr = std::to_string(n);
      execl(program, program, mode.c_str(), r.c_str(), nr.c_str(), id_file.c_str(),
            static_cast<char*>(nullptr));
      return 127;
    });
  }

  ServiceProcess svc_;
  std::vector<std::pair<std::string, std::string>> env_;  // for every rank process
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

// Split, PreMulSum, gather/scatter, memory, shrink, revoke and the clean
// failures, built with HarmonAIze's nccl.h.
TEST_F(NcclTest, ApiBeyondCollectivesAcrossThreeRanks) {
  EXPECT_EQ(Run("api", 3, HZ_NCCL_API_PROGRAM), (std::vector<int>{0, 0, 0}));
}

TEST_F(NcclTest, ApiBeyondCollectivesAcrossTwoRanks) {
  EXPECT_EQ(Run("api", 2, HZ_NCCL_API_PROGRAM), (std::vector<int>{0, 0}));
}

// The same program built only against NVIDIA's nccl.h: an unchanged NCCL
// application, linked to HarmonAIze's library.
TEST_F(NcclTest, HoldoutProgramBuiltAgainstNvidiasHeaderRuns) {
#ifdef HZ_NCCL_HOLDOUT_PROGRAM
  EXPECT_EQ(Run("api", 3, HZ_NCCL_HOLDOUT_PROGRAM), (std::vector<int>{0, 0, 0}));
#else
  GTEST_SKIP() << "NVIDIA's nccl.h was not found at configure time (no CUDA toolkit with NCCL)";
#endif
}

// NCCL_DEBUG=TRACE with a %h.%p file name: one file per rank process, with
// the version line, communicator creation, and every call.
TEST_F(NcclTest, DebugFilePerRank) {
  env_ = {{"NCCL_DEBUG", "TRACE"}, {"NCCL_DEBUG_FILE", svc_.dir() + "/nccl-debug.%h.%p.log"}};
  ASSERT_EQ(Run("collectives", 2), (std::vector<int>{0, 0}));
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(svc_.dir())) {
    const std::string name = entry.path().filename();
    if (name.rfind("nccl-debug.", 0) != 0) continue;
    ++files;
    std::stringstream text;
    text << std::ifstream(entry.path()).rdbuf();
    EXPECT_NE(text.str().find("NCCL version 2.28"), std::string::npos) << name;
    EXPECT_NE(text.str().find("NCCL INFO ncclCommInitRank"), std::string::npos) << name;
    EXPECT_NE(text.str().find("NCCL TRACE ncclAllReduce"), std::string::npos) << name;
  }
  EXPECT_EQ(files, 2);
}

}  // namespace
}  // namespace hz::testing
