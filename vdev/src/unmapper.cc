#include "unmapper.h"

#include <pthread.h>
#include <sys/mman.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

namespace vdev {

namespace {

// Unmaps waiting beyond this many are done by the caller.
constexpr size_t kMaxQueued = 256;

class Unmapper {
 public:
  Unmapper() {
    std::thread([this] { Run(); }).detach();
  }

  void Queue(void* addr, size_t len) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.size() < kMaxQueued) {
        queue_.push_back({addr, len});
        ++queued_;
        cv_.notify_all();
        return;
      }
    }
    munmap(addr, len);
  }

  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t target = queued_;
    cv_.wait(lock, [&] { return done_ >= target; });
  }

 private:
  struct Mapping {
    void* addr;
    size_t len;
  };

  void Run() {
    pthread_setname_np(pthread_self(), "vdev-unmapper");  // as top -H and perf show it
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return !queue_.empty(); });
      Mapping m = queue_.front();
      queue_.pop_front();
      lock.unlock();
      munmap(m.addr, m.len);
      lock.lock();
      ++done_;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Mapping> queue_;
  uint64_t queued_ = 0;  // ever queued
  uint64_t done_ = 0;    // of those, unmapped
};

// Never destroyed: its thread runs until the process exits, and an unmap
// may be queued from a static destructor.
Unmapper& TheUnmapper() {
  static Unmapper* u = new Unmapper();
  return *u;
}

}  // namespace

void UnmapLater(void* addr, size_t len) {
  TheUnmapper().Queue(addr, len);
}

void WaitForUnmaps() {
  TheUnmapper().Wait();
}

}  // namespace vdev
