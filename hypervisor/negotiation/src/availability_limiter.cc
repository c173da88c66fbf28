#include "hz/negotiation/availability_limiter.h"

namespace hz::negotiation {

bool AvailabilityLimiter::Update(const TenantId& tenant, hz_device_kind kind, uint64_t bucket,
                                 uint64_t now) {
  auto [it, first] = told_.try_emplace(Key{tenant, static_cast<int>(kind)});
  Told& t = it->second;
  if (!first) {
    if (bucket == t.bucket) {
      t.owed = false;  // the tenant already knows this bucket
      return false;
    }
    // Written as a subtraction so that no sum can wrap; a clock that went
    // back counts as no time passed.
    if (now < t.time || now - t.time < interval_) {
      t.owed = true;
      return false;
    }
  }
  t = Told{bucket, now, false};
  return true;
}

bool AvailabilityLimiter::Owed(const TenantId& tenant, hz_device_kind kind) const {
  auto it = told_.find(Key{tenant, static_cast<int>(kind)});
  return it != told_.end() && it->second.owed;
}

void AvailabilityLimiter::KeepOwedIf(
    const std::function<bool(const TenantId&, hz_device_kind)>& waiting) {
  for (auto& [key, t] : told_) {
    if (t.owed && !waiting(key.first, static_cast<hz_device_kind>(key.second))) t.owed = false;
  }
}

void AvailabilityLimiter::Forget(const TenantId& tenant) {
  std::erase_if(told_, [&](const auto& entry) { return entry.first.first == tenant; });
}

}  // namespace hz::negotiation
