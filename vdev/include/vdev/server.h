// vdev::Server: serves one vhost-user socket path with a Device per front-end
// connection.
//
// Threading model
// ---------------
// The Server runs on the io_context it is given; run that io_context on one
// or more threads. Each accepted connection gets its own strand (an Asio
// executor that runs one handler at a time, in order), and everything about
// that connection runs there: message reads and replies, kick eventfd waits,
// the busy-poll loop, and every Device callback. A Device therefore needs no
// locking for vdev calls, and Queue methods must only be called from those
// callbacks or from functions passed to DeviceContext::Post, which is safe
// from any thread (it posts onto the strand). Connections never share a
// strand, so a slow, busy-polling or failing connection does not stall or
// affect another one beyond sharing the io_context's threads.
//
// Busy-poll queues are served by a handler that spins on the connection's
// strand while at least one such queue runs: it checks the avail indices
// without waiting for kicks, for a slice of about 50 us, then re-posts itself
// so messages, kicks, completions and other connections get their turn
// between slices. It keeps one io_context thread busy, so give busy-polling
// servers their own io_context (and thread) when latency of other work
// matters.
//
// Replies never block the thread: each connection queues what its socket
// does not take (bounded, see ServerOptions), so a front-end that stops
// reading costs the others nothing.
//
// An accept that fails (the process ran out of descriptors) is retried with
// a growing delay (listener.h), so the socket neither dies nor spins.
//
// One connection per socket path: a second front-end connecting while one is
// active is refused (accepted and closed at once, with a log line). In client
// mode the server connects to the path and reconnects after a disconnect.
#ifndef VDEV_SERVER_H_
#define VDEV_SERVER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "vdev/device.h"
#include "vdev/fd_store.h"
#include "vdev/listener.h"
#include "vdev/session.h"
#include "vdev/session_snapshot.h"

namespace vdev {

struct ServerOptions {
  enum class Mode { kServer, kClient };
  Mode mode = Mode::kServer;
  SessionOptions session;
  // Client mode: delay between connection attempts.
  std::chrono::milliseconds reconnect_interval{200};
  // Replies are written without blocking; what the socket does not take is
  // queued per connection. A front-end that lets more than this pile up
  // unread, or reads nothing for reply_drain_timeout while replies wait, is
  // disconnected (with a log line). Front-ends wait for each reply, so a
  // well-behaved one never gets near either bound.
  size_t max_queued_reply_bytes = 256 * 1024;
  std::chrono::milliseconds reply_drain_timeout{2000};
  // Server mode, one front-end per socket: a front-end that connects while
  // the previous connection is still being torn down (its peer just closed,
  // as when a VM or tool reconnects at once) waits up to this long for the
  // hand-over instead of being refused. One waits at most; others are refused.
  std::chrono::milliseconds handover_timeout{1000};
  // Server mode: a front-end is taken on at most once per this interval;
  // one that connects sooner waits in the listen backlog until it is due.
  // Setting up and tearing down a connection costs the thread that serves
  // it (and every other VM on that thread) some milliseconds, so a VM that
  // reconnects in a loop is held to a bounded share of it. 0: no pacing.
  std::chrono::milliseconds min_connect_interval{0};
  // Server mode: who may connect. The socket file has this mode and group
  // from the moment it appears (listener.h).
  SocketAccess access;
  // The io_context runs on exactly one thread (the caller's promise). A
  // connection's handler then runs what it posts to connections of that
  // io_context as it ends, not behind the io_context's queue: a completion
  // of an operation finished on the spot reaches every VM of the thread
  // without a pass through the reactor (src/held_posts.h).
  bool one_thread_io = false;
  // Crash recovery (crash_recovery.h): keep a journal of this server, and
  // every descriptor it names, in this store (systemd's: SystemdFdStore()),
  // so that the process started after a crash serves on. nullptr: none.
  std::shared_ptr<FdStore> fd_store;
};

class ServerJournal;

class Server {
 public:
  Server(boost::asio::io_context& io, std::string socket_path, DeviceFactory factory,
         ServerOptions options = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Server mode: binds and listens on the path (a stale socket file left by a
  // previous run is removed; any other file there is an error). Client mode:
  // starts connecting. Returns false with *error when it cannot start.
  bool Start(std::string* error);
  // Stops listening or reconnecting and closes the connection (asynchronously,
  // on its strand). Safe to call more than once, from the io_context's thread.
  void Stop();

  // --- Live upgrade (upgrade.h drives these). Any thread but the
  // io_context's: each waits for work it posts there. ---
  // Stops accepting (front-ends that connect wait in the backlog, which the
  // successor inherits) and freezes the connection, then waits up to
  // timeout for it to be quiescent (no chain in flight). On failure, Thaw.
  Error Freeze(std::chrono::milliseconds timeout);
  // Writes the frozen server into *out, duplicating its descriptors.
  Error Export(ServerRecord* out, SnapshotFds* fds);
  // The hand-over did not happen: accept and serve again.
  void Thaw();
  // The successor serves: let go of the listener and the connection without
  // unlinking the socket path or writing anything to the front-end.
  void Abandon();
  // Instead of Start(): serves what a predecessor handed over (record.path
  // must be this server's path; fds are the snapshot's, record names which).
  // done runs once, on the io_context, with the result of rebuilding the
  // connection's session (at once when there is none). Returns false with
  // *error when the listener cannot be taken over.
  bool StartFrom(const ServerRecord& record, std::shared_ptr<std::vector<UniqueFd>> fds,
                 std::function<void(const Error&)> done, std::string* error);

  // Instead of Start(), after a crash (crash_recovery.h drives this): serves
  // on from journal, which holds record; as StartFrom, with each ring going
  // on from its ring journal. The journal stays this server's.
  bool Recover(const ServerRecord& record, std::shared_ptr<std::vector<UniqueFd>> fds,
               std::shared_ptr<ServerJournal> journal, std::function<void(const Error&)> done,
               std::string* error);

  const std::string& path() const { return path_; }
  // True while a front-end is connected.
  bool connected() const;
  // Connections accepted (or made) so far; refused extra ones not counted.
  uint64_t connections() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::string path_;
};

}  // namespace vdev

#endif  // VDEV_SERVER_H_
