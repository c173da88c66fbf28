// Service counters and their Prometheus exposition. Counters are lock-free
// atomics updated on the request path; Collect() puts them, with gauges
// sampled at scrape time, into a prometheus-cpp Registry built per scrape
// (src/metrics_families.h says why).
#ifndef HZ_SERVICE_METRICS_H_
#define HZ_SERVICE_METRICS_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hz/service/coll_backend.h"
#include "protocol/harmonaize.h"

namespace prometheus {
class Registry;
}

namespace hz::service {

// Connection-thread time a tenant's VMs were charged for their turns, summed
// over the connection threads (vdev::TurnScheduler::Charges).
struct TenantTurns {
  uint64_t nanoseconds = 0;
  uint64_t turns = 0;
};

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
  // The tenants that exist now: only their per-tenant series are exported,
  // and the counters of a removed tenant are dropped.
  std::vector<std::string> tenant_names;
  // tenant -> its turns; a tenant of tenant_names that is not here had none.
  std::map<std::string, TenantTurns> tenant_turns;
};

// What one tenant's VMs asked of the device (billing, quotas). Devices hold
// a reference, so a request completing after its tenant was removed counts
// into counters no longer exported.
struct TenantRequestCounters {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> bytes{0};
};

// The opcode family of protocol/harmonaize.h an opcode belongs to (its high
// byte): "session", "region", "communicator", "collective", "checkpoint",
// "event", "topology", "negotiation", "hint", "energy", or "unknown".
const char* OpcodeFamilyName(uint16_t opcode);

class Metrics {
 public:
  // Every opcode of protocol/harmonaize.h has a slot; others count as UNKNOWN.
  static constexpr size_t kOpcodeSlots = 40;
  // Opcode families: the high byte 0x00..0x09, and one for the rest.
  static constexpr size_t kFamilies = 11;
  // Upper bounds (seconds) of the request latency buckets; one more counts
  // the rest. From a quick control request to a checkpoint save of many GiB.
  static constexpr std::array<double, 16> kLatencyBounds = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
      0.025,   0.05,   0.1,     0.25,   0.5,   1,      5,     30};

  void CountRequest(uint16_t opcode, uint32_t status);
  void AddBytes(uint16_t opcode, uint64_t bytes);
  // Chains completed with used length 0 (no room for hz_status).
  void CountDropped() { dropped_.fetch_add(1, std::memory_order_relaxed); }
  // A request of opcode took `elapsed` from the device taking it off its
  // queue to the device completing it.
  void ObserveLatency(uint16_t opcode, std::chrono::nanoseconds elapsed);
  // The counters of tenant's requests, created on first use.
  std::shared_ptr<TenantRequestCounters> ForTenant(const std::string& tenant);

  uint64_t requests(uint16_t opcode, uint32_t status) const;
  uint64_t bytes(uint16_t opcode) const;
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

  // Adds the service's families to r (and drops the counters of tenants no
  // longer in snap.tenant_names).
  void Collect(const MetricsSnapshot& snap, prometheus::Registry* r) const;
  // Collect() into a registry of its own, in the Prometheus text format 0.0.4.
  std::string Format(const MetricsSnapshot& snap) const;

 private:
  static size_t Slot(uint16_t opcode);
  void CollectRequests(prometheus::Registry* r) const;
  void CollectLatency(prometheus::Registry* r) const;
  void CollectTenants(const std::vector<std::string>& names, prometheus::Registry* r) const;
  static void CollectTurns(const MetricsSnapshot& snap, prometheus::Registry* r);

  std::array<std::array<std::atomic<uint64_t>, HZ_S_MAX + 1>, kOpcodeSlots> requests_{};
  std::array<std::atomic<uint64_t>, kOpcodeSlots> bytes_{};
  std::atomic<uint64_t> dropped_{0};
  std::array<std::array<std::atomic<uint64_t>, kLatencyBounds.size() + 1>, kFamilies> latency_{};
  std::array<std::atomic<uint64_t>, kFamilies> latency_sum_ns_{};
  // Pruned by the (const) scrape when a tenant is gone.
  mutable std::mutex tenants_mu_;
  mutable std::map<std::string, std::shared_ptr<TenantRequestCounters>> tenants_;
};

// hz_build_info{version="<CMake project version>"} 1.
void CollectBuildInfo(prometheus::Registry* r);

}  // namespace hz::service

#endif  // HZ_SERVICE_METRICS_H_
