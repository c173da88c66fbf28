// What the engine tells tenants ahead of and about changes of capacity:
// preemption notices before a reservation's end (SPEC.md §8.3.3, §9.6) and
// CAPACITY/AVAILABLE to the tenants waiting for a device kind (§8.3.4).
#include <algorithm>

#include "hz/events/coarse.h"
#include "hz/negotiation/negotiation.h"

namespace hz::negotiation {

uint32_t NegotiationEngine::NoticeIndex(const Reservation& r) const {
  if (r.info.count != 1) return events::kAllDevices;
  return provider_->ReservationDeviceIndex(r.info.tenant, r.info.id).value_or(events::kAllDevices);
}

// Once per reservation, once it has started and its end is at most the
// notice's lead away. A reservation that reaches its end without one (a
// lead longer than its whole duration is still given at its start; only a
// reservation started at or after its end has none) gets STARTED alone.
// Not APPROVABLE: the provider gains nothing from taking devices early,
// and a tenant done with them early gives them back with NEG_RELEASE.
void NegotiationEngine::NoticePreemption(Reservation& r, uint64_t now) {
  if (r.noticed || r.info.state != ReservationState::kActive) return;
  const uint64_t end = r.info.start_s + r.info.duration_s;
  if (now >= end || end - now > options_.preemption_notice_s) return;
  r.noticed = true;
  r.notice_devices = r.info.count;
  r.notice_index = NoticeIndex(r);
  PublishTo(r.info.tenant,
            events::MakePreemption(events::kPreemptionScheduled, end, r.notice_devices,
                                   r.notice_index, /*approvable=*/false));
}

// The devices are being taken now (the end, or a revocation after the
// notice); published before they are detached, so the index is still theirs.
void NegotiationEngine::PublishPreemptionStarted(const Reservation& r) {
  PublishTo(r.info.tenant, events::MakePreemption(events::kPreemptionStarted, 0, r.info.count,
                                                  NoticeIndex(r), /*approvable=*/false));
}

// The tenant gave every device back after the notice: nothing will be taken.
void NegotiationEngine::PublishPreemptionCancelled(const Reservation& r) {
  PublishTo(r.info.tenant, events::MakePreemption(events::kPreemptionCancelled, 0, r.notice_devices,
                                                  r.notice_index, /*approvable=*/false));
}

// Devices of each of `kinds` neither held by an offer or reservation nor
// otherwise taken, in the current window.
std::map<hz_device_kind, uint64_t> NegotiationEngine::FreeNow(const std::set<hz_device_kind>& kinds,
                                                              uint64_t now) const {
  std::map<hz_device_kind, uint64_t> free;
  for (hz_device_kind kind : kinds) free[kind] = 0;
  const uint64_t w = WindowOf(now);
  for (const Pool& p : provider_->Pools()) {
    auto it = free.find(p.kind);
    if (it == free.end()) continue;
    const uint32_t capacity = CapacityOf(p.id, w);
    const uint32_t used = Booked(p.id, w);
    if (capacity > used) it->second += capacity - used;
  }
  return free;
}

// A tenant waits for a kind while a negotiation of its own for the kind was
// decided with no offer to accept. (An undecided one is not waiting yet: its
// decision point sees the capacity anyway, and does so without the engine's
// lock, where this tick holds it.) When
// the free devices of a kind rose since the last tick, each tenant waiting
// for it is told the bucketed count, as the limiter allows; a count the
// limiter held back is told at a later tick once allowed.
void NegotiationEngine::NoticeAvailability(uint64_t now) {
  std::map<hz_device_kind, std::set<TenantId>> waiting;
  std::set<hz_device_kind> kinds;
  for (const auto& [id, n] : negotiations_) {
    if (n.provider_initiated || !n.offers.empty() || n.state == NegState::kPending) continue;
    const auto kind = static_cast<hz_device_kind>(n.request.kind);
    waiting[kind].insert(n.tenant);
    kinds.insert(kind);
  }
  availability_.KeepOwedIf([&](const TenantId& tenant, hz_device_kind kind) {
    auto it = waiting.find(kind);
    return it != waiting.end() && it->second.count(tenant) != 0;
  });
  if (kinds.empty()) {
    last_free_.clear();  // nobody waits: the next waiter starts from a fresh count
    return;
  }
  const std::map<hz_device_kind, uint64_t> free = FreeNow(kinds, now);
  for (const auto& [kind, tenants] : waiting) {
    const uint64_t count = free.at(kind);
    auto last = last_free_.find(kind);
    const bool freed = last != last_free_.end() && count > last->second;
    for (const TenantId& tenant : tenants) {
      if (!freed && !availability_.Owed(tenant, kind)) continue;
      if (availability_.Update(tenant, kind, events::CapacityBucket(count), now)) {
        PublishTo(tenant, events::MakeCapacityAvailable(kind, count));
      }
    }
  }
  last_free_ = free;
}

}  // namespace hz::negotiation
