#include "gloo_store.h"

#include <gloo/common/error.h>
#include <hiredis/hiredis.h>

#include <thread>

namespace hz::cluster {

namespace {

[[noreturn]] void Throw(const std::string& what) {
  throw gloo::IoException(what);
}

}  // namespace

GlooStore::GlooStore(RedisAddress address, std::chrono::milliseconds call_timeout,
                     std::chrono::milliseconds wait_timeout, std::chrono::milliseconds key_lifetime)
    : redis_(std::move(address), call_timeout),
      wait_timeout_(wait_timeout),
      key_lifetime_(key_lifetime) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string ms = std::to_string(key_lifetime_.count());
  StatusOr<RedisConnection::Reply> r =
      redis_.Command({"SET", key, std::string_view(data.data(), data.size()), "PX", ms});
  if (!r.ok()) Throw(r.status().message());
}

std::vector<char> GlooStore::get(const std::string& key) {
  wait({key}, wait_timeout_);
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<RedisConnection::Reply> r = redis_.Command({"GET", key});
  if (!r.ok()) Throw(r.status().message());
  if ((*r)->type != REDIS_REPLY_STRING) Throw("rendezvous key " + key + " is missing");
  return std::vector<char>((*r)->str, (*r)->str + (*r)->len);
}

bool GlooStore::Exists(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<RedisConnection::Reply> r = redis_.Command({"EXISTS", key});
  if (!r.ok()) Throw(r.status().message());
  return (*r)->type == REDIS_REPLY_INTEGER && (*r)->integer == 1;
}

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const std::string& key : keys) {
    while (!Exists(key)) {
      if (std::chrono::steady_clock::now() >= deadline) {
        Throw("Timed out: a member of the group did not arrive (rendezvous key " + key + ")");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

}  // namespace hz::cluster
