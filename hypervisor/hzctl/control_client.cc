#include "control_client.h"

#include <cstddef>
#include <cstdio>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <boost/system/system_error.hpp>

namespace hzctl {

namespace {

namespace asio = boost::asio;
using Socket = asio::local::stream_protocol::socket;

// An answer longer than this is not one the service sends; stop reading
// rather than grow without bound.
constexpr size_t kMaxAnswerBytes = 256u << 20;

}  // namespace

CallResult Call(const std::string& path, const nlohmann::json& req,
                std::chrono::milliseconds timeout, nlohmann::json* resp, std::string* error) {
  asio::io_context io;
  Socket socket(io);
  const std::string request = req.dump() + "\n";
  std::string answer;
  // Each step starts the next; the deadline covers them all, since
  // run_for() returns with whatever is still pending when it expires.
  const char* waiting_for = "connecting";
  boost::system::error_code failure;
  bool done = false;
  auto on_read = [&](const boost::system::error_code& ec, size_t) {
    failure = ec;
    done = true;
  };
  auto on_write = [&](const boost::system::error_code& ec, size_t) {
    if (ec) {
      failure = ec;
      done = true;
      return;
    }
    waiting_for = "waiting for the answer";
    asio::async_read_until(socket, asio::dynamic_buffer(answer, kMaxAnswerBytes), '\n', on_read);
  };
  auto on_connect = [&](const boost::system::error_code& ec) {
    if (ec) {
      failure = ec;
      done = true;
      return;
    }
    waiting_for = "sending the request";
    asio::async_write(socket, asio::buffer(request), on_write);
  };
  try {
    socket.async_connect(asio::local::stream_protocol::endpoint(path), on_connect);
  } catch (const boost::system::system_error& e) {  // e.g. a path too long for a socket
    *error = "cannot connect to " + path + ": " + e.code().message();
    return CallResult::kUnreachable;
  }
  io.run_for(timeout);
  if (!done) {
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%g", static_cast<double>(timeout.count()) / 1000);
    *error = "no answer from " + path + " within " + seconds + " s (" + waiting_for +
             "); harmonaized may be stuck (--timeout sets the limit)";
    return CallResult::kTimedOut;
  }
  if (failure) {
    *error = std::string(waiting_for == std::string("connecting") ? "cannot connect to "
                                                                  : "lost connection to ") +
             path + ": " + failure.message();
    return CallResult::kUnreachable;
  }
  *resp = nlohmann::json::parse(answer.substr(0, answer.find('\n')), nullptr, false);
  if (resp->is_discarded() || !resp->is_object()) {
    *error = "malformed response from the service";
    return CallResult::kUnreachable;
  }
  return CallResult::kOk;
}

}  // namespace hzctl
