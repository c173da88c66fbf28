// Tenants known to the service and their quotas. The operator creates them;
// a VM socket is bound to exactly one tenant, and everything a VM creates
// (regions, communicators) is accounted to and scoped by that tenant.
#ifndef HZ_SERVICE_TENANTS_H_
#define HZ_SERVICE_TENANTS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "hz/common/status.h"
#include "hz/common/tenant_id.h"
#include "hz/service/config.h"
#include "hz/service/features.h"
#include "protocol/harmonaize.h"

namespace hz::service {

struct TenantSpec {
  std::string name;
  uint32_t weight = 1;                 // share under contention, 1..1000
  uint16_t priority = HZ_PRIO_NORMAL;  // enum hz_priority_class
  TenantLimits limits;
  // Open negotiations (NEG_REQUEST beyond them: ELIMIT); 0: the service's
  // [negotiation] max_open_per_tenant.
  uint32_t max_open_negotiations = 0;
  // The tenant's own checkpoint caps: bytes on disk (committed and in
  // flight) and staging held at once; 0: [checkpoint] tenant_disk_bytes and
  // tenant_staging_bytes. The weighted shares apply besides.
  uint64_t ckpt_disk_bytes = 0;
  uint64_t ckpt_staging_bytes = 0;
  // HZ_F_* bits HELLO may grant the tenant's sessions (SPEC §4.2), at
  // creation; Tenant::features() is the allowance now.
  uint64_t features = kEveryFeature;
  // How long its HZ_COMM_F_LOW_LATENCY communicators keep a connection
  // thread polling after each operation (SPEC §7.3.2), up to kMaxPollUs;
  // 0 grants the flag no effect. Unset: [device] low_latency_poll_us.
  std::optional<uint32_t> latency_poll_us;
};

// The window its low-latency communicators are polled for: its own, else
// the device's default.
inline uint32_t LatencyPollUs(const TenantSpec& spec, uint32_t device_default_us) {
  return spec.latency_poll_us.value_or(device_default_us);
}

// One tenant. Usage counters are shared by every VM of the tenant.
class Tenant {
 public:
  explicit Tenant(TenantSpec spec)
      : spec_(std::move(spec)), id_(spec_.name), features_(spec_.features) {}

  const TenantSpec& spec() const { return spec_; }
  const std::string& name() const { return spec_.name; }
  // What the engines know the tenant by.
  const TenantId& id() const { return id_; }

  // The features HELLO may grant (SPEC §4.2). The operator changes them on
  // a live tenant; a session keeps what its HELLO granted until its next HELLO.
  uint64_t features() const { return features_.load(std::memory_order_relaxed); }
  void set_features(uint64_t features) { features_.store(features, std::memory_order_relaxed); }

  // Reserves one region of `bytes` in `extents` extents against the quotas;
  // HZ_S_OK or HZ_S_ELIMIT.
  uint32_t ReserveRegion(uint64_t bytes, uint64_t extents);
  void ReleaseRegion(uint64_t bytes, uint64_t extents);

  struct Usage {
    uint32_t regions = 0;
    uint64_t region_bytes = 0;
    uint64_t extents = 0;
  };
  Usage usage() const;

 private:
  const TenantSpec spec_;
  const TenantId id_;
  std::atomic<uint64_t> features_;
  mutable std::mutex mu_;
  Usage usage_;
};

class TenantRegistry {
 public:
  // Tenant names: 1..64 bytes of [A-Za-z0-9._-], starting with a letter or digit.
  static bool ValidName(const std::string& name);

  // kInvalidArgument, kExists; kNotFound.
  Status Create(const TenantSpec& spec);
  Status Remove(const std::string& name);
  std::shared_ptr<Tenant> Find(const std::string& name) const;
  std::vector<std::shared_ptr<Tenant>> List() const;  // sorted by name

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Tenant>> tenants_;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_TENANTS_H_
