// A bound on the few system calls the back-end makes on files it shares with
// a front-end (the eventfds of a ring), which the front-end can turn into
// calls that never return.
//
// NotifyEventFd checks that a call fd is still non-blocking before it writes,
// but a front-end can clear O_NONBLOCK and fill the counter between the check
// and the write; eventfds have no RWF_NOWAIT for writes to close that window.
// So the write runs inside a BlockingCallGuard: a watchdog thread looks at
// every guarded thread once a tick (kWatchdogTick), and a thread it finds in
// the same guarded call on two looks in a row is sent InterruptSignal(). The
// signal's handler does nothing and is installed without SA_RESTART, so the
// blocked call fails with EINTR, and the caller refuses the fd as it would
// one that was made blocking before the check. A thread is stuck for at most
// two ticks, where before it was stuck for good.
//
// The watchdog sleeps for good once a whole tick passes without a guarded
// call, so an idle process has no thread waking every tick; the next guarded
// call wakes it, and the bound is two ticks from then.
//
// Cost per guarded call (each wraps a system call): two stores to a
// thread-local counter, the first sequentially consistent, and a load of the
// watchdog's sleep flag (and a futex wake after a quiet spell). A thread is
// registered with the watchdog on its first guarded call and unregistered
// when it exits. If the application already handles InterruptSignal(), the
// guard leaves it alone and only warns, once, that calls are not bounded.
#ifndef VDEV_SRC_BLOCKING_CALL_GUARD_H_
#define VDEV_SRC_BLOCKING_CALL_GUARD_H_

#include <chrono>
#include <string>

namespace vdev {

// SIGRTMIN + 5: a real-time signal that nothing else in the project uses.
// (glibc keeps the ones it needs below SIGRTMIN.)
int InterruptSignal();
inline constexpr std::chrono::milliseconds kWatchdogTick{50};

// Where the guard reports, once per cause, that guarded calls are not
// bounded. Without a sink the message goes to stderr: the front-end, which a
// tenant library links, has no logger. The back-end's Session routes it to
// the back-end's log.
using GuardWarningSink = void (*)(const std::string& message);
void SetGuardWarningSink(GuardWarningSink sink);

// Marks the calling thread as inside a call the watchdog may interrupt, for
// the guard's lifetime. Guards do not nest.
class BlockingCallGuard {
 public:
  BlockingCallGuard();
  ~BlockingCallGuard();
  BlockingCallGuard(const BlockingCallGuard&) = delete;
  BlockingCallGuard& operator=(const BlockingCallGuard&) = delete;

  // Whether guarded calls in this process are bounded (the handler is
  // installed). False only when the application owns InterruptSignal().
  static bool Bounded();

  struct Slot;  // the watchdog's view of one thread (private to the .cc)

 private:
  Slot* slot_;  // this thread's, or null when calls are not bounded
};

}  // namespace vdev

#endif  // VDEV_SRC_BLOCKING_CALL_GUARD_H_
