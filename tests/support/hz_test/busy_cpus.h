// Threads of the calling process that keep every CPU it may run on busy
// until destroyed: a host whose cores all have other work (vCPUs on the
// service's cores), for tests of what bulk work does there. At nice 5 by
// default: far enough above the kernel's idle class to starve it (1/112 of
// a CPU is left to an idle-class thread), yet giving way to other tests'
// threads at nice 0, which keep three quarters of a CPU. The constructor
// returns once every thread spins, so that none is still starting up (and
// holding a lock of the allocator's) when the caller forks.
#ifndef HZ_TEST_BUSY_CPUS_H_
#define HZ_TEST_BUSY_CPUS_H_

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

namespace hz::testing {

class BusyCpus {
 public:
  explicit BusyCpus(int nice = 5) {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    sched_getaffinity(0, sizeof(cpus), &cpus);
    for (int i = 0; i < CPU_COUNT(&cpus); ++i) {
      threads_.emplace_back([this, nice] {
        setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), nice);
        spinning_.fetch_add(1);
        while (!stop_.load(std::memory_order_relaxed)) {
        }
      });
    }
    while (spinning_.load() < threads_.size()) std::this_thread::yield();
  }
  ~BusyCpus() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
  }
  BusyCpus(const BusyCpus&) = delete;
  BusyCpus& operator=(const BusyCpus&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::atomic<size_t> spinning_{0};
  std::vector<std::thread> threads_;
};

}  // namespace hz::testing

#endif  // HZ_TEST_BUSY_CPUS_H_
