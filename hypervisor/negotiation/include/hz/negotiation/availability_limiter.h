// The rate limit of CAPACITY/AVAILABLE (SPEC.md §8.3.4), per tenant and
// device kind: an event is due only when the bucketed free count differs
// from the last one the tenant was told (or it was told none), and at most
// one per kind per min_interval_s. A change held back by the interval stays
// owed, so the caller can tell it once the interval has passed, unless the
// tenant stopped waiting meanwhile. Reads no clock: `now` is an argument.
#ifndef HZ_NEGOTIATION_AVAILABILITY_LIMITER_H_
#define HZ_NEGOTIATION_AVAILABILITY_LIMITER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <utility>

#include "hz/common/tenant_id.h"
#include "protocol/harmonaize.h"

namespace hz::negotiation {

class AvailabilityLimiter {
 public:
  // SPEC.md §8.3.4: at most one AVAILABLE per device kind per 60 s.
  static constexpr uint64_t kMinIntervalS = 60;

  explicit AvailabilityLimiter(uint64_t min_interval_s = kMinIntervalS)
      : interval_(min_interval_s) {}

  // `bucket` (a power-of-two bucket) devices of `kind` are free now. True
  // when the tenant is to be told so now; the bucket then counts as told.
  // False when it was told this bucket last (nothing owed), or when the
  // interval since its last event has not passed (the change is owed).
  bool Update(const TenantId& tenant, hz_device_kind kind, uint64_t bucket, uint64_t now);
  // Whether a change was held back for (tenant, kind) and is not told yet.
  bool Owed(const TenantId& tenant, hz_device_kind kind) const;
  // Drops what is owed to pairs for which `waiting` is false: a tenant that
  // stopped waiting is not told later. What it was told is kept.
  void KeepOwedIf(const std::function<bool(const TenantId&, hz_device_kind)>& waiting);
  // The tenant is removed: everything about it goes.
  void Forget(const TenantId& tenant);

 private:
  struct Told {
    uint64_t bucket = 0;
    uint64_t time = 0;
    bool owed = false;  // a different bucket was held back by the interval
  };
  using Key = std::pair<TenantId, int>;

  uint64_t interval_;
  std::map<Key, Told> told_;  // only pairs told at least once
};

}  // namespace hz::negotiation

#endif  // HZ_NEGOTIATION_AVAILABILITY_LIMITER_H_
