// One front-end connection: a Unix stream socket read into a MessageReader,
// a Session that handles the messages, and the kick eventfd watches and
// busy-poll loop the Session asks for, all on one strand (see server.h).
#ifndef VDEV_SRC_CONNECTION_H_
#define VDEV_SRC_CONNECTION_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "server_journal.h"
#include "vdev/message.h"
#include "vdev/session.h"

namespace vdev {

// How much unread reply data a connection may pile up, and for how long.
struct ReplyLimits {
  size_t max_queued_bytes = 256 * 1024;
  std::chrono::milliseconds drain_timeout{2000};
};

class Connection final : public std::enable_shared_from_this<Connection>, public SessionHost {
 public:
  using Socket = boost::asio::local::stream_protocol::socket;

  Connection(boost::asio::io_context& io, Socket socket, std::unique_ptr<Device> device,
             SessionOptions options, std::string name, std::function<void()> on_closed,
             ReplyLimits reply_limits = {}, bool one_thread_io = false);
  ~Connection() override;

  // Starts the session and reading; call once, right after construction.
  void Start();
  // Closes the connection from any thread (posted onto the strand).
  void Close(std::string reason);

  // Live upgrade, on the strand (Run posts there; server.cc waits for it).
  // Freeze stops reading messages (wherever the stream stands: a partial
  // message is handed over) and serving rings; chains in flight and a
  // pending GET_VRING_BASE still finish.
  void Run(std::function<void(Connection&)> fn);
  void Freeze();
  bool Quiescent() const { return session_.Quiescent(); }
  // Writes the frozen, quiescent connection into *out; from then on no
  // reply is sent (the successor sends what is left).
  Error Export(ConnectionRecord* out, SnapshotFds* fds);
  // The hand-over did not happen: serve again.
  void Thaw();
  // The successor serves this connection: let go without a word.
  void Abandon();
  // Instead of Start(): takes over a predecessor's connection (on the
  // strand); done gets an empty string, or why the session could not be
  // rebuilt (the connection is then closed).
  // With recover, the record is a crashed predecessor's journal
  // (Session::Restore).
  void Resume(ConnectionRecord record, std::shared_ptr<std::vector<UniqueFd>> fds,
              std::function<void(const Error&)> done, bool recover = false);

  // Crash recovery (crash_recovery.h): from Start or Resume on, the server's
  // record in journal (its path, listening socket listener and this
  // connection) is written again after every message and every change of
  // the device's durable state, and without the connection once it closes.
  // Call before Start or Resume.
  void SetJournal(std::shared_ptr<ServerJournal> journal, int listener);

  // SessionHost.
  void Post(std::function<void()> fn) override;
  void WatchKick(uint16_t queue, int fd) override;
  void UnwatchKick(uint16_t queue) override;
  void SetPolling(bool on) override;
  void StateChanged() override { WriteJournal(); }

 private:
  struct KickWatch {
    explicit KickWatch(boost::asio::io_context& io, int fd) : sd(io, fd) {}
    boost::asio::posix::stream_descriptor sd;
    uint64_t generation = 0;
  };

  void WaitReadable();
  // Calls `ready` on the strand once the socket can `what`; closes on error.
  void WaitSocket(Socket::wait_type what, void (Connection::*ready)());
  void OnReadable();
  // Serves the message the reader holds whole: journal, reply, close or a
  // stop that waits for the device. False when reading stops here. replay:
  // a crashed process had read it (Session::Replay).
  bool HandleMessage(bool replay = false);
  // Sends what the socket takes now and queues the rest (never blocks);
  // false when the connection was closed for it.
  bool SendReply(std::vector<uint8_t> bytes);
  void WaitWritable();
  void OnWritable();
  void ArmReplyTimer();
  // Handler epilogue: answers a GET_VRING_BASE that waited for in-flight
  // chains once they are all completed (or timed_out).
  void MaybeFinishStop(bool timed_out = false);
  // Runs what Post was given, as on the strand.
  void RunPosted(const std::function<void()>& fn);
  void ArmKick(uint16_t queue, uint64_t generation);
  void SchedulePoll();
  // Busy-polls the session's polled rings for one bounded slice.
  void PollSlice();
  void DoClose(const std::string& reason);
  // Writes the server's record with this connection (without it once closed).
  void WriteJournal();
  // Lets go of everything on this side; end_session ends the session
  // (Disconnect, or Abandon after a hand-over).
  void Release(void (Session::*end_session)());

  boost::asio::io_context& io_;
  boost::asio::strand<boost::asio::io_context::executor_type> strand_;
  // Crash recovery: the server's journal, and its listening socket. Before
  // session_: a device being destroyed with the session may still report a
  // change, and WriteJournal must find journal_ (reset by then) alive.
  std::shared_ptr<ServerJournal> journal_;
  int listener_fd_ = -1;
  bool journal_failed_ = false;  // logged once
  bool resuming_ = false;        // a half-rebuilt session is not written
  Socket socket_;
  Session session_;
  MessageReader reader_;
  std::string name_;
  std::function<void()> on_closed_;
  std::vector<std::unique_ptr<KickWatch>> kicks_;
  uint64_t kick_generation_ = 0;
  bool polling_ = false;
  bool poll_scheduled_ = false;
  bool closed_ = false;
  bool read_armed_ = false;   // a socket read wait is pending
  bool write_armed_ = false;  // a socket write wait is pending
  bool frozen_ = false;       // Freeze(): read nothing more
  bool exported_ = false;     // Export(): send nothing more
  // Outgoing replies the socket did not take yet; front() is partly sent.
  const ReplyLimits reply_limits_;
  // io_ runs on one thread only (ServerOptions::one_thread_io): what a
  // handler of this thread posts here is held to its end (held_posts.h).
  const bool one_thread_io_;
  std::deque<std::vector<uint8_t>> out_;
  size_t out_offset_ = 0;  // bytes of out_.front() already sent
  size_t out_bytes_ = 0;   // unsent bytes in out_
  bool write_waiting_ = false;
  boost::asio::steady_timer reply_timer_;
  uint64_t reply_timer_gen_ = 0;
  // GET_VRING_BASE waiting for in-flight chains: reading is paused.
  boost::asio::steady_timer stop_timer_;
  bool stop_waiting_ = false;
  uint64_t stop_timer_gen_ = 0;
};

}  // namespace vdev

#endif  // VDEV_SRC_CONNECTION_H_
