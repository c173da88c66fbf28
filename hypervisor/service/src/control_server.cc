#include "control_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

#include "hz/service/config.h"
#include "spdlog/spdlog.h"

namespace hz::service {

namespace asio = boost::asio;
using local = asio::local::stream_protocol;

class ControlServer::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(local::socket socket, size_t max_line, Handler* handler, std::shared_ptr<size_t> clients)
      : socket_(std::move(socket)), buf_(max_line + 1), handler_(handler), clients_(clients) {
    ++*clients_;
  }
  ~Session() { --*clients_; }

  void Read() {
    auto self = shared_from_this();
    asio::async_read_until(socket_, buf_, '\n', [self](boost::system::error_code ec, size_t n) {
      if (ec == asio::error::not_found) {
        // The line outgrew the limit: answer once and hang up.
        self->Write("{\"ok\":false,\"error\":\"request line too long\"}\n", /*close=*/true);
        return;
      }
      if (ec) return;
      std::string line(asio::buffers_begin(self->buf_.data()),
                       asio::buffers_begin(self->buf_.data()) + static_cast<long>(n) - 1);
      self->buf_.consume(n);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) return self->Read();
      self->Write((*self->handler_)(line) + "\n", false);
    });
  }

 private:
  void Write(std::string text, bool close) {
    auto self = shared_from_this();
    auto data = std::make_shared<std::string>(std::move(text));
    asio::async_write(socket_, asio::buffer(*data),
                      [self, data, close](boost::system::error_code ec, size_t) {
                        if (ec || close) return;
                        self->Read();
                      });
  }

  local::socket socket_;
  asio::streambuf buf_;
  Handler* handler_;
  std::shared_ptr<size_t> clients_;
};

vdev::SocketAccess SocketAccessFor(uint32_t mode, const std::string& owner,
                                   const std::string& group) {
  vdev::SocketAccess access{static_cast<mode_t>(mode)};
  uint32_t uid;
  if (!owner.empty() && LookupUser(owner, &uid)) access.owner = uid;
  uint32_t gid;
  if (!group.empty() && LookupGroup(group, &gid)) access.group = gid;
  return access;
}

ControlServer::ControlServer(asio::io_context& io, std::string path, vdev::SocketAccess access,
                             size_t max_line, size_t max_clients, Handler handler)
    : path_(std::move(path)),
      access_(access),
      max_line_(max_line),
      max_clients_(max_clients),
      handler_(std::move(handler)),
      acceptor_(io),
      backoff_(io.get_executor(), "listener=control") {}

ControlServer::~ControlServer() {
  Stop();
}

Status ControlServer::Start() {
  struct stat st;
  if (lstat(path_.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode)) {
    return Status::Exists(path_ + ": exists and is not a socket");
  }
  // A stale socket of an earlier run is replaced. The new one appears
  // listening and with its final mode and group.
  std::string error;
  if (!vdev::ListenUnix(acceptor_, path_, access_, &error)) return Status::IoError(error);
  Accept();
  return Status::Ok();
}

Status ControlServer::Adopt(int fd) {
  boost::system::error_code ec;
  acceptor_.assign(local(), fd, ec);
  if (ec) {
    close(fd);
    return Status::IoError(path_ + ": the listener handed over: " + ec.message());
  }
  Accept();
  return Status::Ok();
}

void ControlServer::Release() {
  backoff_.Cancel();
  boost::system::error_code ec;
  acceptor_.close(ec);
}

void ControlServer::Stop() {
  backoff_.Cancel();
  if (!acceptor_.is_open()) return;
  boost::system::error_code ec;
  acceptor_.close(ec);
  unlink(path_.c_str());
}

void ControlServer::Accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, local::socket socket) {
    if (!backoff_.Accepted(ec, [this] { Accept(); })) return;
    if (*clients_ >= max_clients_) {
      spdlog::warn("event=control_refused reason=too_many_clients");
    } else {
      std::make_shared<Session>(std::move(socket), max_line_, &handler_, clients_)->Read();
    }
    Accept();
  });
}

}  // namespace hz::service
