// Bulk threads wait in the kernel's idle class and take their nice value
// only while they starve, as the kernel reports their class and nice value.
#include "hz/common/idle_class_guard.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "hz/common/thread_priority.h"
#include "hz_test/busy_cpus.h"

namespace hz {
namespace {

using std::chrono::milliseconds;

constexpr uint64_t kMs = 1'000'000;

// Waits for pred, for at most a minute: a hang guard, not a measurement.
template <typename Pred>
bool EventuallyTrue(Pred pred) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

struct Place {
  int policy;
  int nice;
  bool operator==(const Place&) const = default;
};

Place PlaceOf(pid_t tid) {
  return {sched_getscheduler(tid), getpriority(PRIO_PROCESS, static_cast<id_t>(tid))};
}

constexpr Place kIdle{SCHED_IDLE, 19};

// A thread enrolled in the guard at `nice` that spins while `spin` is set
// and otherwise sleeps until it is told to end.
class BulkThread {
 public:
  BulkThread(IdleClassGuard* guard, int nice) {
    thread_ = std::thread([this, guard, nice] {
      guard->EnrolThisThread(nice);
      tid_.store(gettid());
      std::unique_lock<std::mutex> lock(mu_);
      while (!end_) {
        if (spin_.load()) {
          lock.unlock();
          while (spin_.load()) {
          }
          lock.lock();
        } else {
          cv_.wait(lock);
        }
      }
    });
    while (tid_.load() == 0) std::this_thread::yield();
  }
  ~BulkThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      end_ = true;
      spin_.store(false);
    }
    cv_.notify_all();
    thread_.join();
  }
  void Spin(bool on) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      spin_.store(on);
    }
    cv_.notify_all();
  }
  pid_t tid() const { return tid_.load(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool end_ = false;
  std::atomic<bool> spin_{false};
  std::atomic<pid_t> tid_{0};
  std::thread thread_;
};

IdleClassGuard::Options Fast() {
  IdleClassGuard::Options o;
  o.window = milliseconds(10);
  o.lifted_windows = 5;
  return o;
}

bool MayLift(int nice) {
  return IdleClassGuard::MayLeaveIdleClass(nice);
}

TEST(IdleClassGuard, StarvingIsWaitingWithoutRunning) {
  const uint64_t window = 50 * kMs;
  EXPECT_TRUE(IdleClassGuard::Starved(0, window, window, window));
  // Next to a thread at nice 0 an idle-class thread gets 3/1027 of a CPU.
  EXPECT_TRUE(IdleClassGuard::Starved(window * 3 / 1027, window * 1024 / 1027, window, window));
  // Four idle-class threads taking turns on one CPU, or two on two.
  EXPECT_FALSE(IdleClassGuard::Starved(window / 4, window * 3 / 4, window, window));
  EXPECT_FALSE(IdleClassGuard::Starved(window, 0, window, window));
  // Asleep, or waiting for less than half of the window.
  EXPECT_FALSE(IdleClassGuard::Starved(0, 0, window, window));
  EXPECT_FALSE(IdleClassGuard::Starved(0, window / 2 - 1, window, window));
  // A look half a window long judges; one sooner (the guard looks again as
  // soon as a thread enrolls) does not: a new thread waiting a few hundred
  // microseconds for its first run is not starving.
  EXPECT_TRUE(IdleClassGuard::Starved(0, window / 2, window / 2, window));
  EXPECT_FALSE(IdleClassGuard::Starved(7'000, 240'000, 300'000, window));
}

TEST(IdleClassGuard, AThreadWaitsInTheIdleClassWhileItIsNotStarved) {
  if (!MayLift(10)) GTEST_SKIP() << "this process may not leave the idle class for nice 10";
  IdleClassGuard guard(Fast());
  BulkThread bulk(&guard, 10);
  // On a busy host it may starve on its way to sleep, and be lifted for a
  // while; asleep it cannot starve, however busy the host is.
  ASSERT_TRUE(EventuallyTrue([&] { return PlaceOf(bulk.tid()) == kIdle; }));
  const uint64_t lifts = guard.lifts();
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(PlaceOf(bulk.tid()), kIdle);
  EXPECT_EQ(guard.lifts(), lifts);
}

// The guard's reason to be: threads at nice 0 on every CPU would leave an
// idle-class thread a third of a percent of one.
TEST(IdleClassGuard, AThreadStarvedByBusyCpusTakesItsNiceValueAndReturns) {
  if (!MayLift(10)) GTEST_SKIP() << "this process may not leave the idle class for nice 10";
  IdleClassGuard guard(Fast());
  BulkThread bulk(&guard, 10);
  const Place lifted{SCHED_OTHER, 10};
  {
    hz::testing::BusyCpus busy;
    bulk.Spin(true);
    EXPECT_TRUE(EventuallyTrue([&] { return PlaceOf(bulk.tid()) == lifted; }))
        << "a starved thread stayed in the idle class";
    EXPECT_GE(guard.lifts(), 1u);
  }
  // Nothing else wants the CPUs now: it goes back once its windows at nice
  // 10 are over (and may be lifted again while another process keeps the
  // CPUs busy, but spends at least a window in the idle class first).
  EXPECT_TRUE(EventuallyTrue([&] { return PlaceOf(bulk.tid()) == kIdle; }))
      << "a lifted thread never returned to the idle class";
  bulk.Spin(false);
}

// A thread between two tasks from a queue may be runnable with nothing to
// run (the collective workers' poll, or a wake-up for a task another worker
// took), and starves on busy CPUs like one at work. With a task waiting it
// is lifted, as the task may be its to take; with none it would run nothing
// lifted, and stays in the idle class. How long the guard takes to see a
// starving thread depends on the host's scheduler, so the empty queue is
// watched for several times as long as the lift took (0.5 to 5 s).
TEST(IdleClassGuard, AThreadBetweenTasksIsLiftedOnlyWhileATaskWaits) {
  if (!MayLift(10)) GTEST_SKIP() << "this process may not leave the idle class for nice 10";
  IdleClassGuard guard(Fast());
  std::atomic<size_t> waiting{1};
  std::atomic<bool> end{false};
  std::atomic<pid_t> tid{0};
  std::thread waiter_thread([&] {
    guard.EnrolThisThread(10);
    IdleClassGuard::TaskWaiter task_waiter(&waiting);
    task_waiter.BetweenTasks(true);
    tid.store(gettid());
    while (!end.load()) {
    }
  });
  struct Ender {  // also when an assertion returns early
    std::atomic<bool>& end;
    std::thread& thread;
    ~Ender() {
      end.store(true);
      thread.join();
    }
  } ender{end, waiter_thread};
  ASSERT_TRUE(EventuallyTrue([&] { return tid.load() != 0; }));
  const Place lifted{SCHED_OTHER, 10};
  {
    hz::testing::BusyCpus busy;
    const auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(EventuallyTrue([&] { return PlaceOf(tid.load()) == lifted; }))
        << "a starved thread stayed in the idle class with a task waiting";
    const auto took = std::chrono::steady_clock::now() - start;
    waiting.store(0);
    ASSERT_TRUE(EventuallyTrue([&] { return PlaceOf(tid.load()) == kIdle; }));
    const uint64_t lifts = guard.lifts();
    std::this_thread::sleep_for(
        std::clamp<std::chrono::nanoseconds>(5 * took, milliseconds(500), milliseconds(5000)));
    EXPECT_EQ(PlaceOf(tid.load()), kIdle) << "a thread between tasks was lifted with none waiting";
    EXPECT_EQ(guard.lifts(), lifts);
  }
}

TEST(IdleClassGuard, AThreadNoLongerWatchedTakesItsNiceValue) {
  if (!MayLift(7)) GTEST_SKIP() << "this process may not leave the idle class for nice 7";
  auto guard = std::make_unique<IdleClassGuard>(Fast());
  BulkThread bulk(guard.get(), 7);
  ASSERT_TRUE(EventuallyTrue([&] { return PlaceOf(bulk.tid()) == kIdle; }));
  guard.reset();
  EXPECT_EQ(PlaceOf(bulk.tid()), (Place{SCHED_OTHER, 7}));
}

// The guard's own thread: while every enrolled thread sleeps it looks a
// tenth as often, so that an idle service does not wake every window.
TEST(IdleClassGuard, WhileAllSleepTheGuardLooksRarely) {
  if (!MayLift(10)) GTEST_SKIP() << "this process may not leave the idle class for nice 10";
  IdleClassGuard guard(Fast());
  BulkThread bulk(&guard, 10);
  ASSERT_TRUE(EventuallyTrue([&] { return PlaceOf(bulk.tid()) == kIdle; }));
  auto switches = [] {
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
      std::ifstream comm(entry.path() / "comm");
      std::string name;
      std::getline(comm, name);
      if (name != "hz-idle-guard") continue;
      std::ifstream status(entry.path() / "status");
      for (std::string line; std::getline(status, line);) {
        if (line.rfind("voluntary_ctxt_switches:", 0) == 0) return std::stol(line.substr(24));
      }
    }
    return -1L;
  };
  std::this_thread::sleep_for(milliseconds(100));  // the first windows
  const long before = switches();
  ASSERT_GE(before, 0) << "no hz-idle-guard thread";
  std::this_thread::sleep_for(milliseconds(1000));
  // Every window would be 100 wake-ups; every tenth, 10. Being late only
  // makes fewer.
  EXPECT_LE(switches() - before, 20);
}

// Without CAP_SYS_NICE and with RLIMIT_NICE at 0 (an ordinary user) a
// thread could never come back from the idle class: it runs at its nice
// value instead.
TEST(IdleClassGuard, WhereItCouldNotComeBackAThreadJustTakesItsNiceValue) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to become an ordinary user";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const rlimit none{0, 0};
    if (setrlimit(RLIMIT_NICE, &none) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(3);
    if (IdleClassGuard::MayLeaveIdleClass(12)) _exit(4);
    IdleClassGuard guard(Fast());
    Place seen{};
    std::thread([&] {
      guard.EnrolThisThread(12);
      seen = PlaceOf(gettid());
    }).join();
    _exit(seen == Place{SCHED_OTHER, 12} ? 0 : 5);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: could not drop privilege, 4: the probe said it may "
                                       "leave, 5: the thread was not at SCHED_OTHER nice 12";
}

}  // namespace
}  // namespace hz
