// The operator's unix socket: newline-delimited JSON requests, each answered
// with one line. Lines longer than the limit end the connection with an error.
// Clients past max_clients are closed at once; a failed accept (out of
// descriptors) is retried with a growing delay (vdev/listener.h).
#ifndef HZ_SERVICE_SRC_CONTROL_SERVER_H_
#define HZ_SERVICE_SRC_CONTROL_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "hz/common/status.h"
#include "vdev/listener.h"

namespace hz::service {

// Who may connect to a socket: `mode`, `owner` and `group` (names
// ValidateConfig checked; empty: the service's own user or group).
vdev::SocketAccess SocketAccessFor(uint32_t mode, const std::string& owner,
                                   const std::string& group);

class ControlServer {
 public:
  using Handler = std::function<std::string(const std::string& line)>;
  ControlServer(boost::asio::io_context& io, std::string path, vdev::SocketAccess access,
                size_t max_line, size_t max_clients, Handler handler);
  ~ControlServer();
  Status Start();
  // A live upgrade: the listening socket the previous process handed over
  // (Adopt); this process's descriptor of it (listener()); and letting go
  // of it without removing the socket file the next process serves
  // (Release).
  Status Adopt(int fd);
  int listener() { return acceptor_.native_handle(); }
  void Release();
  void Stop();
  // Accepts that failed so far (any thread).
  uint64_t accept_failures() const { return backoff_.failures(); }

 private:
  class Session;
  void Accept();

  std::string path_;
  vdev::SocketAccess access_;
  size_t max_line_;
  size_t max_clients_;
  Handler handler_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  vdev::AcceptBackoff backoff_;
  std::shared_ptr<size_t> clients_ = std::make_shared<size_t>(0);
};

}  // namespace hz::service

#endif  // HZ_SERVICE_SRC_CONTROL_SERVER_H_
