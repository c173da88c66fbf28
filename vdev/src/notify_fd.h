// Notifications to a front-end's eventfd (call and error fds).
//
// The back-end makes these fds non-blocking when it receives them, but the
// open file is shared with the front-end, which can take O_NONBLOCK back and
// fill the counter to its maximum (0xfffffffffffffffe). A plain write() of
// the next notification would then never return, and the thread serving
// this connection (and other VMs) would be stuck for good. NotifyEventFd
// never blocks: it refuses an fd that is no longer non-blocking, and skips
// the write when the counter is full (the front-end has a notification
// pending anyway).
#ifndef VDEV_SRC_NOTIFY_FD_H_
#define VDEV_SRC_NOTIFY_FD_H_

namespace vdev {

enum class NotifyResult {
  kSent,     // the counter was incremented
  kPending,  // the counter is full: the front-end is notified already
  kRefused,  // the fd was made blocking (or is unusable): nothing written
};

NotifyResult NotifyEventFd(int fd);

}  // namespace vdev

#endif  // VDEV_SRC_NOTIFY_FD_H_
