#include "metrics_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <memory>

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "metrics_families.h"

namespace hz::service {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, const std::function<std::string()>* render,
              std::shared_ptr<size_t> open)
      : stream_(std::move(socket)), render_(render), open_(std::move(open)) {
    ++*open_;
  }
  ~HttpSession() { --*open_; }

  void Read() {
    parser_.body_limit(4096);
    parser_.header_limit(8192);
    stream_.expires_after(std::chrono::seconds(10));
    http::async_read(stream_, buf_, parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return;
                       self->Respond();
                     });
  }

 private:
  void Respond() {
    const auto& req = parser_.get();
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(req.version());
    res->keep_alive(false);
    if (req.method() != http::verb::get) {
      res->result(http::status::method_not_allowed);
      res->set(http::field::allow, "GET");
      res->body() = "only GET\n";
    } else if (req.target() != "/metrics") {
      res->result(http::status::not_found);
      res->body() = "try /metrics\n";
    } else {
      res->result(http::status::ok);
      res->set(http::field::content_type, "text/plain; version=0.0.4");
      res->body() = (*render_)();
    }
    res->prepare_payload();
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code, size_t) {
      beast::error_code ec;
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    });
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buf_;
  http::request_parser<http::string_body> parser_;
  const std::function<std::string()>* render_;
  std::shared_ptr<size_t> open_;
};

}  // namespace

MetricsServer::MetricsServer(asio::io_context& io, std::function<std::string()> render,
                             size_t max_connections)
    : acceptor_(io),
      render_(std::move(render)),
      max_connections_(max_connections),
      backoff_(io.get_executor(), "listener=metrics") {}

Status MetricsServer::Start(const std::string& address, uint16_t port) {
  beast::error_code ec;
  auto addr = asio::ip::make_address(address, ec);
  if (ec) return Status::InvalidArgument("metrics address " + address + ": " + ec.message());
  tcp::endpoint ep(addr, port);
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::IoError("metrics " + address + ":" + std::to_string(port) + ": " + ec.message());
  }
  port_ = acceptor_.local_endpoint().port();
  Accept();
  return Status::Ok();
}

Status MetricsServer::Adopt(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  beast::error_code ec;
  acceptor_.assign(addr.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, ec);
  if (!ec) port_ = acceptor_.local_endpoint(ec).port();
  if (ec) {
    close(fd);
    return Status::IoError("metrics listener handed over: " + ec.message());
  }
  Accept();
  return Status::Ok();
}

void MetricsServer::Stop() {
  backoff_.Cancel();
  beast::error_code ec;
  acceptor_.close(ec);
}

void MetricsServer::Accept() {
  acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (!backoff_.Accepted(ec, [this] { Accept(); })) return;
    if (*open_ >= max_connections_) {
      refused_.fetch_add(1, std::memory_order_relaxed);  // closed with the socket
    } else {
      std::make_shared<HttpSession>(std::move(socket), &render_, open_)->Read();
    }
    Accept();
  });
}

void CollectListenerMetrics(uint64_t control_accept_failures, const MetricsServer& metrics,
                            prometheus::Registry* r) {
  auto& failures = CounterFamily(r, "hz_accept_failures_total",
                                 "Failed accepts (retried with back-off), by listener.");
  SetCounter(failures, {{"listener", "control"}}, static_cast<double>(control_accept_failures));
  SetCounter(failures, {{"listener", "metrics"}}, static_cast<double>(metrics.accept_failures()));
  AddCounter(r, "hz_metrics_connections_refused_total", "Metrics connections closed at the cap.",
             static_cast<double>(metrics.refused()));
}

}  // namespace hz::service
