// A VM whose guest takes its time to let go of a device, for the tests of
// detaches that must not hold anyone up meanwhile (the scheduler's and the
// service's).
#ifndef HZ_TESTS_SCHEDULER_SLOW_GUEST_ATTACHER_H_
#define HZ_TESTS_SCHEDULER_SLOW_GUEST_ATTACHER_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>

#include "hz/scheduler/domain_attacher.h"

namespace hz::scheduler::testing {

// Only bounds what would otherwise hang: a test that reaches it fails.
constexpr std::chrono::seconds kBound{10};

// A detach from kSlowVm blocks like a guest that has not answered the unplug
// request yet, until LetGo; then the device leaves, or stays (the guest never
// let go, as LibvirtAttacher reports after detach_wait). Other VMs let go at
// once.
class SlowGuestAttacher : public DomainAttacher {
 public:
  static constexpr const char* kSlowVm = "vm-slow";

  Status Attach(const std::string& /*domain*/, const std::string& bdf) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (attaches_left_ == 0) return Status::IoError("the VM refused the device");
    if (attaches_left_ > 0) --attaches_left_;
    attached_.insert(bdf);
    return Status::Ok();
  }
  // The VM takes `n` more devices, then refuses every other one.
  void RefuseAttachesAfter(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    attaches_left_ = n;
  }
  Status Detach(const std::string& domain, const std::string& bdf) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (domain == kSlowVm) {
      ++waiting_;
      changed_.notify_all();
      const bool answered =
          changed_.wait_for(lock, kBound, [this] { return let_go_ || stop_waiting_; });
      --waiting_;
      if (!answered) return Status::TimedOut("the test never let the guest go");
      if (!let_go_) {
        ++stopped_detaches_;
        return Status::Aborted("the service stopped waiting for the guest");
      }
      if (!outcome_.ok()) return outcome_;
    }
    attached_.erase(bdf);
    return Status::Ok();
  }

  // As LibvirtAttacher: a detach from kSlowVm no longer waits for the guest.
  void StopWaiting() override {
    std::lock_guard<std::mutex> lock(mu_);
    stop_waiting_ = true;
    changed_.notify_all();
  }
  // Detaches that ended because of StopWaiting, before the guest let go.
  int stopped_detaches() {
    std::lock_guard<std::mutex> lock(mu_);
    return stopped_detaches_;
  }

  // Until a detach from kSlowVm waits for its guest; false past kBound.
  bool WaitForSlowDetach() {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, kBound, [this] { return waiting_ > 0; });
  }
  // The guest answers: every waiting and later detach from kSlowVm returns
  // `outcome` (Ok: the device left the VM). Once only.
  void LetGo(Status outcome) {
    std::lock_guard<std::mutex> lock(mu_);
    if (let_go_) return;
    let_go_ = true;
    outcome_ = std::move(outcome);
    changed_.notify_all();
  }
  bool Attached(const std::string& bdf) {
    std::lock_guard<std::mutex> lock(mu_);
    return attached_.count(bdf) != 0;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int waiting_ = 0;
  int attaches_left_ = -1;  // -1: no limit
  bool let_go_ = false;
  bool stop_waiting_ = false;
  int stopped_detaches_ = 0;
  Status outcome_;
  std::set<std::string> attached_;
};

// Lets the slow guest go when a test ends, however it ends, so that no
// thread is left waiting; declared after the futures it unblocks.
class LetGoAtEnd {
 public:
  explicit LetGoAtEnd(SlowGuestAttacher* attacher) : attacher_(attacher) {}
  ~LetGoAtEnd() { attacher_->LetGo(Status::TimedOut("the test ended")); }
  LetGoAtEnd(const LetGoAtEnd&) = delete;
  LetGoAtEnd& operator=(const LetGoAtEnd&) = delete;

 private:
  SlowGuestAttacher* attacher_;
};

}  // namespace hz::scheduler::testing

#endif  // HZ_TESTS_SCHEDULER_SLOW_GUEST_ATTACHER_H_
