// A toy device for tests, benchmarks and VM bring-up: every chain's readable
// bytes are copied into its writable bytes, and the chain is completed with
// the number of bytes written (min of the two sizes).
//
// Config space (config_size bytes, at most 256): bytes 0-3 "ECHO", bytes 4-5
// the queue count (little-endian), bytes 6-7 zero, then byte i holds i & 0xff.
// Bytes 0-7 are read-only; SET_CONFIG may write the rest, and a live upgrade
// keeps what it wrote.
#ifndef VDEV_ECHO_DEVICE_H_
#define VDEV_ECHO_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "vdev/device.h"
#include "vdev/vhost_user.h"

namespace vdev {

class EchoDevice final : public Device {
 public:
  struct Options {
    uint16_t queues = 1;
    uint32_t config_size = 8;
    uint64_t features = vu::kFRingEventIdx | vu::kFRingIndirectDesc;
    uint16_t max_queue_size = 1024;
    // Fault injection for tests: called when a queue starts, inside the
    // vhost-user message that started it, once the chains the driver made
    // available before are served there (as a device serving on threads of
    // its own may serve them). Tests crash the process in it.
    std::function<void(uint16_t queue)> on_queue_started = nullptr;
  };
  static constexpr uint32_t kReadOnlyConfigBytes = 8;

  explicit EchoDevice(Options options);

  uint64_t Features() const override { return options_.features; }
  uint16_t NumQueues() const override { return options_.queues; }
  uint16_t MaxQueueSize() const override { return options_.max_queue_size; }
  std::vector<uint8_t> ConfigSpace() const override { return config_; }
  bool SetConfig(uint32_t offset, std::span<const uint8_t> data) override;
  void OnConnect(DeviceContext& ctx) override { ctx_ = &ctx; }
  void OnKick(Queue& queue) override;
  void OnQueueStarted(Queue& queue) override {
    if (!options_.on_queue_started) return;
    OnKick(queue);
    options_.on_queue_started(queue.index());
  }
  void OnDisconnect() override { ctx_ = nullptr; }
  // The writable config bytes are the device's state: a live upgrade keeps
  // what the driver wrote there.
  bool SaveState(std::string* state) const override;
  bool RestoreState(std::string_view state) override;

  // Chains echoed so far (any thread may read).
  uint64_t chains() const { return chains_echoed_.load(std::memory_order_relaxed); }
  DeviceContext* context() const { return ctx_; }

 private:
  const Options options_;
  std::vector<uint8_t> config_;
  // Chains are popped, echoed and completed this many at a time. The array
  // is reused for every batch: no allocation per chain once warm.
  static constexpr size_t kBatch = 32;
  Chain chains_[kBatch];
  uint32_t written_[kBatch] = {};
  DeviceContext* ctx_ = nullptr;
  std::atomic<uint64_t> chains_echoed_{0};
};

// Copies min(readable, writable) bytes of a chain from its readable to its
// writable segments; returns the count. Guest buffers may alias, so it moves
// rather than copies.
size_t EchoChain(const Chain& chain);

}  // namespace vdev

#endif  // VDEV_ECHO_DEVICE_H_
