// Bulk threads that wait in the kernel's idle class without starving there.
//
// An idle-class thread (thread_priority.h) gives its CPU to any other thread
// the moment one wants it, which keeps one tenant's bulk work from delaying
// another tenant's requests better than any nice value. But on a host whose
// cores are all busy with other work (vCPUs on the service's cores) it gets
// almost nothing: a third of a percent of a core next to a thread at nice 0,
// against a tenth at nice 10. A thread enrolled here waits in the idle class;
// the guard reads each one's scheduler statistics and, when a thread starves
// (runnable for most of a window while getting almost none of a CPU), puts
// it at its nice value for a while before it returns to the idle class.
// Threads sharing the CPUs among themselves, or giving way to requests that
// come and go, do not starve by this measure; a thread behind work that
// keeps the CPUs busy does.
//
// Leaving the idle class needs CAP_SYS_NICE or an RLIMIT_NICE that allows
// the nice value (at least 20 - nice): MayLeaveIdleClass tells whether this
// process may, and a thread whose nice value it may not take back is not put
// in the idle class at all.
#ifndef HZ_COMMON_IDLE_CLASS_GUARD_H_
#define HZ_COMMON_IDLE_CLASS_GUARD_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>

namespace hz {

class IdleClassGuard {
 public:
  struct Options {
    // How often a thread's statistics are read while any enrolled thread is
    // awake; while all sleep, every kSleepingLooks windows.
    std::chrono::milliseconds window{50};
    // How many windows a starved thread keeps its nice value before it is
    // returned to the idle class (and lifted again if it still starves).
    uint32_t lifted_windows = 20;
  };

  // While every enrolled thread sleeps, the guard looks this many times
  // less often: an idle service costs a few reads a second.
  static constexpr uint32_t kSleepingLooks = 10;

  // Whether a thread of this process may leave the idle class for nice value
  // `nice` (tried once on a thread of its own; the answer is kept).
  static bool MayLeaveIdleClass(int nice);

  // Whether a thread that waited `waited_ns` to run and ran `ran_ns` during
  // `elapsed_ns` starved: it waited for at least half of the time and got
  // under 1/32 of what it waited for. Idle-class threads sharing the CPUs
  // only among themselves each get at least 1/32 of their wait up to 32
  // such threads per CPU; next to a busy thread at nice 0 one gets 1/340.
  // Only a look at least half a `window_ns` long judges: one right after a
  // thread enrolled covers a few hundred microseconds, in which a new thread
  // that has yet to run for the first time is not starving.
  static bool Starved(uint64_t ran_ns, uint64_t waited_ns, uint64_t elapsed_ns, uint64_t window_ns);

  explicit IdleClassGuard(Options options);
  // Stops watching; a thread still enrolled is put at its nice value for
  // good, since nothing would lift it any more.
  ~IdleClassGuard();
  IdleClassGuard(const IdleClassGuard&) = delete;
  IdleClassGuard& operator=(const IdleClassGuard&) = delete;

  // Puts the calling thread in the idle class, watched until it exits, with
  // `nice` (0..19) as the value it is lifted to. Where the thread's
  // statistics cannot be read or the process may not leave the idle class
  // for `nice`, the thread just takes `nice`.
  void EnrolThisThread(int nice);

  // Threads lifted so far (each lift counts once), for tests and metrics.
  uint64_t lifts() const;

  // Declares, while it lives, that the calling thread runs tasks it takes
  // from a queue whose count of tasks not yet taken is `*waiting`. Between
  // two tasks (BetweenTasks(true) until it takes the next) such a thread
  // may be runnable with nothing to run: spinning for its next task, or
  // woken for one that another thread took first. Where other threads keep
  // the CPUs busy it then starves like a thread at work, and a lift would
  // only move its next tasks out of the idle class. So while it is between
  // tasks and `*waiting` reads zero, the guard leaves it where it is; once
  // a task waits, a starved thread is lifted like any other, since the task
  // may be its to take. On a thread not enrolled, or after the guard is
  // gone, it does nothing. `waiting` must outlive this object.
  class TaskWaiter {
   public:
    explicit TaskWaiter(const std::atomic<size_t>* waiting);
    ~TaskWaiter();
    TaskWaiter(const TaskWaiter&) = delete;
    TaskWaiter& operator=(const TaskWaiter&) = delete;

    void BetweenTasks(bool between) { between_.store(between, std::memory_order_relaxed); }
    // Whether it is between tasks with none to take (read by the guard).
    bool HasNothingToRun() const {
      return between_.load(std::memory_order_relaxed) &&
             waiting_->load(std::memory_order_relaxed) == 0;
    }

   private:
    const std::atomic<size_t>* const waiting_;
    std::atomic<bool> between_{false};
  };

 private:
  struct Registry;
  class Enrolment;
  static Enrolment& ThisThreadEnrolment();
  void Watch();

  const Options options_;
  std::shared_ptr<Registry> registry_;
  std::thread watcher_;
};

}  // namespace hz

#endif  // HZ_COMMON_IDLE_CLASS_GUARD_H_
