#include "connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include "held_posts.h"
#include "notify_fd.h"
#include "spdlog/spdlog.h"
#include "vdev/post_batch.h"

namespace vdev {

namespace asio = boost::asio;

namespace {

// Messages handled per socket wake-up before yielding to other handlers on
// the io_context (kicks, other connections).
constexpr int kMessagesPerWakeup = 64;
// Busy-poll slice: one handler spins over the polled rings for this long,
// then re-posts itself so socket messages, kicks, posted completions and other
// connections on the io_context get their turn. Re-posting goes through the
// reactor (an epoll_wait and the strand's bookkeeping, about a microsecond);
// a slice makes that a small fraction of the loop, while a control message
// still waits at most one slice.
constexpr auto kPollSlice = std::chrono::microseconds(50);
// Reading the clock (vDSO, tens of ns) every pass would cost more than an
// idle pass itself.
constexpr unsigned kPassesPerClockCheck = 64;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

Connection::Connection(asio::io_context& io, Socket socket, std::unique_ptr<Device> device,
                       SessionOptions options, std::string name, std::function<void()> on_closed,
                       ReplyLimits reply_limits, bool one_thread_io)
    : io_(io),
      strand_(asio::make_strand(io)),
      socket_(std::move(socket)),
      session_(std::move(device), this, std::move(options), name),
      name_(std::move(name)),
      on_closed_(std::move(on_closed)),
      reply_limits_(reply_limits),
      one_thread_io_(one_thread_io),
      reply_timer_(strand_),
      stop_timer_(strand_) {
  kicks_.resize(session_.num_queues());
}

Connection::~Connection() {
  // Nothing is journaled from here on: the connection is gone (or handed
  // over), whatever the device reports while it is destroyed.
  journal_.reset();
  // Normally closed already; when the io_context is torn down first, stop the
  // session while the members it calls back into still exist.
  if (!closed_) {
    closed_ = true;
    session_.Disconnect();
    for (auto& k : kicks_) {
      if (k) k->sd.release();
    }
  }
}

void Connection::Start() {
  asio::post(strand_, [self = shared_from_this()] {
    spdlog::info("vdev[{}]: front-end connected", self->name_);
    self->session_.Start();
    self->WriteJournal();
    self->WaitReadable();
  });
}

void Connection::Close(std::string reason) {
  asio::post(strand_,
             [self = shared_from_this(), reason = std::move(reason)] { self->DoClose(reason); });
}

void Connection::RunPosted(const std::function<void()>& fn) {
  if (closed_) return;
  {
    // A device's turn runs this way (Session::RunTurn), and the operations
    // it completes on the spot post their completions here.
    HeldPosts held;
    fn();
  }
  // Completions of a draining ring arrive this way.
  MaybeFinishStop();
}

void Connection::Post(std::function<void()> fn) {
  auto run = [self = shared_from_this(), fn = std::move(fn)] { self->RunPosted(fn); };
  if (one_thread_io_ && HeldPosts::Holding(io_)) {
    HeldPosts::Hold(std::move(run));
    return;
  }
  if (!PostBatch::Open()) {
    asio::post(strand_, std::move(run));
    return;
  }
  // The batch's handler runs on the connection thread, where dispatch enters
  // the strand at once (or queues run behind it, should another thread of
  // the io_context be in it).
  PostBatch::Post(io_, [strand = strand_, run = std::move(run)]() mutable {
    asio::dispatch(strand, std::move(run));
  });
}

void Connection::DoClose(const std::string& reason) {
  if (closed_) return;
  spdlog::info("vdev[{}]: connection closed: {}", name_, reason);
  // The session unwatches kicks (releasing the fds it owns) and stops rings.
  Release(&Session::Disconnect);
  WriteJournal();
  if (on_closed_) on_closed_();
}

void Connection::SetJournal(std::shared_ptr<ServerJournal> journal, int listener) {
  journal_ = std::move(journal);
  listener_fd_ = listener;
  if (journal_ == nullptr) return;
  std::vector<RingJournal*> rings;
  for (uint16_t i = 0; i < session_.num_queues() && i < kJournalMaxQueues; ++i) {
    rings.push_back(journal_->ring(i));
  }
  session_.SetRingJournals(rings);
}

void Connection::WriteJournal() {
  if (journal_ == nullptr || resuming_) return;
  ServerJournal::DescribeConnection describe;
  if (!closed_) {
    describe = [this](ConnectionRecord* r, FdIndex* fds) {
      r->socket = fds->Add(socket_.native_handle());
      session_.Describe(&r->session, fds);
      if (session_.StopPending()) {  // no message is read meanwhile
        const std::vector<uint8_t> stop = session_.PendingStopRequest();
        r->partial_message.assign(stop.begin(), stop.end());
        return;
      }
      r->partial_message = reader_.PartialBytes();
      for (const UniqueFd& fd : reader_.partial_fds()) r->partial_fds.push_back(fds->Add(fd.get()));
    };
  }
  Error e = journal_->WriteServer(name_, listener_fd_, describe);
  if (!e.empty() && !journal_failed_) {
    journal_failed_ = true;
    spdlog::error("vdev[{}]: the crash journal is not written: {}", name_, e);
  }
}

void Connection::Release(void (Session::*end_session)()) {
  closed_ = true;
  polling_ = false;
  stop_waiting_ = false;
  reply_timer_.cancel();
  stop_timer_.cancel();
  out_.clear();
  out_bytes_ = 0;
  (session_.*end_session)();
  for (auto& k : kicks_) {
    if (k) {
      k->sd.release();
      k.reset();
    }
  }
  // Closes this process's descriptor; after a hand-over the successor holds
  // the socket too.
  boost::system::error_code ec;
  socket_.close(ec);
}

void Connection::WaitReadable() {
  if (closed_ || read_armed_) return;
  read_armed_ = true;
  WaitSocket(Socket::wait_read, &Connection::OnReadable);
}

void Connection::WaitSocket(Socket::wait_type what, void (Connection::*ready)()) {
  socket_.async_wait(what, asio::bind_executor(strand_, [self = shared_from_this(), ready, what](
                                                            const boost::system::error_code& ec) {
                       (what == Socket::wait_read ? self->read_armed_ : self->write_armed_) = false;
                       if (self->closed_) return;
                       if (ec) {
                         self->DoClose("socket wait failed: " + ec.message());
                         return;
                       }
                       ((*self).*ready)();
                     }));
}

void Connection::OnReadable() {
  if (frozen_) return;  // Thaw() waits again
  const int fd = socket_.native_handle();
  alignas(8) uint8_t buf[sizeof(vu::Header) + vu::kMaxPayload];
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * vu::kMaxFds)];
  for (int handled = 0; !closed_ && !frozen_;) {
    size_t want = reader_.Want();
    struct iovec iov = {buf, want};
    struct msghdr mh = {};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof(control);
    ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        WaitReadable();
        return;
      }
      DoClose(std::string("recvmsg failed: ") + std::strerror(errno));
      return;
    }
    // Take ownership of every descriptor that arrived before judging anything,
    // so none leaks whatever happens next.
    std::vector<UniqueFd> fds;
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.emplace_back(received);
      }
    }
    if (mh.msg_flags & MSG_CTRUNC) {
      DoClose("too many file descriptors with one message (control data truncated)");
      return;
    }
    if (n == 0) {
      DoClose("front-end closed the socket");
      return;
    }
    if (Error e = reader_.Feed(buf, static_cast<size_t>(n), &fds); !e.empty()) {
      spdlog::error("vdev[{}]: {}", name_, e);
      DoClose("protocol error");
      return;
    }
    // What the front-end sent and this process has not acted on yet is in
    // the crash journal before anything is done with it: a process started
    // after a crash reads the rest of the message from the socket, or serves
    // the whole one, as this one would have.
    if (!reader_.Ready()) {
      if (reader_.Started()) WriteJournal();
      continue;
    }
    WriteJournal();
    if (!HandleMessage()) return;
    if (++handled == kMessagesPerWakeup) {
      asio::post(strand_, [self = shared_from_this()] {
        if (!self->closed_) self->OnReadable();
      });
      return;
    }
  }
}

bool Connection::HandleMessage(bool replay) {
  Session::Result r = replay ? session_.Replay(reader_.Take()) : session_.Handle(reader_.Take());
  WriteJournal();
  if (!r.reply.empty() && !SendReply(std::move(r.reply))) return false;
  if (r.close) {
    DoClose("protocol error");
    return false;
  }
  if (r.stop_pending) {
    // No further message until the device has completed the chains it
    // holds (or the bound passes); the front-end waits for this reply.
    stop_waiting_ = true;
    const uint64_t gen = ++stop_timer_gen_;
    stop_timer_.expires_after(session_.options().stop_drain_timeout);
    stop_timer_.async_wait([self = shared_from_this(), gen](const boost::system::error_code& ec) {
      // A stale expiry (already queued when this stop ended) is ignored.
      if (!ec && gen == self->stop_timer_gen_) self->MaybeFinishStop(true);
    });
    return false;
  }
  return true;
}

bool Connection::SendReply(std::vector<uint8_t> bytes) {
  if (closed_) return false;
  out_bytes_ += bytes.size();
  out_.push_back(std::move(bytes));
  // A front-end that sends requests without reading the answers must not
  // make this process buffer without bound.
  if (out_bytes_ > reply_limits_.max_queued_bytes) {
    spdlog::error(
        "vdev[{}]: front-end does not read its replies ({} bytes unread, limit {}); disconnecting",
        name_, out_bytes_, reply_limits_.max_queued_bytes);
    DoClose("reply queue over its limit");
    return false;
  }
  if (write_waiting_) return true;  // behind replies the socket did not take yet
  OnWritable();
  return !closed_;
}

void Connection::OnWritable() {
  if (exported_) return;  // the successor sends the rest
  const int fd = socket_.native_handle();
  bool progress = false;
  while (!out_.empty() && !closed_) {
    const std::vector<uint8_t>& front = out_.front();
    ssize_t n = send(fd, front.data() + out_offset_, front.size() - out_offset_,
                     MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      DoClose(std::string("could not send a reply: ") + std::strerror(errno));
      return;
    }
    progress = true;
    out_offset_ += static_cast<size_t>(n);
    out_bytes_ -= static_cast<size_t>(n);
    if (out_offset_ == front.size()) {
      out_.pop_front();
      out_offset_ = 0;
    }
  }
  if (out_.empty()) {
    if (write_waiting_) {
      write_waiting_ = false;
      ++reply_timer_gen_;
      reply_timer_.cancel();
    }
    return;
  }
  // The socket buffer is full: wait for room without holding up anything
  // else, and give the front-end a bounded time to read.
  if (!write_waiting_ || progress) ArmReplyTimer();
  write_waiting_ = true;
  WaitWritable();
}

void Connection::WaitWritable() {
  if (write_armed_) return;
  write_armed_ = true;
  WaitSocket(Socket::wait_write, &Connection::OnWritable);
}

void Connection::ArmReplyTimer() {
  const uint64_t gen = ++reply_timer_gen_;
  reply_timer_.expires_after(reply_limits_.drain_timeout);
  reply_timer_.async_wait([self = shared_from_this(), gen](const boost::system::error_code& ec) {
    if (ec || self->closed_ || gen != self->reply_timer_gen_ || self->out_.empty()) return;
    spdlog::error(
        "vdev[{}]: front-end read none of its replies for {} ms ({} bytes unread); "
        "disconnecting",
        self->name_, self->reply_limits_.drain_timeout.count(), self->out_bytes_);
    self->DoClose("replies not read in time");
  });
}

void Connection::MaybeFinishStop(bool timed_out) {
  if (!stop_waiting_ || closed_) return;
  if (!timed_out && !session_.StopDrained()) return;
  stop_waiting_ = false;
  stop_timer_.cancel();
  std::vector<uint8_t> reply = session_.FinishStop();
  WriteJournal();  // the ring is stopped: a process started now must not recover it
  if (!SendReply(std::move(reply))) return;
  // Messages that arrived meanwhile are waiting in the socket.
  WaitReadable();
}

void Connection::WatchKick(uint16_t queue, int fd) {
  if (queue >= kicks_.size() || closed_) return;
  UnwatchKick(queue);
  SetNonBlocking(fd);
  auto w = std::make_unique<KickWatch>(io_, fd);
  w->generation = ++kick_generation_;
  uint64_t generation = w->generation;
  kicks_[queue] = std::move(w);
  ArmKick(queue, generation);
}

void Connection::UnwatchKick(uint16_t queue) {
  if (queue >= kicks_.size() || !kicks_[queue]) return;
  // release() cancels the pending wait and leaves the fd to the session.
  kicks_[queue]->sd.release();
  kicks_[queue].reset();
}

void Connection::ArmKick(uint16_t queue, uint64_t generation) {
  KickWatch* w = kicks_[queue].get();
  w->sd.async_wait(asio::posix::stream_descriptor::wait_read,
                   asio::bind_executor(strand_, [self = shared_from_this(), queue,
                                                 generation](const boost::system::error_code& ec) {
                     if (self->closed_ || ec) return;
                     KickWatch* cur = self->kicks_[queue].get();
                     if (cur == nullptr || cur->generation != generation)
                       return;  // replaced or removed
                     // Re-arm before draining: a kick landing after the drain then
                     // completes the new wait instead of being lost (edge-triggered).
                     self->ArmKick(queue, generation);
                     if (!DrainEventFd(cur->sd.native_handle())) {
                       self->DoClose("the front-end made a kick eventfd blocking");
                       return;
                     }
                     {
                       HeldPosts held;
                       self->session_.Kick(queue);
                     }
                     self->MaybeFinishStop();
                   }));
}

void Connection::SetPolling(bool on) {
  polling_ = on;
  if (on) SchedulePoll();
}

void Connection::SchedulePoll() {
  if (poll_scheduled_ || closed_) return;
  poll_scheduled_ = true;
  asio::post(strand_, [self = shared_from_this()] {
    self->poll_scheduled_ = false;
    {
      HeldPosts held;
      self->PollSlice();
    }
    self->MaybeFinishStop();
    if (!self->polling_ || self->closed_) return;
    self->SchedulePoll();
  });
}

void Connection::PollSlice() {
  // Rings polled only awhile (Session::PollAwhile) belong to clients that
  // want their next operation seen at once, and often several of them (the
  // ranks of one communicator) share this thread: one pass each, so that no
  // ring waits for another's slice.
  if (!session_.PollsForGood()) {
    session_.Poll();
    return;
  }
  // Nothing else runs on the strand meanwhile, so no memory-table change can
  // happen under the rings: each queue holds its map for the whole slice and
  // no pass takes a reference of its own.
  const auto deadline = std::chrono::steady_clock::now() + kPollSlice;
  for (unsigned pass = 1; polling_ && !closed_; ++pass) {
    if (!session_.Poll()) CpuRelax();
    if (pass % kPassesPerClockCheck == 0 && std::chrono::steady_clock::now() >= deadline) return;
  }
}

void Connection::Run(std::function<void(Connection&)> fn) {
  asio::post(strand_, [self = shared_from_this(), fn = std::move(fn)] { fn(*self); });
}

void Connection::Freeze() {
  if (closed_ || frozen_) return;
  frozen_ = true;
  session_.Freeze();
}

Error Connection::Export(ConnectionRecord* out, SnapshotFds* fds) {
  if (closed_) return "the connection is closed";
  if (!frozen_) return "the connection is not frozen";
  ConnectionRecord r;
  r.socket = fds->Add(socket_.native_handle());
  if (Error e = session_.Export(&r.session, fds); !e.empty()) return e;
  r.partial_message = reader_.PartialBytes();
  for (const UniqueFd& fd : reader_.partial_fds()) r.partial_fds.push_back(fds->Add(fd.get()));
  for (size_t i = 0; i < out_.size(); ++i) {
    const std::vector<uint8_t>& reply = out_[i];
    const size_t skip = i == 0 ? out_offset_ : 0;
    r.unsent_replies.append(reinterpret_cast<const char*>(reply.data()) + skip,
                            reply.size() - skip);
  }
  if (fds->failed()) return "out of descriptors";
  exported_ = true;
  *out = std::move(r);
  return {};
}

void Connection::Thaw() {
  if (closed_ || !frozen_) return;
  frozen_ = false;
  exported_ = false;
  session_.Thaw();
  WaitReadable();
  if (!out_.empty() && !write_armed_) OnWritable();
}

void Connection::Abandon() {
  if (closed_) return;
  spdlog::info("vdev[{}]: connection handed over", name_);
  journal_.reset();  // the successor keeps a journal of its own
  Release(&Session::Abandon);
}

void Connection::Resume(ConnectionRecord record, std::shared_ptr<std::vector<UniqueFd>> fds,
                        std::function<void(const Error&)> done, bool recover) {
  asio::post(strand_, [self = shared_from_this(), record = std::move(record), fds,
                       done = std::move(done), recover] {
    spdlog::info("vdev[{}]: front-end taken over from the {} process", self->name_,
                 recover ? "crashed" : "previous");
    self->resuming_ = true;
    self->session_.Start();
    Error e = self->session_.Restore(record.session, *fds, recover);
    self->resuming_ = false;
    if (e.empty()) {
      std::vector<UniqueFd> partial_fds;
      for (int index : record.partial_fds) partial_fds.push_back(std::move((*fds)[index]));
      const auto* bytes = reinterpret_cast<const uint8_t*>(record.partial_message.data());
      size_t left = record.partial_message.size();
      while (e.empty() && left > 0) {
        const size_t n = std::min(left, self->reader_.Want());
        if (n == 0) {
          e = "the partial message is longer than its header says";
          break;
        }
        e = self->reader_.Feed(bytes, n, &partial_fds);
        bytes += n;
        left -= n;
      }
      // A live upgrade hands over at a message boundary; a crash journal
      // may hold a whole message the crashed process had not served.
      if (e.empty() && self->reader_.Ready() && !recover) e = "the partial message is whole";
    }
    if (!e.empty()) {
      spdlog::error("vdev[{}]: could not take the session over: {}", self->name_, e);
      self->DoClose("hand-over failed");
      done(e);
      return;
    }
    done(e);
    self->WriteJournal();
    if (self->reader_.Ready() && !self->HandleMessage(/*replay=*/recover)) return;
    self->WaitReadable();
    if (!record.unsent_replies.empty()) {
      const auto* r = reinterpret_cast<const uint8_t*>(record.unsent_replies.data());
      self->SendReply(std::vector<uint8_t>(r, r + record.unsent_replies.size()));
    }
  });
}

}  // namespace vdev
