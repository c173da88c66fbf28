// The virtio-user side of the echo device as the integration tests use it:
// one verified request/response, and a connect that waits for the server.
#ifndef TESTS_INTEGRATION_VDEV_ECHO_CLIENT_H_
#define TESTS_INTEGRATION_VDEV_ECHO_CLIENT_H_

#include <chrono>
#include <cstring>
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
// success, else what went wrong.
inline std::string EchoOnce(VirtioUser& dev, uint16_t q, uint32_t tag, size_t len = 64,
                            bool indirect = false) {
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
  if (s.ok()) s = dev.WaitUsed(q, kWait, &c, 1, &n);
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

}  // namespace vdev::frontend

#endif  // TESTS_INTEGRATION_VDEV_ECHO_CLIENT_H_
