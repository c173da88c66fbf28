// A stand-in for the event bus's state writer (EventBusOptions' write hook):
// writes go to disk through WriteFileAtomic, but are held while the test
// holds them and fail while it makes them fail, so that tests can see what
// waits for a cursor write and what a failed one leaves behind.
#ifndef HZ_TESTS_UNIT_EVENTS_STATE_WRITES_H_
#define HZ_TESTS_UNIT_EVENTS_STATE_WRITES_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

#include "hz/common/file.h"
#include "hz/common/status.h"

namespace hz::events::testing {

class StateWrites {
 public:
  Status Write(const std::string& path, const std::string& contents, bool sync) {
    std::unique_lock<std::mutex> lock(mu_);
    waiting_++;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    waiting_--;
    Status s = failing_ ? Status::IoError("disk full") : WriteFileAtomic(path, contents, sync);
    writes_++;
    cv_.notify_all();
    return s;
  }
  void Hold() { Set(&open_, false); }
  void Release() { Set(&open_, true); }
  void Fail(bool failing) { Set(&failing_, failing); }
  // True once a write waits on the hold (false after a hang-sized wait).
  bool WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return waiting_ > 0; });
  }
  int writes() {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }

 private:
  void Set(bool* flag, bool value) {
    std::lock_guard<std::mutex> lock(mu_);
    *flag = value;
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  bool failing_ = false;
  int waiting_ = 0;
  int writes_ = 0;
};

}  // namespace hz::events::testing

#endif  // HZ_TESTS_UNIT_EVENTS_STATE_WRITES_H_
