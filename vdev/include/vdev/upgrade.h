// Live upgrade of a vhost-user back-end, in the manner of nginx's binary
// upgrade: the running process starts its successor with one end of a Unix
// socket pair, and hands it every listening socket and front-end connection
// (with guest memory, eventfds and ring positions: session_snapshot.h) over
// that socket (handoff.h). Front-ends keep their connections and never see a
// disconnect; what they post meanwhile is served by the successor.
//
// The old process only freezes once the successor has started and said which
// snapshot versions it reads, so the pause tenants see is the hand-over
// itself, not the successor's start-up. Until the successor confirms that it
// serves, the old process can still thaw and carry on: a successor that fails
// to start, reads another snapshot version, refuses the snapshot or does not
// answer in time is killed, and nothing changed for the front-ends.
#ifndef VDEV_UPGRADE_H_
#define VDEV_UPGRADE_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vdev/server.h"
#include "vdev/session_snapshot.h"

namespace vdev {

// The option a successor is started with: the descriptor of its end of the
// hand-over channel follows it.
inline constexpr char kHandoffFdOption[] = "--handoff-fd";

struct UpgradeOptions {
  std::string binary;             // the successor program
  std::vector<std::string> args;  // its arguments; "--handoff-fd N" is appended
  // The successor's hello (its start-up), the old process's freeze (chains
  // in flight), and the successor's confirmation that it serves.
  std::chrono::milliseconds start_timeout{10000};
  std::chrono::milliseconds freeze_timeout{2000};
  std::chrono::milliseconds serve_timeout{10000};
};

struct UpgradeResult {
  std::string error;  // empty: the successor serves; abandon and exit
  pid_t successor = -1;
  // How long front-ends were not served: from the freeze to the successor's
  // confirmation.
  std::chrono::microseconds paused{0};
  // Sessions the successor could not rebuild (it closed them).
  std::vector<std::string> lost;
};

// The application's part of the snapshot, asked for once every server is
// frozen: it sets snapshot->application_state and adds its own descriptors
// to fds, naming them in snapshot->application_fds. An error refuses the
// hand-over (the servers thaw).
using ApplicationExport = std::function<Error(SnapshotFds& fds, Snapshot* snapshot)>;

// Old process. Runs on a thread that is not the servers' io_context's. On
// success the servers are abandoned (Server::Abandon); the caller exits
// without stopping them. On failure every server serves again.
UpgradeResult HandOver(std::span<Server* const> servers, const ApplicationExport& application,
                       const UpgradeOptions& options);

// Successor process, started with --handoff-fd.
class Takeover {
 public:
  explicit Takeover(int channel_fd);
  ~Takeover();
  Takeover(const Takeover&) = delete;
  Takeover& operator=(const Takeover&) = delete;

  // Says which versions it reads and receives the snapshot. On error the
  // predecessor was told (when it could be) and keeps serving: exit.
  std::string Receive(std::chrono::milliseconds timeout);
  const Snapshot& snapshot() const { return snapshot_; }
  // The application's descriptor named at position i of
  // snapshot().application_fds, once; invalid after that.
  UniqueFd TakeApplicationFd(size_t i);

  // Starts each server from its record, or normally (Server::Start) when the
  // snapshot has none for its path, and confirms to the predecessor (from
  // the io_context) once every session was rebuilt; the predecessor then
  // exits. Records no server claims, and sessions that cannot be rebuilt,
  // are closed (their front-ends lose the device, as with a restart) and
  // logged. Returns false with *error when some server did not start.
  bool Serve(std::span<Server* const> servers, std::string* error);

 private:
  UniqueFd channel_;
  Snapshot snapshot_;
  std::shared_ptr<std::vector<UniqueFd>> fds_;
  struct Pending;
  std::shared_ptr<Pending> pending_;
};

}  // namespace vdev

#endif  // VDEV_UPGRADE_H_
