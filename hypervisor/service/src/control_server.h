// The operator's unix socket: newline-delimited JSON requests, each answered
// with one line. Lines longer than the limit end the connection with an error.
#ifndef HZ_SERVICE_SRC_CONTROL_SERVER_H_
#define HZ_SERVICE_SRC_CONTROL_SERVER_H_

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include "hz/common/status.h"

namespace hz::service {

class ControlServer {
 public:
  using Handler = std::function<std::string(const std::string& line)>;
  ControlServer(boost::asio::io_context& io, std::string path, size_t max_line, size_t max_clients,
                Handler handler);
  ~ControlServer();
  Status Start();
  void Stop();

 private:
  class Session;
  void Accept();

  std::string path_;
  size_t max_line_;
  size_t max_clients_;
  Handler handler_;
  boost::asio::local::stream_protocol::acceptor acceptor_;
  std::shared_ptr<size_t> clients_ = std::make_shared<size_t>(0);
};

}  // namespace hz::service

#endif  // HZ_SERVICE_SRC_CONTROL_SERVER_H_
