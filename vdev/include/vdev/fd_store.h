// Descriptors kept outside the back-end process, so that the process started
// after it crashed gets them back: systemd's file descriptor store. A service
// sends a descriptor with sd_notify "FDSTORE=1" and a name (FDNAME=); systemd
// holds it while the process dies and restarts, and hands every stored one to
// the next process as LISTEN_FDS, named in LISTEN_FDNAMES (sd_listen_fds(3),
// sd_pid_notify_with_fds(3); the unit needs FileDescriptorStoreMax=). Kept
// there, a front-end's socket, its guest memory and its eventfds stay open,
// so QEMU never sees the back-end go.
//
// libsystemd speaks the protocol (the daemon links it already for sd_notify),
// rather than a second implementation of the datagram format here.
#ifndef VDEV_FD_STORE_H_
#define VDEV_FD_STORE_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "vdev/message.h"

namespace vdev {

class FdStore {
 public:
  virtual ~FdStore() = default;
  // Keeps a copy of fd under name; the caller keeps its own. Names are the
  // caller's to keep unique (systemd keeps two descriptors of one name).
  virtual Error Store(std::string_view name, int fd) = 0;
  // Closes the stored copies under name.
  virtual void Remove(std::string_view name) = 0;
};

// The store of the systemd service this process runs as (NOTIFY_SOCKET is
// set), or nullptr when there is none.
std::shared_ptr<FdStore> SystemdFdStore();

// A name systemd accepts (FDNAME=): 1 to 255 printable ASCII characters, no
// colon (LISTEN_FDNAMES separates names with colons).
bool ValidFdName(std::string_view name);

// The descriptors the service manager handed this process at start, by name
// (LISTEN_FDS and LISTEN_FDNAMES, for this pid only), made close-on-exec; the
// variables are unset, so that children do not take them too. Empty when
// there are none. Several under one name: the last wins, the others close.
std::map<std::string, UniqueFd> TakeStoredFds();

}  // namespace vdev

#endif  // VDEV_FD_STORE_H_
