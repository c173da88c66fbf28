// Graceful shutdown, bounded: every wait lasts at most shutdown_timeout_ms,
// so SIGTERM ends the process even when a connection thread never answers
// (a handler stuck in a system call). Such a thread is named in the log,
// skipped and left running; stopped_cleanly() then tells main to end the
// process without destroying the service the thread may still use.
#include <condition_variable>
#include <future>
#include <mutex>

#include <boost/asio/post.hpp>

#include "control_server.h"
#include "hz/common/thread_priority.h"
#include "hz/service/service.h"
#include "metrics_server.h"
#include "spdlog/spdlog.h"
#include "vdev/server.h"

namespace hz::service {

// A function posted to a connection thread. The waiter may give up on it:
// a call that has not started by then never runs, so it cannot touch what
// the waiter owned.
struct Service::ThreadCall {
  enum class State { kQueued, kRunning, kDone, kAbandoned };
  std::mutex mu;
  std::condition_variable cv;
  State state = State::kQueued;
};

void Service::PostToConnectionThread(size_t i, std::function<void()> fn) {
  if (i < vdev_threads_.size()) boost::asio::post(vdev_threads_[i]->io, std::move(fn));
}

std::shared_ptr<Service::ThreadCall> Service::PostCall(size_t i, std::function<void()> fn) {
  auto call = std::make_shared<ThreadCall>();
  boost::asio::post(vdev_threads_[i]->io, [call, fn = std::move(fn)] {
    {
      std::lock_guard<std::mutex> lock(call->mu);
      if (call->state == ThreadCall::State::kAbandoned) return;
      call->state = ThreadCall::State::kRunning;
    }
    fn();
    std::lock_guard<std::mutex> lock(call->mu);
    call->state = ThreadCall::State::kDone;
    call->cv.notify_all();
  });
  return call;
}

bool Service::WaitCall(ThreadCall& call, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(call.mu);
  auto done = [&] { return call.state == ThreadCall::State::kDone; };
  if (deadline == Clock::time_point::max()) {
    call.cv.wait(lock, done);
    return true;
  }
  if (call.cv.wait_until(lock, deadline, done)) return true;
  if (call.state == ThreadCall::State::kQueued) call.state = ThreadCall::State::kAbandoned;
  return false;
}

bool Service::OnVdevThread(size_t i, std::function<void()> fn, Clock::time_point deadline) {
  return WaitCall(*PostCall(i, std::move(fn)), deadline);
}

void Service::MarkStuck(size_t i, const char* step) {
  if (vdev_threads_[i]->stuck) return;
  vdev_threads_[i]->stuck = true;
  stuck_threads_++;
  spdlog::error("event=shutdown_thread_stuck thread={} step={} timeout_ms={}", i, step,
                config_.shutdown_timeout_ms);
}

void Service::RequestStop() {
  boost::asio::post(io_, [this] {
    if (stopped_) return;
    Shutdown();
    io_.stop();
  });
}

void Service::Shutdown() {
  // An upgrade under way ends first, within its own bounds: it either
  // thawed every session, or handed them over and this process must leave.
  if (upgrade_thread_.joinable()) upgrade_thread_.join();
  if (successor_ > 0) LeaveAfterUpgrade(successor_);
  stopped_ = true;
  // 1. Stop accepting: new requests fail with ESHUTDOWN from now on and the
  //    config space says DRAINING.
  draining_ = true;
  spdlog::info("event=draining");
  if (hooks_.stopping) hooks_.stopping();
  if (control_) control_->Stop();
  if (host_commands_) host_commands_->Stop();
  // The other hosts learn at once that this one is going.
  if (cluster_) cluster_->Stop();
  // 2. The engine fails everything that waits with kShutdown; running
  //    transfers stop after their current block.
  if (coll_) coll_->Shutdown();
  // 3. Each device answers what is left with ESHUTDOWN, on its own strand.
  DrainDevices();
  // 4. Close the VM sockets and connections, then the threads.
  CloseConnections();
  StopConnectionThreads();
  // Its jobs are short and post only to devices, which are gone: unless a
  // stuck connection thread may still hand it one.
  if (background_ && stopped_cleanly()) {
    background_->join();
    background_.reset();
  }
  if (metrics_server_) metrics_server_->Stop();
  StopEngines();
  // Stopped for good: a next start takes nothing back (the VM servers
  // emptied their part of the store as they closed).
  ForgetStoredLockAndListeners();
  spdlog::info("event=stopped clean={}", stopped_cleanly());
}

void Service::DrainDevices() {
  struct Waiter {
    std::mutex mu;
    std::condition_variable cv;
    size_t left = 0;
  };
  // One ticket per device, released when the posted drain is destroyed:
  // after it ran, or unrun when the VM's connection closed first (a VM that
  // disconnects just before SIGTERM). Counting runs instead would wait out
  // the whole timeout for such a VM.
  struct Ticket {
    explicit Ticket(std::shared_ptr<Waiter> waiter) : w(std::move(waiter)) {
      std::lock_guard<std::mutex> lock(w->mu);
      w->left++;
    }
    ~Ticket() {
      std::lock_guard<std::mutex> lock(w->mu);
      if (--w->left == 0) w->cv.notify_all();
    }
    std::shared_ptr<Waiter> w;
  };
  auto w = std::make_shared<Waiter>();
  devices_.ForEach([&](HzDevice& d) {
    auto ticket = std::make_shared<Ticket>(w);
    d.PostToDevice([ticket](HzDevice& dev) { dev.Drain(); });
  });
  {
    std::unique_lock<std::mutex> lock(w->mu);
    if (!w->cv.wait_for(lock, std::chrono::milliseconds(config_.shutdown_timeout_ms),
                        [&] { return w->left == 0; })) {
      spdlog::warn("event=drain_timeout devices_left={}", w->left);
    }
  }
  uint64_t in_flight = 0;
  devices_.ForEach([&](HzDevice& d) { in_flight += d.in_flight(); });
  spdlog::info("event=drained in_flight={}", in_flight);
}

void Service::CloseConnections() {
  using ServerFn = void (*)(std::unique_ptr<vdev::Server>&);
  // Each server is stopped and destroyed on the thread that serves it; all
  // threads at once, so one that does not answer costs the timeout once.
  auto for_each_server = [this](ServerFn fn, const char* step) {
    const Clock::time_point deadline =
        Clock::now() + std::chrono::milliseconds(config_.shutdown_timeout_ms);
    std::vector<std::pair<size_t, std::shared_ptr<ThreadCall>>> calls;
    for (size_t i = 0; i < vdev_threads_.size(); ++i) {
      if (vdev_threads_[i]->stuck) continue;
      calls.emplace_back(i, PostCall(i, [this, i, fn] {
                           std::lock_guard<std::mutex> lock(mu_);
                           for (auto& [path, b] : bindings_) {
                             if (b.thread == i && b.server) fn(b.server);
                           }
                         }));
    }
    for (auto& [i, call] : calls) {
      if (!WaitCall(*call, deadline)) MarkStuck(i, step);
    }
  };
  for_each_server([](std::unique_ptr<vdev::Server>& s) { s->Stop(); }, "close");
  // Stop() closes each connection asynchronously, on its strand; a device
  // reports when its connection closed and its session ended.
  if (!devices_.WaitAllClosed(std::chrono::milliseconds(config_.shutdown_timeout_ms))) {
    spdlog::warn("event=close_timeout");
  }
  for_each_server([](std::unique_ptr<vdev::Server>& s) { s.reset(); }, "release");
}

void Service::StopConnectionThreads() {
  for (auto& t : vdev_threads_) {
    t->work.reset();
    t->io.stop();
  }
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(config_.shutdown_timeout_ms);
  for (size_t i = 0; i < vdev_threads_.size(); ++i) {
    std::unique_ptr<VdevThread>& t = vdev_threads_[i];
    if (!t->stuck && t->exited.wait_until(deadline) == std::future_status::ready) {
      t->thread.join();
      continue;
    }
    MarkStuck(i, "exit");
    // Still inside a handler, on its io_context: neither can go.
    t->thread.detach();
    (void)t.release();
  }
  vdev_threads_.clear();
}

void Service::StopEngines() {
  auto stop = [this] {
    StopMaintenance();  // it tells tenants through the engines
    coll_.reset();
    // The provider publishes to the bus: it goes first, once no notice
    // thread asks it which VMs a notice concerns.
    if (engines_) engines_->SetNoticeScope(nullptr);
    if (provider_) provider_->Stop();
    provider_.reset();
    engines_.reset();
  };
  if (stopped_cleanly()) {
    stop();
    return;
  }
  // A stuck handler may hold an engine's lock: stopping the engines (which
  // commits the checkpoints being persisted) gets the timeout too.
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> stopped = done->get_future();
  std::thread stopper = NamedThread("hz-stopper", [stop, done] {
    stop();
    done->set_value();
  });
  if (stopped.wait_for(std::chrono::milliseconds(config_.shutdown_timeout_ms)) ==
      std::future_status::ready) {
    stopper.join();
  } else {
    spdlog::error("event=shutdown_engines_stuck timeout_ms={}", config_.shutdown_timeout_ms);
    stopper.detach();
  }
}

}  // namespace hz::service
