#include "hz/cluster/redis_connection.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <time.h>

#include <charconv>

namespace hz::cluster {

namespace {

// hiredis writes to its socket with write(), which raises SIGPIPE once Redis
// has gone, and SIGPIPE ends the process. For the duration of one command,
// the calling thread blocks SIGPIPE; one raised meanwhile is taken off the
// thread's pending set before unblocking, so it never reaches the process.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlocked() {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
};

timeval ToTimeval(std::chrono::milliseconds ms) {
  return timeval{static_cast<time_t>(ms.count() / 1000),
                 static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
}

}  // namespace

StatusOr<RedisAddress> RedisAddress::Parse(const std::string& text) {
  RedisAddress a;
  if (text.rfind("unix:", 0) == 0) {
    a.unix_path = text.substr(5);
    if (a.unix_path.empty() || a.unix_path[0] != '/' || a.unix_path.size() > 107) {
      return Status::InvalidArgument("expected unix:/absolute/path (at most 107 bytes)");
    }
    return a;
  }
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Status::InvalidArgument("expected host:port or unix:/path");
  }
  a.host = text.substr(0, colon);
  if (a.host.front() == '[' && a.host.back() == ']') a.host = a.host.substr(1, a.host.size() - 2);
  const char* begin = text.data() + colon + 1;
  const char* end = text.data() + text.size();
  unsigned port = 0;
  auto [p, ec] = std::from_chars(begin, end, port);
  if (ec != std::errc() || p != end || port == 0 || port > 65535 || a.host.empty()) {
    return Status::InvalidArgument("expected host:port with a port in 1..65535");
  }
  a.port = static_cast<uint16_t>(port);
  return a;
}

std::string RedisAddress::ToString() const {
  if (!unix_path.empty()) return "unix:" + unix_path;
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

void RedisConnection::ContextFree::operator()(redisContext* c) const {
  redisFree(c);
}
void RedisConnection::ReplyFree::operator()(redisReply* r) const {
  freeReplyObject(r);
}

RedisConnection::RedisConnection(RedisAddress address, std::chrono::milliseconds timeout)
    : address_(std::move(address)), timeout_(timeout) {}

RedisConnection::~RedisConnection() = default;

Status RedisConnection::Connect() {
  if (ctx_) return Status::Ok();
  const timeval tv = ToTimeval(timeout_);
  redisContext* c = address_.unix_path.empty()
                        ? redisConnectWithTimeout(address_.host.c_str(), address_.port, tv)
                        : redisConnectUnixWithTimeout(address_.unix_path.c_str(), tv);
  if (c == nullptr) return Status::IoError("cannot allocate a Redis connection");
  std::unique_ptr<redisContext, ContextFree> owned(c);
  if (c->err != 0) {
    return Status::IoError("cannot reach the cluster store at " + Describe() + ": " + c->errstr);
  }
  if (redisSetTimeout(c, tv) != REDIS_OK) {
    return Status::IoError("cannot set a timeout on the cluster store connection");
  }
  ctx_ = std::move(owned);
  return Status::Ok();
}

StatusOr<RedisConnection::Reply> RedisConnection::Command(
    const std::vector<std::string_view>& args) {
  if (Status s = Connect(); !s.ok()) return s;
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (std::string_view a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  Reply reply;
  {
    SigpipeBlocked no_sigpipe;
    reply.reset(static_cast<redisReply*>(
        redisCommandArgv(ctx_.get(), static_cast<int>(argv.size()), argv.data(), lens.data())));
  }
  if (!reply) {
    std::string why = ctx_->err != 0 ? ctx_->errstr : "no reply";
    ctx_.reset();  // the connection's state is unknown now
    return Status::IoError("the cluster store at " + Describe() + " did not answer: " + why);
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    return Status::IoError("the cluster store refused a request: " +
                           std::string(reply->str, reply->len));
  }
  return reply;
}

}  // namespace hz::cluster
