// CPU priority and name of the calling thread.
//
// The service runs bulk work (reductions, checkpoint copies and writes,
// region preparation) on threads of its own and serves requests on others.
// Bulk threads run at a higher nice value, so that on a host short of cores
// a thread serving any tenant's request takes the CPU from them at once:
// one tenant's bulk work then cannot delay another tenant's small requests.
// Tenants' shares of the bulk threads are the engines' own business
// (weights), not the kernel's.
#ifndef HZ_COMMON_THREAD_PRIORITY_H_
#define HZ_COMMON_THREAD_PRIORITY_H_

#include <memory>
#include <string>
#include <thread>
#include <utility>

namespace hz {

class IdleClassGuard;  // idle_class_guard.h

// A nice value past the kernel's 19 that asks for the kernel's idle
// scheduling class (SCHED_IDLE) instead. A thread at nice 19 still competes
// with a thread that wakes: the woken one may wait for it to use up its
// slice, and is not moved to its CPU. An idle-class thread runs only on a CPU
// no other thread wants, gives it up the moment one wakes there, and the
// kernel places woken threads on its CPU as on an idle one; on a host with
// every core busy it gets about a fifth of a nice-19 thread's share.
constexpr int kIdleClassNice = 20;

// Sets the calling thread's nice value (Linux keeps one per thread; threads
// it starts inherit it), or puts it in the idle class at kIdleClassNice
// (and at nice 19, which holds should the kernel refuse the class). Neither
// needs privilege; where setting it fails the thread runs as it was. 0
// leaves it alone.
void SetThisThreadNice(int nice);

// True while the calling thread is in the idle class (it may leave it:
// idle_class_guard.h lifts a starved thread out for a while).
bool ThisThreadInIdleClass();

// Names the calling thread, as ps -L, top -H, perf and
// /proc/<pid>/task/<tid>/comm show it, so that an operator can tell which of
// the service's threads takes the CPU. The kernel keeps 15 bytes; a longer
// name is cut.
void NameThisThread(const std::string& name);

// How a bulk thread is scheduled: at its nice value, or, with a guard and a
// nice value in 0..19, in the idle class until it starves, then at that nice
// value (idle_class_guard.h). A plain int is a nice value without a guard.
struct BulkPriority {
  BulkPriority(int nice_value = 0,  // NOLINT: implicit, from a plain nice value
               std::shared_ptr<IdleClassGuard> idle_guard = nullptr)
      : nice(nice_value), guard(std::move(idle_guard)) {}
  int nice;
  std::shared_ptr<IdleClassGuard> guard;
};

// Gives the calling thread its place (BulkPriority).
void SetThisThreadPriority(const BulkPriority& priority);

// A thread named `name` that runs fn at the given priority.
template <typename Fn>
std::thread ThreadAtNice(BulkPriority priority, std::string name, Fn fn) {
  return std::thread(
      [priority = std::move(priority), name = std::move(name), fn = std::move(fn)]() mutable {
        NameThisThread(name);
        SetThisThreadPriority(priority);
        fn();
      });
}

// A thread named `name` that runs fn at the priority of the thread starting it.
template <typename Fn>
std::thread NamedThread(std::string name, Fn fn) {
  return ThreadAtNice(0, std::move(name), std::move(fn));
}

}  // namespace hz

#endif  // HZ_COMMON_THREAD_PRIORITY_H_
