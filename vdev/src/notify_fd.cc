#include "notify_fd.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace vdev {

NotifyResult NotifyEventFd(int fd) {
  // Still non-blocking, so a full counter fails the write with EAGAIN.
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || !(flags & O_NONBLOCK)) return NotifyResult::kRefused;
  const uint64_t one = 1;
  if (write(fd, &one, sizeof(one)) == sizeof(one)) return NotifyResult::kSent;
  return errno == EAGAIN ? NotifyResult::kPending : NotifyResult::kRefused;
}

bool DrainEventFd(int fd) {
  uint64_t count = 0;
  iovec iov{&count, sizeof(count)};
  if (preadv2(fd, &iov, 1, -1, RWF_NOWAIT) >= 0 || errno != EOPNOTSUPP) return true;
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || !(flags & O_NONBLOCK)) return false;
  (void)!read(fd, &count, sizeof(count));
  return true;
}

}  // namespace vdev
