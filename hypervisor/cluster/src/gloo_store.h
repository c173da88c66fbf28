// Gloo's rendezvous store on the cluster store (Redis), through
// RedisConnection. Gloo ships a RedisStore of its own, but it connects and
// waits without any timeout: a member whose link to the store is cut would
// block for minutes in the kernel's connect retries. This one bounds every
// call, and gives its keys an expiry so that rendezvous data of groups that
// are long gone does not pile up in the store.
//
// Gloo's Store interface reports failures by throwing; so does this one
// (gloo::IoException), and ConnectGlooGroup turns them into a Status.
#ifndef HZ_CLUSTER_GLOO_STORE_H_
#define HZ_CLUSTER_GLOO_STORE_H_

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "hz/cluster/redis_connection.h"

namespace hz::cluster {

class GlooStore : public gloo::rendezvous::Store {
 public:
  // call_timeout bounds each store command; wait_timeout, a get of a key
  // that is not there yet (Gloo's get waits for its key).
  GlooStore(RedisAddress address, std::chrono::milliseconds call_timeout,
            std::chrono::milliseconds wait_timeout, std::chrono::milliseconds key_lifetime);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, wait_timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  bool Exists(const std::string& key);

  std::mutex mu_;  // Gloo may call from more than one thread
  RedisConnection redis_;
  const std::chrono::milliseconds wait_timeout_;
  const std::chrono::milliseconds key_lifetime_;
};

}  // namespace hz::cluster

#endif  // HZ_CLUSTER_GLOO_STORE_H_
