#include "request_queue.h"

#include <algorithm>

namespace hz::checkpoint {

void RequestQueue::Push(const TenantId& tenant, std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> l(mu_);
    Lane& lane = lanes_[tenant];
    if (lane.work.empty()) turns_.push_back(tenant);
    lane.work.push_back(std::move(fn));
  }
  cv_.notify_all();
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
    const TenantId* next = nullptr;
    cv_.wait(l, [&] { return (next = NextLocked()) != nullptr || (stop_ && turns_.empty()); });
    if (next == nullptr) return;
    const TenantId tenant = *next;
    Lane& lane = lanes_[tenant];
    std::function<void()> fn = std::move(lane.work.front());
    lane.work.pop_front();
    if (lane.work.empty()) turns_.pop_back();
    ++lane.running;
    l.unlock();
    fn();
    l.lock();
    Lane& done = lanes_[tenant];
    --done.running;
    if (done.work.empty() && done.running == 0) lanes_.erase(tenant);
    cv_.notify_all();
  }
}

void RequestQueue::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

}  // namespace hz::checkpoint
