// How a connection thread runs its io_context: it sleeps in the reactor
// when there is nothing to do, and after handling something it may keep
// polling (a non-blocking epoll_wait per pass) for a while, so that a
// rank's next request or a completion that follows closely is served
// without waking the thread, which costs tens of microseconds on an idle
// CPU. The price is the thread's CPU time while it polls, so the window is
// bounded and ends by itself once nothing comes:
//   - every connection thread polls `base` ([service] connection_poll_us)
//     after its last piece of work;
//   - a handler may ask for a longer window for the current burst with
//     KeepPolling (a low-latency communicator's operations, SPEC §7.3.2,
//     within the tenant's latency_poll_us).
#ifndef HZ_SERVICE_CONNECTION_LOOP_H_
#define HZ_SERVICE_CONNECTION_LOOP_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#include <boost/asio/io_context.hpp>

namespace hz::service {

// What one connection thread did (the `counters` command shows them): how
// often it went to sleep, and how many polling passes found nothing to do,
// which is the CPU it spent waiting for more.
struct ConnectionLoopStats {
  std::atomic<uint64_t> sleeps{0};
  std::atomic<uint64_t> idle_polls{0};
};

// Runs io until it is stopped (see above).
void RunConnectionLoop(boost::asio::io_context& io, std::chrono::microseconds base,
                       ConnectionLoopStats* stats = nullptr);

// From a handler running on a connection loop: keep polling at least
// `window` after the current piece of work (the longest request of the
// burst wins). Elsewhere it does nothing.
void KeepPolling(std::chrono::microseconds window);

// Whether the calling thread runs a connection loop.
bool OnConnectionLoop();

}  // namespace hz::service

#endif  // HZ_SERVICE_CONNECTION_LOOP_H_
