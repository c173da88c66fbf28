// Session-level state of one per-VM device that its family handlers read:
// what HELLO granted, whether the device drains, which rings exist, and the
// request counters. Executor only, except where noted.
#ifndef HZ_SERVICE_DEVICE_STATE_H_
#define HZ_SERVICE_DEVICE_STATE_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "hz/common/status.h"
#include "hz/service/metrics.h"
#include "protocol/harmonaize.h"
#include "vdev/device.h"

namespace hz::service {

// The HELLO session and the drain state.
class SessionState {
 public:
  // service_draining: the service's flag (may be null in tests); it outlives
  // every engine, so engine threads may read it too.
  explicit SessionState(const std::atomic<bool>* service_draining);

  bool hello() const { return hello_; }
  uint64_t features() const { return features_; }
  uint64_t id() const { return id_; }
  // The feature HZ_F_<bit> was granted to this session.
  bool Granted(unsigned bit) const { return (features_ & (1ull << bit)) != 0; }
  // The device drained, or the service is draining: requests are refused.
  bool draining() const;
  const std::atomic<bool>* service_draining() const { return service_draining_; }

  void Begin(uint64_t features);  // HELLO succeeded
  void End();                     // the session ended; the next one gets a new id
  void MarkDrained() { drained_ = true; }
  // A live upgrade: the session goes on in the next process with the same
  // id and features. Restore checks what it is given against the features
  // this process offers.
  void Save(nlohmann::json* out) const;
  Status Restore(const nlohmann::json& in, uint64_t offered);

 private:
  const std::atomic<bool>* service_draining_;
  bool hello_ = false;
  bool drained_ = false;
  uint64_t features_ = 0;
  uint64_t id_;
};

// The device's rings. A ring's generation changes whenever its queue starts,
// stops or resets, so an answer can tell whether the ring its request came
// from still exists.
class QueueSlots {
 public:
  static constexpr size_t kMaxQueues = HZ_VQ_REQUEST_BASE + HZ_MAX_REQUEST_QUEUES;

  void Start(vdev::Queue& queue);
  void Stop(uint16_t index);
  void StopAll();

  // The started queue at index, or null.
  vdev::Queue* queue(uint16_t index) const { return slots_[index].queue; }
  uint64_t gen(uint16_t index) const { return slots_[index].gen; }
  // The queue at index if it still carries the ring of generation gen.
  vdev::Queue* Live(uint16_t index, uint64_t gen) const;
  std::vector<uint16_t> Started() const;

 private:
  struct Slot {
    vdev::Queue* queue = nullptr;
    uint64_t gen = 0;
  };
  std::array<Slot, kMaxQueues> slots_{};
  uint64_t next_gen_ = 1;
};

// Requests answered by one device: its own counters (read from any thread),
// its tenant's and the service's metrics (may be null in tests).
class RequestCounters {
 public:
  RequestCounters(Metrics* metrics, const std::string& tenant)
      : metrics_(metrics), tenant_(metrics != nullptr ? metrics->ForTenant(tenant) : nullptr) {}

  // A request completed; `taken` is when the device took it off its queue.
  void Count(uint16_t opcode, uint32_t status, std::chrono::steady_clock::time_point taken);
  // A chain without room for hz_status, completed with used length 0.
  void CountDropped();
  void AddBytes(uint16_t opcode, uint64_t bytes);

  uint64_t requests() const { return requests_.load(); }
  uint64_t errors() const { return errors_.load(); }

 private:
  Metrics* metrics_;
  std::shared_ptr<TenantRequestCounters> tenant_;
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> errors_{0};
};

}  // namespace hz::service

#endif  // HZ_SERVICE_DEVICE_STATE_H_
