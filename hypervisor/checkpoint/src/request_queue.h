// Work for the engine's request threads, queued per tenant. Tenants with
// queued work are served in turn (round robin), each tenant's work in the
// order it was submitted, and no tenant runs more than `per_tenant` pieces at
// once: a tenant whose requests wait (for its staging memory, for the disk)
// holds at most that many threads, and the others serve everyone else.
#ifndef HZ_CHECKPOINT_REQUEST_QUEUE_H_
#define HZ_CHECKPOINT_REQUEST_QUEUE_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>

#include "hz/common/tenant_id.h"

namespace hz::checkpoint {

class RequestQueue {
 public:
  explicit RequestQueue(unsigned per_tenant) : per_tenant_(per_tenant == 0 ? 1 : per_tenant) {}

  void Push(const TenantId& tenant, std::function<void()> fn);
  // Runs queued work until Stop() was called and nothing is left: the loop
  // of one request thread.
  void Serve();
  // Queued work still runs; then every Serve() returns.
  void Stop();

 private:
  struct Lane {
    std::deque<std::function<void()>> work;
    unsigned running = 0;
  };
  // The next tenant in turn that may start a piece, or nullptr.
  const TenantId* NextLocked();

  const unsigned per_tenant_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<TenantId, Lane> lanes_;
  std::deque<TenantId> turns_;  // tenants with queued work, in serving order
  bool stop_ = false;
};

}  // namespace hz::checkpoint

#endif  // HZ_CHECKPOINT_REQUEST_QUEUE_H_
