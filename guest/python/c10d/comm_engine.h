// SPDX-License-Identifier: Apache-2.0
// One communicator of the torch.distributed backend, without torch: posts
// operations in the order the process group is called (the order every rank
// shares, so the device matches them by sequence number), and completes them.
//
// Posting happens on the caller's thread: it is quick and keeps call order
// without a hand-off. Completing is done by whoever waits: a caller blocked
// in Work.wait() drives the device itself (no thread hand-off on the
// synchronous path), and otherwise a completion thread of the engine does,
// so that futures complete with nobody waiting (DDP's buckets). One driver
// at a time; libharmonaize's wait holds the request queue while it blocks,
// so drivers wait in short slices and step aside whenever a caller posts.
//
// Nothing waits forever: each operation has a deadline (its timeout plus a
// grace period for the device's own timeout to fire first); past it the
// engine aborts the communicator on every rank, and an operation the device
// still does not complete after that is failed and its requests abandoned.
// In-flight requests are bounded (the request queue has a fixed number of
// slots): a caller beyond the bound waits for earlier operations.
#ifndef HZ_GUEST_PYTHON_C10D_COMM_ENGINE_H_
#define HZ_GUEST_PYTHON_C10D_COMM_ENGINE_H_

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "device_context.h"

namespace hz::c10d {

// Posts one request (an hz_*_async call) and returns HZ_OK or its error.
using RequestFn = std::function<int(hz_comm_t* comm, hz_request_t** request)>;
// Runs once every request of an operation completed: HZ_OK or the first error.
using DoneFn = std::function<void(int rc)>;

class CommEngine {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    std::chrono::milliseconds timeout{std::chrono::minutes(30)};  // per operation
    // Extra time for the device to report its own timeout before the engine aborts.
    std::chrono::milliseconds grace{std::chrono::seconds(10)};
    // Longest a poster waits for a driver to step aside.
    std::chrono::milliseconds slice{1};
    // How long the completion thread leaves a new operation to a caller that
    // may be about to wait for it (far less than any operation takes).
    std::chrono::microseconds handoff{200};
    // While operations come, the completion thread looks for ones nobody
    // drives this often, instead of being woken for each (a thread switch per
    // operation is what makes small synchronous collectives slow on a busy
    // host); after `idle` without operations it sleeps until the next.
    std::chrono::microseconds poll{1000};
    std::chrono::milliseconds idle{100};
    // Requests posted and not yet completed (a queue has 256 descriptors,
    // two per request, shared with other users of the device).
    size_t max_inflight_requests = 64;
  };

  // Takes ownership of comm (from hz_comm_init).
  CommEngine(std::shared_ptr<py::DeviceContext> ctx, hz_comm_t* comm, Options options);
  // Aborts what is still in flight (this rank is leaving), and destroys the
  // communicator once nothing of it is in flight.
  ~CommEngine();
  CommEngine(const CommEngine&) = delete;
  CommEngine& operator=(const CommEngine&) = delete;

  // Posts an operation's requests on the calling thread, in call order.
  // timeout <= 0: the default.
  void Submit(std::vector<RequestFn> requests, DoneFn done,
              std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Drives in-flight operations on the calling thread until finished()
  // (checked between steps, without the engine's lock) or `until` passes.
  void Help(const std::function<bool()>& finished, Clock::time_point until);
  // Aborts the communicator on every rank: pending and later operations fail
  // with HZ_EABORTED. Returns false when it was already aborted.
  bool Abort();

 private:
  // Everything the completion thread touches, shared with it, so that the
  // engine may be destroyed from a completion callback on that very thread.
  struct State;

  std::shared_ptr<State> state_;
};

}  // namespace hz::c10d

#endif  // HZ_GUEST_PYTHON_C10D_COMM_ENGINE_H_
