#include "scheduler.h"

#include <algorithm>
#include <chrono>

#include "hz/common/idle_class_guard.h"
#include "hz/common/spin.h"
#include "hz/common/thread_priority.h"

namespace hz::coll::internal {
namespace {
thread_local bool t_on_worker = false;

Scheduler::NowNs OrSteadyClock(Scheduler::NowNs now_ns) {
  if (now_ns) return now_ns;
  return [] {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
  };
}
}  // namespace

Scheduler::Scheduler(uint32_t threads, BulkPriority priority, uint64_t window_ns, NowNs now_ns,
                     std::chrono::microseconds poll)
    : nthreads_(std::max(threads, 1u)),
      now_ns_(OrSteadyClock(std::move(now_ns))),
      window_(window_ns, 10, now_ns_()),
      poll_(std::max(poll, std::chrono::microseconds::zero())) {
  workers_.reserve(nthreads_);
  for (size_t i = 0; i < nthreads_; ++i) {
    workers_.push_back(ThreadAtNice(priority, "hz-coll-" + std::to_string(i), [this] { Run(); }));
  }
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

bool Scheduler::OnWorker() {
  return t_on_worker;
}

WaitingTime Scheduler::Waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return window_.Measure(now_ns_());
}

void Scheduler::UpdateWaitingLocked() {
  const bool waiting = queued_ > 0 && running_ >= nthreads_;
  if (waiting != window_.waiting()) window_.SetWaiting(waiting, now_ns_());
}

Scheduler::Ticket Scheduler::Submit(FlowKey key, uint32_t weight, uint64_t cost, Task task) {
  Ticket ticket{key, 0};
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Flow& f = flows_[key];
    f.weight = std::max(weight, 1u);
    // A flow that was idle starts at the current virtual time: it gets its
    // share from now on, not credit for the time it had nothing to run.
    if (f.items.empty()) f.pass = std::max(f.pass, vtime_);
    ticket.id = next_id_++;
    f.items.push_back(Item{ticket.id, std::max<uint64_t>(cost, 1), std::move(task)});
    waiting_.store(++queued_, std::memory_order_relaxed);
    UpdateWaitingLocked();
    // A polling worker takes the task without a wake-up: it finds it in its
    // poll, or under the lock when its budget ends. Waking a sleeper as well
    // would cost this thread a system call, and the sleeper a trip onto a
    // CPU to find nothing.
    wake = queued_ > polling_;
  }
  if (wake) cv_.notify_one();
  return ticket;
}

bool Scheduler::Cancel(const Ticket& ticket) {
  Task dropped;  // destroyed outside the lock, like a task that ran
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto f = flows_.find(ticket.flow);
    if (f == flows_.end()) return false;
    auto& items = f->second.items;
    auto it = std::find_if(items.begin(), items.end(),
                           [&](const Item& item) { return item.id == ticket.id; });
    if (it == items.end()) return false;  // taken by a worker already
    dropped = std::move(it->task);
    items.erase(it);
    waiting_.store(--queued_, std::memory_order_relaxed);
    UpdateWaitingLocked();
  }
  return true;
}

size_t Scheduler::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_;
}

bool Scheduler::ShouldPoll(std::chrono::steady_clock::duration waited) const {
  // The class is checked last: it costs a system call.
  return poll_.count() > 0 && waited <= poll_ && ThisThreadInIdleClass();
}

bool Scheduler::PollUntil(std::chrono::steady_clock::time_point until) const {
  const bool ended = SpinWhile(
      [this] {
        return waiting_.load(std::memory_order_relaxed) == 0 &&
               !stop_.load(std::memory_order_relaxed);
      },
      until);
  // A worker kept off its CPU past the budget finds a task it did not poll
  // for: it would have slept, and a wake-up would have found it too.
  return ended && waiting_.load(std::memory_order_relaxed) != 0 &&
         std::chrono::steady_clock::now() < until;
}

void Scheduler::Run() {
  t_on_worker = true;
  std::chrono::steady_clock::duration waited =
      std::chrono::steady_clock::duration::max();  // a new worker does not poll
  auto idle_since = std::chrono::steady_clock::now();
  // Kept off its CPU while it polls, or once woken for a task another
  // worker took, a worker starves with nothing to run: its guard (if any)
  // does not lift it for that.
  IdleClassGuard::TaskWaiter task_waiter(&waiting_);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    task_waiter.BetweenTasks(true);
    bool found = false;
    if (queued_ == 0 && !stop_ && ShouldPoll(waited)) {
      ++polling_;
      lock.unlock();
      polls_.fetch_add(1, std::memory_order_relaxed);
      found = PollUntil(idle_since + poll_);
      lock.lock();
      --polling_;
    }
    bool slept = false;
    while (!stop_ && queued_ == 0) {
      if (slept) empty_wakeups_.fetch_add(1, std::memory_order_relaxed);
      slept = true;
      cv_.wait(lock);
    }
    task_waiter.BetweenTasks(false);
    if (queued_ == 0) return;  // stopping and drained
    if (found && !slept) polled_tasks_.fetch_add(1, std::memory_order_relaxed);
    waited = std::chrono::steady_clock::now() - idle_since;
    Flow* best = nullptr;
    for (auto& [key, f] : flows_) {
      if (!f.items.empty() && (best == nullptr || f.pass < best->pass)) best = &f;
    }
    if (best == nullptr) continue;  // unreachable: queued_ > 0
    Item item = std::move(best->items.front());
    best->items.pop_front();
    waiting_.store(--queued_, std::memory_order_relaxed);
    ++running_;
    UpdateWaitingLocked();
    vtime_ = best->pass;
    best->pass += static_cast<double>(item.cost) / best->weight;
    lock.unlock();
    item.task();
    item = Item{};  // destroy the task's captures outside the lock
    lock.lock();
    --running_;
    UpdateWaitingLocked();
    idle_since = std::chrono::steady_clock::now();
  }
}

}  // namespace hz::coll::internal
