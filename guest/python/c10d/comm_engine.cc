// SPDX-License-Identifier: Apache-2.0
#include "comm_engine.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace hz::c10d {

struct CommEngine::State {
  struct Pending {
    std::vector<hz_request_t*> requests;
    size_t next = 0;  // first request not yet completed
    int rc = HZ_OK;
    DoneFn done;
    Clock::time_point posted;
    Clock::time_point deadline;
    bool aborted_here = false;  // this operation's deadline aborted the communicator
  };
  using PendingPtr = std::shared_ptr<Pending>;

  State(std::shared_ptr<py::DeviceContext> c, hz_comm_t* h, Options o)
      : ctx(std::move(c)), options(o), comm(h) {}

  int PostOne(const RequestFn& fn, size_t own, hz_request_t** request);
  bool Abort();
  bool Step(Pending& p);
  void StepAsideForPosters();
  PendingPtr TakeFront();
  void Finish(const PendingPtr& p);
  void Release();
  PendingPtr NextForCompletionThread();
  static void Run(const std::shared_ptr<State>& s);

  std::shared_ptr<py::DeviceContext> ctx;
  const Options options;
  std::mutex post_mu;         // one poster at a time: operations keep call order
  std::mutex comm_mu;         // guards comm, held only around the calls that use it
  hz_comm_t* comm = nullptr;  // nullptr once aborted (hz_comm_abort frees it)

  std::mutex mu;  // everything below
  // Three conditions, so that each change wakes only who waits for it: a
  // synchronous collective then costs no switch to the completion thread.
  std::condition_variable cv_post;    // room for requests; posters done
  std::condition_variable cv_drive;   // the driver's role or an operation finished
  std::condition_variable cv_thread;  // work for the completion thread
  std::deque<PendingPtr> inflight;    // queued in posting order
  size_t outstanding = 0;             // requests of queued operations not yet completed
  int posting = 0;                    // posters inside an hz_*_async call
  int helpers = 0;                    // callers driving (or waiting to) in Help
  bool driving = false;               // someone holds the front operation
  bool thread_idle = false;           // the completion thread sleeps until woken
  Clock::time_point last_posted;
  bool stop = false;
  bool aborted = false;
};

CommEngine::CommEngine(std::shared_ptr<py::DeviceContext> ctx, hz_comm_t* comm, Options options)
    : state_(std::make_shared<State>(std::move(ctx), comm, options)) {
  std::thread([s = state_] { State::Run(s); }).detach();
}

CommEngine::~CommEngine() {
  State& s = *state_;
  bool busy;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    busy = !s.inflight.empty();
  }
  // This rank is leaving: operations still waiting for peers would only
  // time out, so fail them on every rank now.
  if (busy) s.Abort();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stop = true;
  }
  s.cv_thread.notify_all();
  // The completion thread drains what was aborted and exits on its own.
  std::lock_guard<std::mutex> lock(s.comm_mu);
  if (s.comm != nullptr) hz_comm_destroy(std::exchange(s.comm, nullptr));
}

// ---- posting ----------------------------------------------------------------------

// Posts one request once there is room; `own` requests of the caller's
// operation are already posted (not yet counted in `outstanding`).
int CommEngine::State::PostOne(const RequestFn& fn, size_t own, hz_request_t** request) {
  for (;;) {
    size_t before;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv_post.wait(lock, [&] {
        return aborted || outstanding == 0 || outstanding + own < options.max_inflight_requests;
      });
      before = outstanding;
      ++posting;
    }
    int rc;
    {
      std::lock_guard<std::mutex> lock(comm_mu);
      rc = comm != nullptr ? fn(comm, request) : HZ_EABORTED;
    }
    std::unique_lock<std::mutex> lock(mu);
    if (--posting == 0) cv_post.notify_all();
    // The request queue is full (other users of the device share it): wait
    // for one of ours to complete, unless none is in flight.
    if (rc != HZ_ENOMEM || before == 0) return rc;
    cv_post.wait(lock, [&] { return aborted || outstanding < before; });
  }
}

void CommEngine::Submit(std::vector<RequestFn> requests, DoneFn done,
                        std::chrono::milliseconds timeout) {
  State& s = *state_;
  auto p = std::make_shared<State::Pending>();
  p->done = std::move(done);
  p->posted = Clock::now();
  p->deadline = p->posted + (timeout.count() > 0 ? timeout : s.options.timeout) + s.options.grace;
  std::lock_guard<std::mutex> order(s.post_mu);
  for (const RequestFn& fn : requests) {
    hz_request_t* r = nullptr;
    p->rc = s.PostOne(fn, p->requests.size(), &r);
    if (p->rc != HZ_OK) break;  // requests already posted are still waited for
    p->requests.push_back(r);
  }
  bool wake;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.outstanding += p->requests.size();
    s.inflight.push_back(std::move(p));
    s.last_posted = Clock::now();
    wake = s.thread_idle;
  }
  if (wake) s.cv_thread.notify_one();
}

bool CommEngine::Abort() {
  return state_->Abort();
}

bool CommEngine::State::Abort() {
  {
    std::lock_guard<std::mutex> lock(comm_mu);
    if (comm == nullptr) return false;
    // hz_comm_abort frees the handle; requests already posted stay valid and
    // complete with HZ_EABORTED.
    hz_comm_abort(std::exchange(comm, nullptr));
  }
  std::lock_guard<std::mutex> lock(mu);
  aborted = true;
  cv_post.notify_all();
  return true;
}

// ---- driving ----------------------------------------------------------------------

void CommEngine::State::StepAsideForPosters() {
  std::unique_lock<std::mutex> lock(mu);
  cv_post.wait(lock, [&] { return posting == 0; });
}

// One slice of driving p; true once every request of p completed (or was given up).
bool CommEngine::State::Step(Pending& p) {
  if (p.next >= p.requests.size()) return true;
  StepAsideForPosters();
  hz_request_t* req = p.requests[p.next];
  const int rc = hz_test_wait(req, static_cast<int>(options.slice.count()));
  if (rc != HZ_EPENDING) {
    hz_request_free(req);
    if (p.rc == HZ_OK) p.rc = rc;
    ++p.next;
    std::lock_guard<std::mutex> lock(mu);
    --outstanding;
    cv_post.notify_all();
    return p.next >= p.requests.size();
  }
  if (Clock::now() < p.deadline) return false;
  if (p.rc == HZ_OK) p.rc = HZ_ETIMEDOUT;
  if (!p.aborted_here) {
    // The device should have reported its own timeout by now: fail the
    // operation on every rank rather than wait on.
    p.aborted_here = true;
    p.deadline = Clock::now() + options.grace;
    Abort();
    return false;
  }
  // Not even the abort completed it: the device is not answering. The
  // remaining requests are abandoned (never freed) rather than waited on.
  std::lock_guard<std::mutex> lock(mu);
  outstanding -= p.requests.size() - p.next;
  p.next = p.requests.size();
  cv_post.notify_all();
  return true;
}

CommEngine::State::PendingPtr CommEngine::State::TakeFront() {
  if (driving || inflight.empty()) return nullptr;
  driving = true;
  return inflight.front();
}

// Completes the front operation; the driver keeps its role until the
// callback ran, so operations complete in posting order.
void CommEngine::State::Finish(const PendingPtr& p) {
  {
    std::lock_guard<std::mutex> lock(mu);
    inflight.pop_front();
  }
  try {
    p->done(p->rc);
  } catch (...) {
    // DoneFn reports through the operation's Work; nothing may escape here.
  }
  Release();
}

void CommEngine::State::Release() {
  {
    std::lock_guard<std::mutex> lock(mu);
    driving = false;
  }
  cv_drive.notify_all();
}

// The next operation for the completion thread to drive, or null when it
// should exit. It takes an operation nobody drives once the hand-off time
// passed (a caller waiting for it synchronously drives it without a thread
// switch), looking every `poll` while operations come, and sleeps until
// woken once they stop coming.
CommEngine::State::PendingPtr CommEngine::State::NextForCompletionThread() {
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    const auto now = Clock::now();
    if (inflight.empty()) {
      if (stop) return nullptr;
      if (now - last_posted < options.idle) {
        cv_thread.wait_for(lock, options.poll);
      } else {
        thread_idle = true;
        cv_thread.wait(lock, [&] { return stop || !inflight.empty(); });
        thread_idle = false;
      }
      continue;
    }
    if (!driving && helpers == 0) {
      const auto ready = inflight.front()->posted + options.handoff;
      if (now >= ready || stop) return TakeFront();
      cv_thread.wait_until(lock, ready);
      continue;
    }
    cv_thread.wait_for(lock, options.poll);  // someone else drives; look again later
  }
}

void CommEngine::State::Run(const std::shared_ptr<State>& s) {
  while (PendingPtr p = s->NextForCompletionThread()) {
    bool complete = false;
    while (!(complete = s->Step(*p))) {
      std::lock_guard<std::mutex> lock(s->mu);
      if (s->helpers > 0) break;  // a caller waits: let it drive
    }
    if (complete) {
      s->Finish(p);
    } else {
      s->Release();
    }
  }
}

void CommEngine::Help(const std::function<bool()>& finished, Clock::time_point until) {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.helpers;
  }
  while (!finished() && Clock::now() < until) {
    State::PendingPtr p;
    {
      std::unique_lock<std::mutex> lock(s.mu);
      p = s.TakeFront();
      if (p == nullptr) {
        // Another driver holds the front operation: wait for it to finish one.
        s.cv_drive.wait_until(lock, std::min(until, Clock::now() + s.options.slice));
        continue;
      }
    }
    bool complete = false;
    while (!(complete = s.Step(*p)) && Clock::now() < until) {
    }
    if (complete) {
      s.Finish(p);
    } else {
      s.Release();
    }
  }
  std::lock_guard<std::mutex> lock(s.mu);
  --s.helpers;
  // Operations left for nobody: the completion thread takes them on its next look.
}

}  // namespace hz::c10d
