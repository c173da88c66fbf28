// The virtio-user side of the echo device as the integration tests use it:
// one verified request/response, and a connect that waits for the server.
#ifndef TESTS_INTEGRATION_VDEV_ECHO_CLIENT_H_
#define TESTS_INTEGRATION_VDEV_ECHO_CLIENT_H_

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "vdev/frontend/virtio_user.h"

namespace vdev::frontend {

using namespace std::chrono_literals;

inline constexpr auto kWait = 5s;  // hang detector only

inline VirtioUser::Options DefaultOptions() {
  VirtioUser::Options o;
  o.queue_size = 64;
  o.memory_size = 2 << 20;
  return o;
}

// Connects, retrying while the server still holds a previous connection.
inline Status ConnectRetry(VirtioUser& dev, const std::string& path, const VirtioUser::Options& o) {
  Status s;
  for (int i = 0; i < 200; ++i) {
    s = dev.Connect(path, o);
    if (s.ok()) return s;
    std::this_thread::sleep_for(10ms);
  }
  return s;
}

// Pattern bytes that differ per (tag, i).
inline std::vector<uint8_t> Pattern(uint32_t tag, size_t len) {
  std::vector<uint8_t> v(len);
  for (size_t i = 0; i < len; ++i) v[i] = static_cast<uint8_t>(tag * 131 + i * 7 + 3);
  return v;
}

// One request/response through the echo device; returns an empty string on
// success, else what went wrong. spin: WaitUsed's.
inline std::string EchoOnce(VirtioUser& dev, uint16_t q, uint32_t tag, size_t len = 64,
                            bool indirect = false,
                            std::chrono::nanoseconds spin = std::chrono::nanoseconds(0)) {
  uint64_t in_gpa = 0, out_gpa = 0;
  auto* in = static_cast<uint8_t*>(dev.Allocate(len, &in_gpa));
  auto* out = static_cast<uint8_t*>(dev.Allocate(len, &out_gpa));
  if (in == nullptr || out == nullptr) return "allocation failed";
  auto pattern = Pattern(tag, len);
  std::memcpy(in, pattern.data(), len);
  std::memset(out, 0, len);
  Buffer r{in_gpa, static_cast<uint32_t>(len)}, w{out_gpa, static_cast<uint32_t>(len)};
  std::string err;
  Status s = dev.AddChain(q, {&r, 1}, {&w, 1}, tag, nullptr, indirect);
  if (s.ok()) s = dev.Kick(q);
  Completion c{};
  size_t n = 0;
  if (s.ok()) s = dev.WaitUsed(q, kWait, &c, 1, &n, spin);
  if (!s.ok()) {
    err = s.ToString();
  } else if (n != 1 || c.cookie != tag || c.len != len) {
    err = "bad completion: cookie " + std::to_string(c.cookie) + " len " + std::to_string(c.len);
  } else if (std::memcmp(out, pattern.data(), len) != 0) {
    err = "echoed bytes differ";
  }
  dev.Free(in);
  dev.Free(out);
  return err;
}

// Verified echo requests one after another, over every queue, on a thread of
// their own until Stop: what the tests run while the back-end is upgraded or
// crashes under the front-end.
class EchoLoad {
 public:
  explicit EchoLoad(VirtioUser& dev, size_t len = 512)
      : thread_([this, &dev, len] {
          for (uint32_t i = 0; !stop_.load(); ++i) {
            std::string e = EchoOnce(dev, static_cast<uint16_t>(i % dev.num_queues()), i, len);
            if (!e.empty()) {
              error_ = "request " + std::to_string(i) + ": " + e;
              failed_ = true;
              return;
            }
            echoed_.fetch_add(1);
          }
        }) {}
  ~EchoLoad() { Stop(); }
  // Waits until n more requests were echoed, or one failed.
  void WaitFor(uint64_t n) {
    const uint64_t target = echoed_.load() + n;
    while (echoed_.load() < target && !failed_.load()) std::this_thread::sleep_for(1ms);
  }
  bool failed() const { return failed_.load(); }
  // Stops and returns the first failure, empty when none.
  std::string Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return error_;
  }

 private:
  std::atomic<bool> stop_{false}, failed_{false};
  std::atomic<uint64_t> echoed_{0};
  std::string error_;
  std::thread thread_;  // last: starts once the members it uses exist
};

// Runs echo load on dev while `replace` puts a new back-end process in its
// place `rounds` times (an upgrade, or a kill and restart): replace returns
// the new process's pid, or -1 with *error. Returns what went wrong: a
// request that failed, a round that made no new process, a front-end that
// had to connect again; empty when nothing did.
inline std::string EchoThroughReplacements(VirtioUser& dev, pid_t first, int rounds,
                                           const std::function<pid_t(std::string*)>& replace) {
  EchoLoad load(dev);
  std::vector<pid_t> pids = {first};
  for (int round = 0; round < rounds && !load.failed(); ++round) {
    load.WaitFor(20);
    std::string error;
    const pid_t pid = replace(&error);
    if (pid < 0) {
      load.Stop();
      return "round " + std::to_string(round) + ": " + error;
    }
    pids.push_back(pid);
  }
  load.WaitFor(20);
  if (std::string e = load.Stop(); !e.empty()) return e;
  std::sort(pids.begin(), pids.end());
  if (std::unique(pids.begin(), pids.end()) != pids.end()) return "a round made no new process";
  return dev.connected() ? "" : "the front-end lost its connection";
}

}  // namespace vdev::frontend

#endif  // TESTS_INTEGRATION_VDEV_ECHO_CLIENT_H_
