// The echo device the vdev integration tests and benchmarks run against.
#ifndef TESTS_INTEGRATION_VDEV_ECHO_DEVICE_H_
#define TESTS_INTEGRATION_VDEV_ECHO_DEVICE_H_

#include <algorithm>
#include <memory>
#include <vector>

#include "vdev/device.h"

namespace vdev::testing {

// Copies each chain's readable bytes into its writable part.
class LocalEchoDevice final : public Device {
 public:
  static constexpr uint16_t kQueues = 4;
  uint64_t Features() const override { return (1ull << 28) | (1ull << 29); }
  uint16_t NumQueues() const override { return kQueues; }
  std::vector<uint8_t> ConfigSpace() const override {
    std::vector<uint8_t> c(64);
    for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<uint8_t>(i * 3 + 1);
    return c;
  }
  void OnKick(Queue& queue) override {
    Chain chain;
    std::vector<uint8_t> buf;
    while (queue.Pop(&chain)) {
      buf.resize(chain.readable_bytes());
      chain.Read(0, buf.data(), buf.size());
      queue.Complete(chain, static_cast<uint32_t>(chain.Write(0, buf.data(), buf.size())));
    }
    queue.Flush();
  }
};

inline DeviceFactory MakeEchoFactory() {
  return [](const std::string&) { return std::make_unique<LocalEchoDevice>(); };
}

}  // namespace vdev::testing

#endif  // TESTS_INTEGRATION_VDEV_ECHO_DEVICE_H_
