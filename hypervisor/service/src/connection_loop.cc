#include "hz/service/connection_loop.h"

#include <algorithm>

namespace hz::service {

namespace {

using Clock = std::chrono::steady_clock;

// The window the handlers of this thread's current burst asked for; only
// a connection loop's own thread reads or writes it.
thread_local bool t_on_loop = false;
thread_local std::chrono::microseconds t_requested{0};

}  // namespace

void KeepPolling(std::chrono::microseconds window) {
  if (t_on_loop) t_requested = std::max(t_requested, window);
}

bool OnConnectionLoop() {
  return t_on_loop;
}

void RunConnectionLoop(boost::asio::io_context& io, std::chrono::microseconds base,
                       ConnectionLoopStats* stats) {
  t_on_loop = true;
  while (!io.stopped()) {
    if (stats) stats->sleeps.fetch_add(1, std::memory_order_relaxed);
    t_requested = std::chrono::microseconds(0);
    if (io.run_one() == 0) break;  // sleeps until there is something to do
    if (base.count() == 0 && t_requested.count() == 0) continue;
    auto idle_since = Clock::now();
    // A handler may ask for more while the thread polls: read it each pass.
    while (!io.stopped()) {
      if (io.poll() != 0) {
        idle_since = Clock::now();
      } else {
        if (stats) stats->idle_polls.fetch_add(1, std::memory_order_relaxed);
        if (Clock::now() - idle_since >= std::max(base, t_requested)) break;
      }
    }
  }
  t_on_loop = false;
}

}  // namespace hz::service
