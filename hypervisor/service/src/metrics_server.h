// GET /metrics over HTTP/1.1 (Boost.Beast), one request per connection.
// Connections past max_connections are closed at once (an idle one is dropped
// after 10 s); a failed accept (out of descriptors) is retried with a growing
// delay (vdev/listener.h).
#ifndef HZ_SERVICE_SRC_METRICS_SERVER_H_
#define HZ_SERVICE_SRC_METRICS_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "hz/common/status.h"
#include "vdev/listener.h"

namespace prometheus {
class Registry;
}

namespace hz::service {

class MetricsServer {
 public:
  MetricsServer(boost::asio::io_context& io, std::function<std::string()> render,
                size_t max_connections);
  Status Start(const std::string& address, uint16_t port);
  // A live upgrade: the listening socket the previous process handed over
  // (Adopt), and this process's descriptor of it (listener()).
  Status Adopt(int fd);
  int listener() { return acceptor_.native_handle(); }
  uint16_t port() const { return port_; }
  void Stop();
  // Accepts that failed, and connections closed for the cap (any thread).
  uint64_t accept_failures() const { return backoff_.failures(); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  void Accept();
  boost::asio::ip::tcp::acceptor acceptor_;
  std::function<std::string()> render_;
  size_t max_connections_;
  std::shared_ptr<size_t> open_ = std::make_shared<size_t>(0);  // live connections
  std::atomic<uint64_t> refused_{0};
  vdev::AcceptBackoff backoff_;
  uint16_t port_ = 0;
};

// The listeners' own counters.
void CollectListenerMetrics(uint64_t control_accept_failures, const MetricsServer& metrics,
                            prometheus::Registry* r);

}  // namespace hz::service

#endif  // HZ_SERVICE_SRC_METRICS_SERVER_H_
