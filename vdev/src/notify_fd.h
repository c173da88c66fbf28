// Notifications to and from a front-end's eventfds (call, error and kick).
//
// The back-end makes these fds non-blocking when it receives them, but the
// open file is shared with the front-end, which can take O_NONBLOCK back and
// fill the counter to its maximum (0xfffffffffffffffe). A plain write() of
// the next notification would then never return, and the thread serving
// this connection (and other VMs) would be stuck for good. NotifyEventFd
// refuses an fd that is no longer non-blocking; on one that is, a full
// counter fails the write with EAGAIN (the front-end has a notification
// pending anyway). A front-end that clears O_NONBLOCK and fills the counter
// between that check and the write blocks the write for at most two ticks of
// the BlockingCallGuard watchdog (about 100 ms), which then interrupts it;
// the fd is refused.
#ifndef VDEV_SRC_NOTIFY_FD_H_
#define VDEV_SRC_NOTIFY_FD_H_

namespace vdev {

enum class NotifyResult {
  kSent,     // the counter was incremented
  kPending,  // the counter is full: the front-end is notified already
  kRefused,  // the fd was made blocking (or is unusable): nothing written
};

NotifyResult NotifyEventFd(int fd);

// Empties a kick eventfd's counter without ever blocking, also when the
// front-end cleared O_NONBLOCK and emptied the counter itself between the
// readiness event and this read (preadv2 with RWF_NOWAIT; kernels without it
// for eventfds fall back to reading only while O_NONBLOCK is still set, with
// the same watchdog as NotifyEventFd). Returns false when the fd was made
// blocking on such a kernel.
bool DrainEventFd(int fd);

// Kick, call and err fds must be eventfds: a socket whose peer is gone would
// raise SIGPIPE on the notification write, a full pipe would block the
// connection's thread, and a file would never become readable. (An eventfd's
// file flags stay shared with the front-end, which can make it blocking
// again: the functions above read and write them so that this never blocks.)
bool IsEventFd(int fd);

// Sets O_NONBLOCK on an fd the back-end waits on or writes to.
void SetNonBlocking(int fd);

}  // namespace vdev

#endif  // VDEV_SRC_NOTIFY_FD_H_
