// BlockingCallGuard: a call on a front-end's eventfd that blocks inside a
// guard is interrupted by the watchdog; one outside a guard is not.
#include "blocking_call_guard.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <dirent.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "notify_fd.h"
#include "test_util.h"

namespace vdev {
namespace {

using namespace std::chrono_literals;

using testing::Drain;
using testing::kEventFdMax;

// A blocking eventfd whose counter is full: the next write waits forever.
int FullBlockingEventFd() {
  const int fd = eventfd(0, EFD_CLOEXEC);
  if (fd >= 0 && write(fd, &kEventFdMax, sizeof(kEventFdMax)) != sizeof(kEventFdMax)) {
    close(fd);
    return -1;
  }
  return fd;
}

// Waits for flag, at most `limit` (a guard against hanging, not a measure).
bool WaitFor(const std::atomic<bool>& flag, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!flag.load() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(1ms);
  return flag.load();
}

TEST(BlockingCallGuard, InterruptsAWriteThatWouldNeverReturn) {
  ASSERT_TRUE(BlockingCallGuard::Bounded());
  const int fd = FullBlockingEventFd();
  ASSERT_GE(fd, 0);
  std::atomic<bool> done{false};
  ssize_t n = 0;
  int err = 0;
  std::thread writer([&] {
    const uint64_t one = 1;
    {
      BlockingCallGuard guard;
      n = write(fd, &one, sizeof(one));
      err = errno;
    }
    done = true;
  });
  const bool returned = WaitFor(done, 10s);
  if (!returned) Drain(fd);  // let the writer go, then fail
  writer.join();
  ASSERT_TRUE(returned) << "the guarded write was not interrupted";
  EXPECT_EQ(n, -1);
  EXPECT_EQ(err, EINTR);
  EXPECT_EQ(Drain(fd), kEventFdMax);  // nothing was added
  close(fd);
}

// Times the watchdog thread of this process was switched to (the third
// field of its schedstat), or -1 when there is none.
long WatchdogWakeups() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  long wakeups = -1;
  while (dirent* e = readdir(dir)) {
    const std::string task = std::string("/proc/self/task/") + e->d_name;
    std::string name;
    std::getline(std::ifstream(task + "/comm"), name);
    if (name != "vdev-watchdog") continue;
    unsigned long long ran = 0, waited = 0;
    long slices = -1;
    if (std::ifstream(task + "/schedstat") >> ran >> waited >> slices) wakeups = slices;
  }
  closedir(dir);
  return wakeups;
}

// An idle process has no thread waking every tick: a tick after the last
// guarded call the watchdog sleeps until the next one, which it still
// bounds.
TEST(BlockingCallGuard, TheWatchdogSleepsThroughAQuietSpellAndWakesForTheNextCall) {
  ASSERT_TRUE(BlockingCallGuard::Bounded());
  { BlockingCallGuard guard; }                     // this process has a watchdog
  std::this_thread::sleep_for(4 * kWatchdogTick);  // a quiet tick has passed
  const long before = WatchdogWakeups();
  ASSERT_GE(before, 0) << "no vdev-watchdog thread";
  std::this_thread::sleep_for(10 * kWatchdogTick);
  EXPECT_EQ(WatchdogWakeups(), before) << "the watchdog woke while no guarded call was made";

  const int fd = FullBlockingEventFd();
  ASSERT_GE(fd, 0);
  std::atomic<bool> done{false};
  int err = 0;
  std::thread writer([&] {
    const uint64_t one = 1;
    {
      BlockingCallGuard guard;
      if (write(fd, &one, sizeof(one)) < 0) err = errno;
    }
    done = true;
  });
  const bool returned = WaitFor(done, 10s);
  if (!returned) Drain(fd);
  writer.join();
  ASSERT_TRUE(returned) << "a guarded write after the quiet spell was not interrupted";
  EXPECT_EQ(err, EINTR);
  close(fd);
}

TEST(BlockingCallGuard, LeavesCallsOutsideAGuardAlone) {
  ASSERT_TRUE(BlockingCallGuard::Bounded());
  const int fd = FullBlockingEventFd();
  ASSERT_GE(fd, 0);
  std::atomic<bool> done{false};
  ssize_t n = 0;
  std::thread writer([&] {
    {
      BlockingCallGuard guard;  // this thread is watched, but not in this write
    }
    const uint64_t one = 1;
    n = write(fd, &one, sizeof(one));
    done = true;
  });
  // Six ticks: the watchdog would have interrupted a guarded call by two.
  EXPECT_FALSE(WaitFor(done, 6 * kWatchdogTick));
  EXPECT_EQ(Drain(fd), kEventFdMax);  // room for the write, which now completes
  ASSERT_TRUE(WaitFor(done, 10s));
  writer.join();
  EXPECT_EQ(n, 8);
  EXPECT_EQ(Drain(fd), 1u);
  close(fd);
}

// The window the guard closes: the front-end clears O_NONBLOCK between
// NotifyEventFd's check and its write, on a full counter. A thread toggles
// the flag as fast as it can while notifications are sent; every one of
// them returns (a regression hangs, and ctest's timeout reports it), and
// none adds to the full counter.
TEST(NotifyEventFd, ReturnsWhileTheFrontEndTogglesNonBlocking) {
  const int fd = FullBlockingEventFd();
  ASSERT_GE(fd, 0);
  std::atomic<bool> stop{false};
  std::thread toggler([&] {
    const int flags = fcntl(fd, F_GETFL);
    while (!stop.load(std::memory_order_relaxed)) {
      fcntl(fd, F_SETFL, flags | O_NONBLOCK);
      fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    }
  });
  int pending = 0, refused = 0, interrupted = 0;
  // Until a few notifications were caught in the window (each costs up to
  // two watchdog ticks), or enough were sent that it was not hit.
  for (int i = 0; i < 20000 && interrupted < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const NotifyResult r = NotifyEventFd(fd);
    if (std::chrono::steady_clock::now() - t0 >= kWatchdogTick) ++interrupted;
    ASSERT_NE(r, NotifyResult::kSent);  // the counter is full
    (r == NotifyResult::kPending ? pending : refused)++;
  }
  stop = true;
  toggler.join();
  RecordProperty("pending", pending);
  RecordProperty("refused", refused);
  RecordProperty("interrupted", interrupted);
  EXPECT_GT(pending + refused, 0);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  EXPECT_EQ(Drain(fd), kEventFdMax);
  close(fd);
}

}  // namespace
}  // namespace vdev
