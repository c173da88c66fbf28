// One connection to Redis, the cluster store, through hiredis (Debian's
// libhiredis, the client Gloo also uses): connecting and every command are
// bounded by a timeout, and a store that vanished never raises SIGPIPE.
//
// Not thread-safe: one connection, used by one thread at a time. A failed
// command drops the connection; the next one connects again.
#ifndef HZ_CLUSTER_REDIS_CONNECTION_H_
#define HZ_CLUSTER_REDIS_CONNECTION_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hz/common/status.h"
#include "hz/common/status_or.h"

struct redisContext;
struct redisReply;

namespace hz::cluster {

// Where Redis listens: "host:port" or "unix:/path/to/socket".
struct RedisAddress {
  std::string host;  // empty for a Unix socket
  uint16_t port = 0;
  std::string unix_path;

  static StatusOr<RedisAddress> Parse(const std::string& text);
  std::string ToString() const;
};

class RedisConnection {
 public:
  struct ReplyFree {
    void operator()(redisReply* r) const;
  };
  using Reply = std::unique_ptr<redisReply, ReplyFree>;

  RedisConnection(RedisAddress address, std::chrono::milliseconds timeout);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Runs one command with binary-safe arguments. kIoError when the store
  // cannot be reached or does not answer in time, and for Redis's own error
  // replies (with their text).
  StatusOr<Reply> Command(const std::vector<std::string_view>& argv);

  const RedisAddress& address() const { return address_; }
  std::string Describe() const { return address_.ToString(); }

 private:
  struct ContextFree {
    void operator()(redisContext* c) const;
  };

  Status Connect();

  const RedisAddress address_;
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<redisContext, ContextFree> ctx_;
};

}  // namespace hz::cluster

#endif  // HZ_CLUSTER_REDIS_CONNECTION_H_
