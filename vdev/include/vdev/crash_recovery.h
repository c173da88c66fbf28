// Crash recovery of a vhost-user back-end: the process started after this
// one was killed or crashed serves every front-end on, with no disconnect.
// QEMU's generic vhost-user device cannot reconnect to a new back-end, so the
// connections must never close: under systemd each server keeps its sockets,
// guest memory and eventfds in the unit's fd store (fd_store.h), with a
// journal of each session (ServerOptions::fd_store). After a crash systemd
// restarts the service and hands the store back, and CrashRecovery rebuilds
// every server from its journal:
//   - the listening socket and the front-end's connection, with everything
//     negotiated on it (features, memory table, ring addresses, eventfds);
//   - each ring where the crashed process stood: chains it had taken and not
//     completed are served again, once; completions it had published stay
//     (ring_journal.h); what the driver posted while no process ran is served;
//   - the device's durable state (Device::DurableState / RecoverState);
//   - a vhost-user message the crashed process had read in part or whole and
//     not finished, a GET_VRING_BASE waiting for its ring's chains included:
//     the next process serves it (Session::Replay).
// What is lost: a reply the crashed process had worked out and not yet
// written (a front-end waiting for it waits on), and the device's state that
// is not durable (the device says what a tenant sees then).
//
// A live upgrade (upgrade.h) needs none of this: there the old process hands
// everything over itself, and nothing is served twice.
#ifndef VDEV_CRASH_RECOVERY_H_
#define VDEV_CRASH_RECOVERY_H_

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vdev/fd_store.h"
#include "vdev/server.h"

namespace vdev {

class CrashRecovery {
 public:
  // stored: the descriptors the service manager handed back
  // (TakeStoredFds()); store: where the servers go on keeping them.
  CrashRecovery(std::shared_ptr<FdStore> store, std::map<std::string, UniqueFd> stored);
  ~CrashRecovery();
  CrashRecovery(const CrashRecovery&) = delete;
  CrashRecovery& operator=(const CrashRecovery&) = delete;

  // A descriptor the application stored itself under name (a lock, a
  // listening socket of its own), once; invalid when there is none. Before
  // Serve, which removes what nobody took from the store.
  UniqueFd Take(const std::string& name);

  // Starts each server from its journal, or with Start() when it has none.
  // A session that cannot be rebuilt is closed (its front-end loses the
  // device, as with any restart) and logged. Journals no server claims, and
  // stored descriptors nothing named or took, are removed from the store.
  // False with *error when some server did not start.
  bool Serve(std::span<Server* const> servers, std::string* error);

 private:
  struct Journal;
  // The descriptors j's record names, in its order, taken from the store; a
  // session that lost one is dropped from the record (the listener stays).
  std::shared_ptr<std::vector<UniqueFd>> TakeNamed(Journal& j, const std::string& path);
  std::shared_ptr<FdStore> store_;
  std::map<std::string, UniqueFd> stored_;
  std::vector<std::unique_ptr<Journal>> journals_;
};

}  // namespace vdev

#endif  // VDEV_CRASH_RECOVERY_H_
