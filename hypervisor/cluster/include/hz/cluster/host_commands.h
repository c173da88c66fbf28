// Commands one host of a cluster runs on behalf of another, through the
// cluster store: placing part of an allocation there, scheduling that host's
// maintenance from any host. Nothing here is a protocol of its own; it is
// the request/answer pattern on Redis lists (store_queue.h):
//  - the caller pushes {id, from, deadline_unix_ms, request} onto
//    <prefix>commands/<host>;
//  - that host's thread pops it, runs it through its executor if its
//    deadline has not passed, and pushes the answer onto
//    <prefix>commands/answer/<id>;
//  - the caller pops the answer, waiting at most `timeout`.
// The deadline is half the caller's wait, so a command that is run has at
// least that half to finish before its caller gives up. Both lists expire.
//
// Every request is input from the store: the receiver checks its shape and
// size, and the executor decides which commands it runs (the service allows
// only a few, hypervisor/service/src/service_cluster.cc). One command runs at
// a time, in order.
#ifndef HZ_CLUSTER_HOST_COMMANDS_H_
#define HZ_CLUSTER_HOST_COMMANDS_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "hz/cluster/redis_connection.h"
#include "hz/common/status.h"
#include "hz/common/status_or.h"

namespace hz::cluster {

struct HostCommandsOptions {
  RedisAddress store;
  std::string key_prefix;
  std::string host_name;
  std::chrono::milliseconds store_timeout{1000};
  std::chrono::milliseconds timeout{10000};  // a caller's longest wait for an answer
};

// The largest request or answer read from the store.
inline constexpr size_t kMaxHostCommandBytes = 1u << 20;

class HostCommands {
 public:
  // Runs `request` for host `from`; returns the answer to send back. Called
  // on the receiver thread, one request at a time.
  using Executor =
      std::function<nlohmann::json(const nlohmann::json& request, const std::string& from)>;

  HostCommands(HostCommandsOptions options, Executor execute);
  ~HostCommands();  // Stop()
  HostCommands(const HostCommands&) = delete;
  HostCommands& operator=(const HostCommands&) = delete;

  // Starts serving this host's queue.
  void Start();
  // Ends the receiver once its current command returns (a pop is noticed
  // within a second).
  void Stop();

  // Runs `request` on `host` and returns its answer. kTimedOut when none
  // came within the timeout (the host is gone, busy, or the command ran
  // longer than half of it: whether it ran is then unknown); kIoError when
  // the store cannot be reached. Thread-safe.
  StatusOr<nlohmann::json> Call(const std::string& host, const nlohmann::json& request);

 private:
  std::string QueueKey(const std::string& host) const;
  std::string AnswerKey(const std::string& id) const;
  void ReceiveLoop();
  void Serve(const std::string& text, RedisConnection& redis);

  const HostCommandsOptions options_;
  const Executor execute_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread receiver_;
};

}  // namespace hz::cluster

#endif  // HZ_CLUSTER_HOST_COMMANDS_H_
