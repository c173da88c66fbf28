// Service counters and their Prometheus text exposition. Counters are
// lock-free atomics updated on the request path; Format() renders them
// together with gauges sampled at scrape time.
#ifndef HZ_SERVICE_METRICS_H_
#define HZ_SERVICE_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "hz/service/coll_backend.h"
#include "protocol/harmonaize.h"

namespace hz::service {

// Values read at scrape time from the service's state.
struct MetricsSnapshot {
  uint64_t vms_bound = 0;
  uint64_t vms_connected = 0;
  uint64_t tenants = 0;
  uint64_t regions = 0;
  uint64_t region_bytes = 0;
  uint64_t device_communicators = 0;  // communicator handles held by devices
  bool draining = false;
  const BackendStats* engine = nullptr;  // absent without a collective engine
  // tenant -> the weight the collective engine schedules it with
  std::vector<std::pair<std::string, uint32_t>> coll_weights;
};

class Metrics {
 public:
  // Every opcode of protocol/harmonaize.h has a slot; others count as UNKNOWN.
  static constexpr size_t kOpcodeSlots = 40;

  void CountRequest(uint16_t opcode, uint32_t status);
  void AddBytes(uint16_t opcode, uint64_t bytes);
  // Chains completed with used length 0 (no room for hz_status).
  void CountDropped() { dropped_.fetch_add(1, std::memory_order_relaxed); }

  uint64_t requests(uint16_t opcode, uint32_t status) const;
  uint64_t bytes(uint16_t opcode) const;
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

  // Prometheus text format 0.0.4.
  std::string Format(const MetricsSnapshot& snap) const;

 private:
  static size_t Slot(uint16_t opcode);
  std::array<std::array<std::atomic<uint64_t>, HZ_S_MAX + 1>, kOpcodeSlots> requests_{};
  std::array<std::atomic<uint64_t>, kOpcodeSlots> bytes_{};
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace hz::service

#endif  // HZ_SERVICE_METRICS_H_
