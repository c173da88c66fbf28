// The way back onto one device's executor from other threads: engine
// completions, event notifications, the service's drain.
//
// Engines call back on their own threads, possibly after the VM disconnected
// or its device was destroyed. Callbacks therefore hold a
// std::weak_ptr<DeviceLink> and post through it: the work runs on the
// connection's executor if the device still exists when it gets there, and
// is dropped otherwise. The device detaches the link when its connection
// goes and closes it before it is destroyed.
#ifndef HZ_SERVICE_DEVICE_LINK_H_
#define HZ_SERVICE_DEVICE_LINK_H_

#include <memory>
#include <mutex>
#include <utility>

#include "vdev/device.h"

namespace hz::service {

class DeviceLink : public std::enable_shared_from_this<DeviceLink> {
 public:
  // The executor of a new connection (executor).
  void Attach(vdev::DeviceContext* ctx) {
    std::lock_guard<std::mutex> lock(mu_);
    ctx_ = ctx;
  }
  // The connection is gone: nothing more can be posted (executor).
  void Detach() { Attach(nullptr); }
  // The device is being destroyed: work posted earlier is dropped (executor).
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    ctx_ = nullptr;
    alive_ = false;
  }

  // Runs fn on the executor unless the device is gone by then. Returns false,
  // dropping fn, when no connection is attached now. Any thread.
  template <typename Fn>
  bool Post(Fn fn) {
    return Post(std::move(fn), [] {});
  }

  // As above; exactly one of fn (on the executor) and dropped (on whichever
  // thread finds that fn will not run) runs.
  template <typename Fn, typename Dropped>
  bool Post(Fn fn, Dropped dropped) {
    {
      // Held while posting, so that the context cannot go meanwhile.
      std::lock_guard<std::mutex> lock(mu_);
      if (ctx_ != nullptr) {
        ctx_->Post([self = shared_from_this(), fn = std::move(fn), dropped = std::move(dropped)] {
          if (self->alive()) {
            fn();
          } else {
            dropped();
          }
        });
        return true;
      }
    }
    dropped();
    return false;
  }

  // Post through a reference that does not keep the link alive.
  template <typename Fn>
  static bool Post(const std::weak_ptr<DeviceLink>& weak, Fn fn) {
    return Post(weak, std::move(fn), [] {});
  }
  template <typename Fn, typename Dropped>
  static bool Post(const std::weak_ptr<DeviceLink>& weak, Fn fn, Dropped dropped) {
    std::shared_ptr<DeviceLink> link = weak.lock();
    if (!link) {
      dropped();
      return false;
    }
    return link->Post(std::move(fn), std::move(dropped));
  }

 private:
  // The device is destroyed on its executor, where posted work runs, so it
  // cannot go between this check and the work.
  bool alive() {
    std::lock_guard<std::mutex> lock(mu_);
    return alive_;
  }

  std::mutex mu_;
  vdev::DeviceContext* ctx_ = nullptr;
  bool alive_ = true;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_DEVICE_LINK_H_
