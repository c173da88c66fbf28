// Work for the engine's request threads, queued per tenant. Tenants with
// queued work are served in turn (round robin), each tenant's work in the
// order it was submitted, and no tenant runs more than `per_tenant` pieces at
// once: a tenant whose requests wait (for its staging memory, for the disk)
// holds at most that many threads, and the others serve everyone else.
//
// Push never waits. The connection threads that push work serve every VM's
// requests, and the request threads run at a lower priority: a connection
// thread waiting for a lock that a preempted request thread holds waited
// milliseconds, and every VM on it with it (noisy_neighbour_bench,
// ckpt_save_flood). Pushed work goes onto a lock-free list that the request
// threads take into their lanes under their own lock, and a POSIX semaphore
// (posting one neither locks nor waits) wakes them.
#ifndef HZ_CHECKPOINT_REQUEST_QUEUE_H_
#define HZ_CHECKPOINT_REQUEST_QUEUE_H_

#include <semaphore.h>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <mutex>

#include "hz/common/tenant_id.h"

namespace hz::checkpoint {

class RequestQueue {
 public:
  explicit RequestQueue(unsigned per_tenant);
  ~RequestQueue();
  RequestQueue(const RequestQueue&) = delete;
  RequestQueue& operator=(const RequestQueue&) = delete;

  // Any thread; takes no lock.
  void Push(const TenantId& tenant, std::function<void()> fn);
  // Runs queued work until Stop() was called and nothing is left: the loop
  // of one request thread.
  void Serve();
  // Queued work still runs; then every Serve() returns.
  void Stop();

 private:
  struct Pushed {
    TenantId tenant;
    std::function<void()> fn;
    Pushed* next;  // pushed earlier
  };
  struct Lane {
    std::deque<std::function<void()>> work;
    unsigned running = 0;
  };
  // Moves what was pushed into the lanes, in the order it was pushed.
  void TakePushedLocked();
  // The next tenant in turn that may start a piece, or nullptr.
  const TenantId* NextLocked();

  const unsigned per_tenant_;
  std::atomic<Pushed*> pushed_{nullptr};  // the latest first
  // Posted once per Push (and by Stop); a request thread with nothing it may
  // start waits on it. A post can find every thread busy: the thread that
  // takes it later then looks for work once more, and finds none or some.
  sem_t wake_;
  std::mutex mu_;  // the request threads' own
  std::map<TenantId, Lane> lanes_;
  std::deque<TenantId> turns_;  // tenants with queued work, in serving order
  bool stop_ = false;
};

}  // namespace hz::checkpoint

#endif  // HZ_CHECKPOINT_REQUEST_QUEUE_H_
