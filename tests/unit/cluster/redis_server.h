// A private redis-server for a test: on a Unix socket in its own temporary
// directory, without persistence, killed (and restartable) at will.
#ifndef HZ_TESTS_UNIT_CLUSTER_REDIS_SERVER_H_
#define HZ_TESTS_UNIT_CLUSTER_REDIS_SERVER_H_

#include <sys/types.h>

#include <string>

namespace hz::cluster::test {

class RedisServer {
 public:
  RedisServer();
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // Starts the server and waits until it answers; false (with a reason in
  // error()) when it cannot be started.
  bool Start();
  // SIGKILL: the store vanishes with everything in it, as in a crash.
  void Kill();
  const std::string& socket_path() const { return socket_; }
  std::string address() const { return "unix:" + socket_; }
  const std::string& error() const { return error_; }
  // Runs one redis-cli command against the server; its output.
  std::string Cli(const std::string& args) const;

 private:
  std::string dir_;
  std::string socket_;
  std::string error_;
  pid_t pid_ = -1;
};

}  // namespace hz::cluster::test

#endif  // HZ_TESTS_UNIT_CLUSTER_REDIS_SERVER_H_
