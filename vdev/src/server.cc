#include "vdev/server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "connection.h"
#include "server_journal.h"
#include "spdlog/fmt/fmt.h"
#include "spdlog/spdlog.h"
#include "vdev/listener.h"

namespace vdev {

namespace asio = boost::asio;
using stream_protocol = asio::local::stream_protocol;

// Shared with connection callbacks, so a connection closing after the Server
// is gone touches nothing freed.
struct Server::State : std::enable_shared_from_this<Server::State> {
  State(asio::io_context& io_in, std::string path_in, DeviceFactory factory_in,
        ServerOptions options_in)
      : io(io_in),
        path(std::move(path_in)),
        factory(std::move(factory_in)),
        options(std::move(options_in)),
        acceptor(io_in),
        timer(io_in),
        handover_timer(io_in),
        pace_timer(io_in),
        backoff(io_in.get_executor(), "vdev[" + path + "]") {}

  void Accept();
  // Admits socket once min_connect_interval has passed since the last
  // admission (AdmitNow), then accepts the next.
  void AdmitPaced(stream_protocol::socket socket);
  void AdmitNow(stream_protocol::socket socket);
  void Connect();
  void Adopt(stream_protocol::socket socket);
  // The connection for a front-end's socket, registered as the active one
  // but not started; nullptr when the factory makes no device.
  std::shared_ptr<Connection> MakeConnection(stream_protocol::socket socket);
  void OnConnectionClosed();
  // A front-end arrived: adopt it, or while busy let it wait for the
  // hand-over (refused if one waits already).
  void Admit(stream_protocol::socket socket);
  void Refuse(stream_protocol::socket socket);
  // With options.fd_store: a new journal recording the server alone.
  bool StartJournal(std::string* error);
  // Serves what record describes (StartFrom, Recover).
  bool StartFromRecord(const ServerRecord& record, std::shared_ptr<std::vector<UniqueFd>> fds,
                       std::function<void(const Error&)> done, bool recover, std::string* error);

  asio::io_context& io;
  const std::string path;
  const DeviceFactory factory;
  const ServerOptions options;
  stream_protocol::acceptor acceptor;
  asio::steady_timer timer;
  mutable std::mutex mu;
  std::weak_ptr<Connection> active;  // guarded by mu
  bool busy = false;                 // guarded by mu
  // The front-end waiting for the hand-over, and which one it is (so that a
  // late timer never refuses a newer one). Guarded by mu.
  std::unique_ptr<stream_protocol::socket> waiting;
  uint64_t waiting_generation = 0;
  // Touched only by Accept (one at a time), never cancelled from elsewhere.
  asio::steady_timer handover_timer;
  // Touched only by the accept path (one step at a time) and Stop.
  asio::steady_timer pace_timer;
  std::chrono::steady_clock::time_point last_admitted;
  AcceptBackoff backoff;  // touched only by Accept and Stop
  std::atomic<bool> stopped{false};
  bool frozen = false;  // on the io_context: a hand-over is under way
  // Crash recovery (options.fd_store): the journal, and the listening
  // socket it names (-1: none). Set before the first connection.
  std::shared_ptr<ServerJournal> journal;
  int listener_fd = -1;
  std::atomic<uint64_t> accepted{0};
};

void Server::State::Adopt(stream_protocol::socket socket) {
  std::shared_ptr<Connection> conn = MakeConnection(std::move(socket));
  if (conn == nullptr) {
    spdlog::error("vdev[{}]: device factory returned no device; closing", path);
    return;
  }
  conn->Start();
}

std::shared_ptr<Connection> Server::State::MakeConnection(stream_protocol::socket socket) {
  std::unique_ptr<Device> device = factory(path);
  if (device == nullptr) return nullptr;
  std::weak_ptr<State> weak = weak_from_this();
  auto conn = std::make_shared<Connection>(
      io, std::move(socket), std::move(device), options.session, path,
      [weak] {
        if (auto s = weak.lock()) s->OnConnectionClosed();
      },
      ReplyLimits{options.max_queued_reply_bytes, options.reply_drain_timeout},
      options.one_thread_io);
  conn->SetJournal(journal, listener_fd);
  {
    std::lock_guard<std::mutex> lock(mu);
    active = conn;
    busy = true;
  }
  accepted.fetch_add(1);
  return conn;
}

bool Server::State::StartJournal(std::string* error) {
  if (options.fd_store == nullptr) return true;
  Error e;
  std::unique_ptr<ServerJournal> created = ServerJournal::Create(options.fd_store, &e);
  if (created != nullptr) e = created->WriteServer(path, listener_fd, {});
  if (!e.empty()) {
    *error = path + ": no crash journal: " + e;
    if (created != nullptr) created->Discard();
    return false;
  }
  journal = std::move(created);
  return true;
}

void Server::State::OnConnectionClosed() {
  std::unique_ptr<stream_protocol::socket> next;
  {
    std::lock_guard<std::mutex> lock(mu);
    busy = false;
    active.reset();
    next = std::move(waiting);
  }
  if (next != nullptr && !stopped) {
    Adopt(std::move(*next));
    return;
  }
  if (options.mode == ServerOptions::Mode::kClient && !stopped) {
    timer.expires_after(options.reconnect_interval);
    timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec && !self->stopped) self->Connect();
    });
  }
}

void Server::State::Accept() {
  acceptor.async_accept([self = shared_from_this()](const boost::system::error_code& ec,
                                                    stream_protocol::socket socket) {
    if (self->stopped) return;
    if (!self->backoff.Accepted(ec, [self] { self->Accept(); })) return;
    if (self->frozen) {
      // Accepted just as the hand-over froze the listener; Thaw or the
      // successor accepts the next one.
      self->Refuse(std::move(socket));
      return;
    }
    self->AdmitPaced(std::move(socket));
  });
}

void Server::State::AdmitPaced(stream_protocol::socket socket) {
  const auto due = last_admitted + options.min_connect_interval;
  if (std::chrono::steady_clock::now() >= due) {
    AdmitNow(std::move(socket));
    return;
  }
  auto waiting_socket = std::make_shared<stream_protocol::socket>(std::move(socket));
  pace_timer.expires_at(due);
  pace_timer.async_wait(
      [self = shared_from_this(), waiting_socket](const boost::system::error_code&) {
        if (self->stopped) return;  // the socket closes with the last reference
        self->AdmitNow(std::move(*waiting_socket));
      });
}

void Server::State::AdmitNow(stream_protocol::socket socket) {
  last_admitted = std::chrono::steady_clock::now();
  Admit(std::move(socket));
  Accept();
}

void Server::State::Refuse(stream_protocol::socket socket) {
  spdlog::warn("vdev[{}]: refusing a second front-end: one connection per socket", path);
  boost::system::error_code ignored;
  socket.close(ignored);
}

void Server::State::Admit(stream_protocol::socket socket) {
  enum class Fate { kAdopt, kWait, kRefuse } fate;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!busy) {
      fate = Fate::kAdopt;
    } else if (waiting != nullptr) {
      fate = Fate::kRefuse;  // one waits already
    } else {
      fate = Fate::kWait;
      waiting = std::make_unique<stream_protocol::socket>(std::move(socket));
      generation = ++waiting_generation;
    }
  }
  if (fate == Fate::kAdopt) return Adopt(std::move(socket));
  if (fate == Fate::kRefuse) return Refuse(std::move(socket));
  handover_timer.expires_after(options.handover_timeout);
  handover_timer.async_wait(
      [self = shared_from_this(), generation](const boost::system::error_code& ec) {
        if (ec) return;  // replaced by a newer wait
        std::unique_ptr<stream_protocol::socket> late;
        {
          std::lock_guard<std::mutex> lock(self->mu);
          if (self->waiting_generation == generation) late = std::move(self->waiting);
        }
        if (late != nullptr) self->Refuse(std::move(*late));
      });
}

void Server::State::Connect() {
  auto socket = std::make_shared<stream_protocol::socket>(io);
  socket->async_connect(stream_protocol::endpoint(path), [self = shared_from_this(), socket](
                                                             const boost::system::error_code& ec) {
    if (self->stopped) return;
    if (ec) {
      spdlog::debug("vdev[{}]: connect failed: {}; retrying", self->path, ec.message());
      self->timer.expires_after(self->options.reconnect_interval);
      self->timer.async_wait([self](const boost::system::error_code& tec) {
        if (!tec && !self->stopped) self->Connect();
      });
      return;
    }
    self->Adopt(std::move(*socket));
  });
}

Server::Server(asio::io_context& io, std::string socket_path, DeviceFactory factory,
               ServerOptions options)
    : state_(std::make_shared<State>(io, socket_path, std::move(factory), std::move(options))),
      path_(std::move(socket_path)) {}

Server::~Server() {
  Stop();
}

bool Server::Start(std::string* error) {
  State& s = *state_;
  if (s.options.mode == ServerOptions::Mode::kClient) {
    if (!s.StartJournal(error)) return false;
    s.Connect();
    return true;
  }
  struct stat st;
  if (lstat(path_.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      *error = path_ + " exists and is not a socket";
      return false;
    }
    // A socket nobody accepts on is left over from an earlier run; one that
    // accepts belongs to a live server, which must not lose its path.
    boost::system::error_code probe_ec;
    stream_protocol::socket probe(s.io);
    probe.connect(stream_protocol::endpoint(path_), probe_ec);
    if (!probe_ec) {
      *error = path_ + " is in use by another server";
      return false;
    }
    unlink(path_.c_str());
  }
  if (!ListenUnix(s.acceptor, path_, s.options.access, error)) return false;
  s.listener_fd = s.acceptor.native_handle();
  if (!s.StartJournal(error)) {
    boost::system::error_code ignored;
    s.acceptor.close(ignored);
    unlink(path_.c_str());
    return false;
  }
  spdlog::info("vdev: listening on {}", path_);
  s.Accept();
  return true;
}

void Server::Stop() {
  State& s = *state_;
  if (s.stopped.exchange(true)) return;
  boost::system::error_code ec;
  if (s.acceptor.is_open()) {
    s.acceptor.close(ec);
    unlink(path_.c_str());
  }
  s.timer.cancel();
  s.pace_timer.cancel();
  s.backoff.Cancel();
  std::shared_ptr<Connection> conn;
  std::unique_ptr<stream_protocol::socket> waiting;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    conn = s.active.lock();
    waiting = std::move(s.waiting);
  }
  if (waiting != nullptr) {
    boost::system::error_code ignored;
    waiting->close(ignored);
  }
  if (conn) conn->Close("server stopped");
  // Stopped for good: nothing is left for a next process to recover.
  if (s.journal) s.journal->Discard();
}

namespace {

// Runs fn on the executor and waits for it (the caller is not on it).
template <typename Executor, typename Fn>
auto RunAndWait(const Executor& executor, Fn fn) {
  std::packaged_task<decltype(fn())()> task(std::move(fn));
  auto result = task.get_future();
  asio::post(executor, [&task] { task(); });
  return result.get();
}

// Runs fn on the connection's strand and waits for it.
template <typename Fn>
auto RunOnConnection(const std::shared_ptr<Connection>& conn, Fn fn) {
  std::promise<decltype(fn(*conn))> promise;
  auto result = promise.get_future();
  conn->Run([&](Connection& c) { promise.set_value(fn(c)); });
  return result.get();
}

}  // namespace

Error Server::Freeze(std::chrono::milliseconds timeout) {
  State& s = *state_;
  std::shared_ptr<Connection> conn = RunAndWait(s.io.get_executor(), [&s] {
    s.frozen = true;
    boost::system::error_code ec;
    if (s.acceptor.is_open()) s.acceptor.cancel(ec);
    std::lock_guard<std::mutex> lock(s.mu);
    return s.active.lock();
  });
  if (conn == nullptr) return {};
  RunOnConnection(conn, [](Connection& c) {
    c.Freeze();
    return true;
  });
  // Chains in flight complete through posts to the strand; check between.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (RunOnConnection(conn, [](Connection& c) { return c.Quiescent(); })) return {};
    if (std::chrono::steady_clock::now() >= deadline) {
      return fmt::format("{}: chains still in flight after {} ms", path_, timeout.count());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Error Server::Export(ServerRecord* out, SnapshotFds* fds) {
  State& s = *state_;
  ServerRecord r;
  r.path = path_;
  std::shared_ptr<Connection> conn = RunAndWait(s.io.get_executor(), [&] {
    if (s.acceptor.is_open()) r.listener = fds->Add(s.acceptor.native_handle());
    std::lock_guard<std::mutex> lock(s.mu);
    return s.active.lock();
  });
  if (conn != nullptr) {
    r.has_connection = true;
    Error e = RunOnConnection(conn, [&](Connection& c) { return c.Export(&r.connection, fds); });
    if (!e.empty()) return path_ + ": " + e;
  }
  if (fds->failed()) return path_ + ": out of descriptors";
  *out = std::move(r);
  return {};
}

void Server::Thaw() {
  State& s = *state_;
  std::shared_ptr<Connection> conn = RunAndWait(s.io.get_executor(), [&s] {
    if (s.frozen && !s.stopped && s.acceptor.is_open()) s.Accept();
    s.frozen = false;
    std::lock_guard<std::mutex> lock(s.mu);
    return s.active.lock();
  });
  if (conn != nullptr) {
    RunOnConnection(conn, [](Connection& c) {
      c.Thaw();
      return true;
    });
  }
}

void Server::Abandon() {
  State& s = *state_;
  std::shared_ptr<Connection> conn = RunAndWait(s.io.get_executor(), [&s] {
    s.stopped = true;
    boost::system::error_code ec;
    s.acceptor.close(ec);  // this process's descriptor; the path stays
    s.timer.cancel();
    s.pace_timer.cancel();
    s.backoff.Cancel();
    std::lock_guard<std::mutex> lock(s.mu);
    return s.active.lock();
  });
  if (conn != nullptr) {
    RunOnConnection(conn, [](Connection& c) {
      c.Abandon();
      return true;
    });
  }
  // The successor keeps a journal of its own.
  if (s.journal) s.journal->Discard();
}

bool Server::StartFrom(const ServerRecord& record, std::shared_ptr<std::vector<UniqueFd>> fds,
                       std::function<void(const Error&)> done, std::string* error) {
  return state_->StartFromRecord(record, std::move(fds), std::move(done), false, error);
}

bool Server::Recover(const ServerRecord& record, std::shared_ptr<std::vector<UniqueFd>> fds,
                     std::shared_ptr<ServerJournal> journal, std::function<void(const Error&)> done,
                     std::string* error) {
  state_->journal = std::move(journal);
  return state_->StartFromRecord(record, std::move(fds), std::move(done), true, error);
}

bool Server::State::StartFromRecord(const ServerRecord& record,
                                    std::shared_ptr<std::vector<UniqueFd>> fds,
                                    std::function<void(const Error&)> done, bool recover,
                                    std::string* error) {
  if (record.path != path) {
    *error = fmt::format("the record is for {}, this server serves {}", record.path, path);
    return false;
  }
  if (record.listener != kNoFd) {
    boost::system::error_code ec;
    acceptor.assign(stream_protocol(), (*fds)[record.listener].release(), ec);
    if (ec) {
      *error = path + ": cannot take the listening socket over: " + ec.message();
      return false;
    }
    listener_fd = acceptor.native_handle();
    spdlog::info("vdev: listening on {} (taken over)", path);
    Accept();
  } else if (options.mode == ServerOptions::Mode::kServer) {
    *error = path + ": the record has no listening socket";
    return false;
  }
  // A successor starts its own journal; a recovering process goes on with
  // the crashed one's.
  if (!recover && !StartJournal(error)) return false;
  if (recover && journal && !record.has_connection) {
    journal->WriteServer(path, listener_fd, {});
  }
  if (!record.has_connection) {
    asio::post(io, [done = std::move(done)] { done({}); });
    return true;
  }
  stream_protocol::socket socket(io);
  boost::system::error_code ec;
  socket.assign(stream_protocol(), (*fds)[record.connection.socket].release(), ec);
  if (ec) {
    *error = path + ": cannot take the connection over: " + ec.message();
    return false;
  }
  std::shared_ptr<Connection> conn = MakeConnection(std::move(socket));
  if (conn == nullptr) {
    *error = path + ": the device factory returned no device";
    return false;
  }
  conn->Resume(record.connection, std::move(fds), std::move(done), recover);
  return true;
}

bool Server::connected() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->busy;
}

uint64_t Server::connections() const {
  return state_->accepted.load();
}

}  // namespace vdev
