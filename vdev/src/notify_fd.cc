#include "notify_fd.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "blocking_call_guard.h"

namespace vdev {

NotifyResult NotifyEventFd(int fd) {
  // Still non-blocking, so a full counter fails the write with EAGAIN.
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || !(flags & O_NONBLOCK)) return NotifyResult::kRefused;
  const uint64_t one = 1;
  ssize_t n;
  {
    // The front-end may clear O_NONBLOCK right after the check: a write
    // that blocks is interrupted (EINTR) and refused like the check's case.
    BlockingCallGuard guard;
    n = write(fd, &one, sizeof(one));
  }
  if (n == sizeof(one)) return NotifyResult::kSent;
  return errno == EAGAIN ? NotifyResult::kPending : NotifyResult::kRefused;
}

bool DrainEventFd(int fd) {
  uint64_t count = 0;
  iovec iov{&count, sizeof(count)};
  if (preadv2(fd, &iov, 1, -1, RWF_NOWAIT) >= 0 || errno != EOPNOTSUPP) return true;
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || !(flags & O_NONBLOCK)) return false;
  BlockingCallGuard guard;  // as in NotifyEventFd: the flag may go after the check
  return read(fd, &count, sizeof(count)) >= 0 || errno != EINTR;
}

bool IsEventFd(int fd) {
  char link[64];
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
  if (n <= 0) return false;
  link[n] = 0;
  return std::strcmp(link, "anon_inode:[eventfd]") == 0;
}

void SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0 && !(flags & O_NONBLOCK)) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

}  // namespace vdev
