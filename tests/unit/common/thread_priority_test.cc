// The priorities the service gives its threads, as the kernel reports them.
#include "hz/common/thread_priority.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <gtest/gtest.h>

namespace hz {
namespace {

struct Seen {
  int policy = -1;
  int nice = -100;
};

Seen PriorityOfAThreadAt(int nice) {
  Seen seen;
  ThreadAtNice(nice, "hz-test", [&seen] {
    seen.policy = sched_getscheduler(0);
    errno = 0;
    const int n = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
    if (errno == 0) seen.nice = n;
  }).join();
  return seen;
}

TEST(ThreadPriority, ANiceValueIsTheThreadsOwn) {
  const int before = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
  if (before > 7) GTEST_SKIP() << "this process already runs above nice 7";
  const Seen seen = PriorityOfAThreadAt(7);
  EXPECT_EQ(seen.policy, SCHED_OTHER);
  EXPECT_EQ(seen.nice, 7);
  EXPECT_EQ(getpriority(PRIO_PROCESS, static_cast<id_t>(gettid())), before);
}

// kIdleClassNice asks for the kernel's idle class, which needs no privilege,
// and leaves the thread at nice 19 too, so that it keeps the lowest place
// should it ever leave the class.
TEST(ThreadPriority, TheIdleClassIsTheKernels) {
  const Seen seen = PriorityOfAThreadAt(kIdleClassNice);
  EXPECT_EQ(seen.policy, SCHED_IDLE);
  EXPECT_EQ(seen.nice, 19);
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER) << "the caller's class changed";
}

}  // namespace
}  // namespace hz
