// The rank processes every service test forks (service_harness.h): a rank
// that could not be forked must fail its test, not make the harness wait
// for or kill processes that are not its ranks.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <vector>

#include <gtest/gtest.h>

#include "service_harness.h"

namespace hz::testing {
namespace {

// fork() failed for this rank: StartRanks hands its -1 on.
constexpr pid_t kNotForked = -1;

// A child of this process that is no rank of the test's.
pid_t Bystander() {
  pid_t pid = fork();
  if (pid == 0) {
    usleep(200 * 1000);
    _exit(7);
  }
  return pid;
}

TEST(RankHarness, ARankThatWasNotForkedReadsNotStartedAndNoOtherChildIsTouched) {
  for (auto patience : {std::chrono::milliseconds(10), std::chrono::milliseconds::max()}) {
    SCOPED_TRACE(patience.count());
    const pid_t bystander = Bystander();
    ASSERT_GT(bystander, 0);
    EXPECT_EQ(WaitRanks({kNotForked}, patience), std::vector<int>{kRankNotStarted});
    // Neither reaped nor killed by the wait: it exits as it meant to.
    int status = 0;
    ASSERT_EQ(waitpid(bystander, &status, 0), bystander);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 7);
  }
}

TEST(RankHarness, TheRanksThatRanAreWaitedForBesideOneThatDidNot) {
  std::vector<pid_t> pids = StartRanks(2, [](int rank) { return 10 + rank; });
  pids.insert(pids.begin() + 1, kNotForked);
  EXPECT_EQ(WaitRanks(pids, std::chrono::milliseconds(60000)),
            (std::vector<int>{10, kRankNotStarted, 11}));
}

}  // namespace
}  // namespace hz::testing
