// Worker threads shared by all tenants. Work arrives as small tasks (one
// cache block of one operation each) in flows, one flow per (tenant,
// priority class). Workers pick tasks by stride scheduling: each flow has a
// pass value that grows by cost / weight for every task it runs, and the
// non-empty flow with the smallest pass goes next. Under contention each flow
// therefore gets worker time in proportion to its weight.
//
// A worker that finished a task may poll the queue for a while before it
// sleeps (the poll budget), so that the next operation of a tenant issuing
// them back to back starts without a wake-up: on a virtual host, waking a
// thread on an idle CPU takes tens of microseconds, a large part of a 1 MiB
// all-reduce. It polls only in the kernel's idle class, where it gives its
// CPU away the moment any other thread wants it, and only while its last
// wait for a task fitted in the budget: workers of a tenant with pauses
// longer than that sleep at once, and an idle service polls no more than
// once per worker after its last task. A task queued while a worker polls
// is left to it: no sleeper is woken for it. A worker starved between tasks (in
// its poll, or woken for a task another took) has nothing to run: its
// idle-class guard does not lift it for that (IdleClassGuard::TaskWaiter).
#ifndef HZ_COLLECTIVES_SCHEDULER_H_
#define HZ_COLLECTIVES_SCHEDULER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "hz/common/tenant_id.h"
#include "hz/common/thread_priority.h"
#include "hz/common/waiting_window.h"

namespace hz::coll::internal {

class Scheduler {
 public:
  using Task = std::function<void()>;
  struct FlowKey {
    TenantId tenant;
    uint16_t priority;
    friend auto operator<=>(const FlowKey&, const FlowKey&) = default;
  };

  // Monotonic nanoseconds, for the waiting window.
  using NowNs = std::function<uint64_t()>;

  // priority: the workers' (thread_priority.h). Waiting is measured over
  // window_ns by now_ns (WaitingWindow).
  // An empty now_ns reads std::chrono::steady_clock. poll: the poll budget
  // (above); zero: workers sleep as soon as the queue is empty.
  explicit Scheduler(uint32_t threads, BulkPriority priority = {},
                     uint64_t window_ns = 10'000'000'000, NowNs now_ns = {},
                     std::chrono::microseconds poll = {});
  ~Scheduler();  // runs every queued task, then joins
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // A queued task, for Cancel.
  struct Ticket {
    FlowKey flow;
    uint64_t id;
  };

  // Queues a task; cost is in bytes (any consistent unit), weight >= 1.
  Ticket Submit(FlowKey flow, uint32_t weight, uint64_t cost, Task task);
  // Removes the task if no worker has taken it yet: true when it will not run.
  bool Cancel(const Ticket& ticket);

  uint32_t threads() const { return static_cast<uint32_t>(workers_.size()); }
  // Tasks queued and not yet started.
  size_t queued() const;
  // Lock-free hint: some task is waiting for a worker. A long task checks it
  // between steps and yields (resubmits itself) only when someone waits.
  bool HasWaiting() const { return waiting_.load(std::memory_order_relaxed) != 0; }
  // True on one of this scheduler's worker threads.
  static bool OnWorker();
  // Of the last window: how long tasks waited while every worker was busy.
  WaitingTime Waiting() const;
  // Times a worker polled for work, and tasks one took at the end of a poll
  // without being woken: what the poll budget costs and what it saves.
  uint64_t polls() const { return polls_.load(std::memory_order_relaxed); }
  uint64_t polled_tasks() const { return polled_tasks_.load(std::memory_order_relaxed); }
  // Times a sleeping worker was woken and found no task (another took it).
  uint64_t empty_wakeups() const { return empty_wakeups_.load(std::memory_order_relaxed); }

 private:
  struct Item {
    uint64_t id;
    uint64_t cost;
    Task task;
  };
  struct Flow {
    double pass = 0;
    uint32_t weight = 1;
    std::deque<Item> items;
  };

  void Run();
  // Whether a worker whose last wait for a task took `waited` polls now.
  bool ShouldPoll(std::chrono::steady_clock::duration waited) const;
  // Spins without the lock until a task is queued (true) or `until` passes.
  bool PollUntil(std::chrono::steady_clock::time_point until) const;
  // Requires mu_. Tells the window whether a task waits with every worker busy.
  void UpdateWaitingLocked();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<FlowKey, Flow> flows_;
  size_t queued_ = 0;
  size_t running_ = 0;  // workers running a task
  // Workers polling: counted under mu_ from before they let it go until they
  // hold it again, so that every task Submit leaves to them is seen.
  size_t polling_ = 0;
  size_t nthreads_;
  NowNs now_ns_;
  mutable WaitingWindow window_;
  uint64_t next_id_ = 1;
  std::atomic<size_t> waiting_{0};  // mirrors queued_
  double vtime_ = 0;                // pass of the last task started
  // Set under mu_, and read without it by workers that poll.
  std::atomic<bool> stop_{false};
  const std::chrono::microseconds poll_;
  std::atomic<uint64_t> polls_{0};
  std::atomic<uint64_t> polled_tasks_{0};
  std::atomic<uint64_t> empty_wakeups_{0};
  std::vector<std::thread> workers_;
};

}  // namespace hz::coll::internal

#endif  // HZ_COLLECTIVES_SCHEDULER_H_
