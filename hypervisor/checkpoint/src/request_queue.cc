#include "request_queue.h"

#include <algorithm>
#include <utility>

namespace hz::checkpoint {

RequestQueue::RequestQueue(unsigned per_tenant) : per_tenant_(per_tenant == 0 ? 1 : per_tenant) {
  sem_init(&wake_, /*pshared=*/0, 0);
}

RequestQueue::~RequestQueue() {
  Pushed* p = pushed_.exchange(nullptr, std::memory_order_acquire);
  while (p != nullptr) delete std::exchange(p, p->next);
  sem_destroy(&wake_);
}

void RequestQueue::Push(const TenantId& tenant, std::function<void()> fn) {
  auto* p = new Pushed{tenant, std::move(fn), pushed_.load(std::memory_order_relaxed)};
  while (!pushed_.compare_exchange_weak(p->next, p, std::memory_order_release,
                                        std::memory_order_relaxed)) {
  }
  sem_post(&wake_);  // one piece: one thread
}

void RequestQueue::TakePushedLocked() {
  // The list holds the latest first: turned round, the earliest goes first.
  Pushed* latest = pushed_.exchange(nullptr, std::memory_order_acquire);
  Pushed* earliest = nullptr;
  while (latest != nullptr) {
    Pushed* p = std::exchange(latest, latest->next);
    p->next = std::exchange(earliest, p);
  }
  while (earliest != nullptr) {
    Pushed* p = std::exchange(earliest, earliest->next);
    Lane& lane = lanes_[p->tenant];
    if (lane.work.empty()) turns_.push_back(p->tenant);
    lane.work.push_back(std::move(p->fn));
    delete p;
  }
}

const TenantId* RequestQueue::NextLocked() {
  auto it = std::find_if(turns_.begin(), turns_.end(),
                         [this](const TenantId& t) { return lanes_[t].running < per_tenant_; });
  if (it == turns_.end()) return nullptr;
  // Served now: its next piece waits for every other tenant's turn.
  TenantId tenant = *it;
  turns_.erase(it);
  turns_.push_back(tenant);
  return &turns_.back();
}

void RequestQueue::Serve() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    TakePushedLocked();
    const TenantId* next = NextLocked();
    if (next == nullptr) {
      if (stop_ && turns_.empty()) {
        sem_post(&wake_);  // the next idle thread returns too
        return;
      }
      // Nothing this thread may start. Work pushed from here on has posted
      // the semaphore, so the wait returns for it. A piece that ends makes
      // at most one more startable, which the thread that ran it takes on
      // its next pass.
      l.unlock();
      while (sem_wait(&wake_) != 0) {
      }  // EINTR
      l.lock();
      continue;
    }
    const TenantId tenant = *next;
    Lane& lane = lanes_[tenant];
    std::function<void()> fn = std::move(lane.work.front());
    lane.work.pop_front();
    if (lane.work.empty()) turns_.pop_back();
    ++lane.running;
    l.unlock();
    fn();
    fn = nullptr;  // what it held goes outside the lock too
    l.lock();
    Lane& done = lanes_[tenant];
    --done.running;
    if (done.work.empty() && done.running == 0) lanes_.erase(tenant);
  }
}

void RequestQueue::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  sem_post(&wake_);  // each thread that returns wakes the next
}

}  // namespace hz::checkpoint
