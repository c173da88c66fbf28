// GET /metrics over HTTP/1.1 (Boost.Beast), one request per connection.
#ifndef HZ_SERVICE_SRC_METRICS_SERVER_H_
#define HZ_SERVICE_SRC_METRICS_SERVER_H_

#include <functional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "hz/common/status.h"

namespace hz::service {

class MetricsServer {
 public:
  MetricsServer(boost::asio::io_context& io, std::function<std::string()> render);
  Status Start(const std::string& address, uint16_t port);
  uint16_t port() const { return port_; }
  void Stop();

 private:
  void Accept();
  boost::asio::ip::tcp::acceptor acceptor_;
  std::function<std::string()> render_;
  uint16_t port_ = 0;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_SRC_METRICS_SERVER_H_
