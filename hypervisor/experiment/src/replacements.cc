#include "replacements.h"

#include <cstring>

#include "hz/events/coarse.h"
#include "hz/scheduler/scheduler.h"

namespace hz::experiment {
namespace {

using scheduler::DeviceRef;

// Capacity is the same in every window here (as the service counts it), so
// the window only sets how finely bookings are kept, while a decision scans
// every pool over every window a replacement spans (its notice's lead, up to
// an hour): ten-minute windows keep that cheap.
constexpr uint64_t kWindowS = 600;

negotiation::NegotiationOptions Options(uint64_t seed) {
  negotiation::NegotiationOptions o;
  o.window_s = kWindowS;
  // One offer per replacement: the tenant takes the earliest, and every
  // alternative would hold devices from the queue until it lapsed. At its
  // minimum the budget still decides each tenant's first request in full.
  o.decide_budget = 1;
  o.id_key = (seed * 0x9e3779b97f4a7c15ull) | 1;  // identifiers repeat with the seed
  return o;
}

}  // namespace

Replacements::Replacements(const scheduler::Allocator& alloc, TakeFn take, GiveFn give,
                           events::EventSink* tenants, uint64_t seed)
    : alloc_(alloc), take_(std::move(take)), give_(std::move(give)), tenants_(tenants) {
  engine_ = std::make_unique<negotiation::NegotiationEngine>(Options(seed), this, this);
}

Replacements::~Replacements() = default;

Replacements::Offered Replacements::Offer(size_t job, uint32_t gpus, double now, double deadline) {
  const uint64_t t = SimSeconds(now);
  hz_neg_request r{};
  r.kind = HZ_DEV_GPU;
  r.count = static_cast<uint16_t>(gpus);
  r.locality = HZ_LOC_SAME_HOST;
  r.priority_class = HZ_PRIO_NORMAL;
  // As soon as possible, as the service's replacement request asks (starts
  // are rounded up to 10 s), and held until the job has moved: through the
  // deadline and one window to restart in.
  r.earliest_start_s = t;
  r.latest_start_s = t + events::kTimeGranularityS;
  r.duration_s = std::max(SimSeconds(deadline), t) - t + kWindowS;
  uint64_t negotiation = 0;
  if (!engine_->OfferReplacement(TenantOf(job), r, t, &negotiation).ok()) return {};
  engine_->Decide(t);
  for (const negotiation::OfferInfo& o : engine_->Offers()) {
    if (o.negotiation_id != negotiation) continue;
    const uint64_t allocation = TakeHold(o.devices);
    if (allocation == 0) break;
    holds_[o.offer.offer_id] = Hold{allocation, o.devices, false};
    ++counts_.offers_made;
    return {o.offer.offer_id, static_cast<double>(o.offer.expires_s)};
  }
  // No capacity, or devices the engine counted that are not there to hold
  // (then the provider withdraws).
  engine_->Decline(TenantOf(job), negotiation, t);
  return {};
}

Replacements::Accepted Replacements::Accept(size_t job, uint64_t offer, double now) {
  uint64_t reservation = 0;
  accepting_ = offer;
  const Status s = engine_->Accept(TenantOf(job), offer, SimSeconds(now), &reservation);
  accepting_ = 0;
  if (!s.ok()) return {};  // expired, or withdrawn
  Rekey(offer, reservation);
  ++counts_.offers_accepted;
  for (const negotiation::ReservationInfo& r : engine_->Reservations()) {
    if (r.id == reservation) return {reservation, static_cast<double>(r.start_s)};
  }
  return {reservation, now};
}

uint64_t Replacements::Ready(uint64_t reservation) {
  auto it = holds_.find(reservation);
  if (it == holds_.end() || !it->second.started) return 0;
  Refresh(it->second);
  return it->second.allocation;
}

void Replacements::Consume(size_t job, uint64_t reservation, double now) {
  auto it = holds_.find(reservation);
  if (it == holds_.end()) return;
  held_allocations_.erase(it->second.allocation);
  it->second.allocation = 0;  // the job's now
  ++counts_.honoured;
  Release(job, reservation, now);
}

void Replacements::Release(size_t job, uint64_t reservation, double now) {
  releasing_ = true;
  engine_->Release(TenantOf(job), reservation, 0, SimSeconds(now));  // an error: gone already
  releasing_ = false;
  DropHold(reservation);  // not started: the engine detached nothing
}

void Replacements::Tick(double now) {
  engine_->Tick(SimSeconds(now));
}

std::vector<uint64_t> Replacements::TakeLost() {
  std::vector<uint64_t> out(lost_.begin(), lost_.end());
  lost_.clear();
  return out;
}

std::vector<negotiation::Pool> Replacements::Pools() const {
  std::vector<negotiation::Pool> out;
  const std::vector<scheduler::Pool>& pools = alloc_.cluster().pools();
  for (uint32_t p = 0; p < pools.size(); ++p) {
    out.push_back({p, scheduler::WireKind(pools[p].kind), pools[p].host});
  }
  return out;
}

uint32_t Replacements::Capacity(uint32_t pool, uint64_t /*window*/) const {
  const scheduler::Pool& p = alloc_.cluster().pools()[pool];
  uint32_t n = 0;
  for (uint32_t i : p.devices) {
    const DeviceRef d{p.host, i};
    if (alloc_.IsFailed(d)) continue;
    const uint64_t owner = alloc_.Owner(d);
    if (owner == 0 || held_allocations_.count(owner) != 0) ++n;
  }
  return n;
}

Status Replacements::Attach(const TenantId& /*tenant*/, uint64_t reservation_id,
                            const std::vector<negotiation::PoolCount>& /*devices*/) {
  if (holds_.count(reservation_id) == 0 && accepting_ != 0) Rekey(accepting_, reservation_id);
  auto it = holds_.find(reservation_id);
  if (it == holds_.end()) return Status::State("nothing held for the reservation");
  Refresh(it->second);
  if (it->second.allocation == 0) return Status::State("the held devices are gone");
  it->second.started = true;
  return Status::Ok();
}

Status Replacements::Detach(const TenantId& /*tenant*/, uint64_t reservation_id, uint32_t /*count*/,
                            std::vector<negotiation::PoolCount>* detached) {
  // Only whole reservations are detached here: the tenant releases all of
  // one, and the engine ends or revokes all of one.
  detached->clear();
  auto it = holds_.find(reservation_id);
  if (it == holds_.end()) return Status::NotFound("nothing held for the reservation");
  *detached = it->second.devices;
  if (!releasing_) lost_.insert(reservation_id);
  DropHold(reservation_id);
  return Status::Ok();
}

uint32_t Replacements::DevicesHeld(const TenantId& /*tenant*/, hz_device_kind /*kind*/) const {
  return 0;  // read only into event payloads, which nothing here acts on
}

Status Replacements::Publish(const TenantId& tenant, const events::EventSpec& spec, uint64_t* seq) {
  if (seq != nullptr) *seq = 0;
  if (spec.topic == HZ_TOPIC_NEGOTIATION) Dropped(spec);
  return tenants_ ? tenants_->Publish(tenant, spec, seq) : Status::Ok();
}

void Replacements::Dropped(const events::EventSpec& spec) {
  events::NegotiationPayload p{};
  std::memcpy(&p, spec.payload.data(), sizeof(p));
  switch (spec.kind) {
    case events::kNegotiationOfferExpired:
    case events::kNegotiationOfferWithdrawn:
      DropHold(p.offer_id);
      break;
    case events::kNegotiationReservationRevoked:
      DropHold(p.reservation_id);
      lost_.insert(p.reservation_id);
      break;
  }
}

uint64_t Replacements::TakeHold(const std::vector<negotiation::PoolCount>& devices) {
  std::vector<DeviceRef> chosen;
  for (const negotiation::PoolCount& pc : devices) {
    const scheduler::Pool& p = alloc_.cluster().pools()[pc.pool];
    uint32_t left = pc.count;
    for (uint32_t i = 0; i < p.devices.size() && left > 0; ++i) {
      const DeviceRef d{p.host, p.devices[i]};
      if (alloc_.Owner(d) == 0 && !alloc_.IsFailed(d)) {
        chosen.push_back(d);
        --left;
      }
    }
    if (left > 0) return 0;
  }
  const uint64_t allocation = take_(chosen);
  if (allocation != 0) held_allocations_.insert(allocation);
  return allocation;
}

void Replacements::Refresh(Hold& hold) {
  const scheduler::Allocation* a = hold.allocation ? alloc_.Find(hold.allocation) : nullptr;
  if (a == nullptr) return;
  bool failed = false;
  for (DeviceRef d : a->devices) failed = failed || alloc_.IsFailed(d);
  if (!failed) return;
  held_allocations_.erase(hold.allocation);
  give_(hold.allocation);
  hold.allocation = TakeHold(hold.devices);
}

void Replacements::DropHold(uint64_t id) {
  auto it = holds_.find(id);
  if (it == holds_.end()) return;
  if (it->second.allocation != 0) {
    held_allocations_.erase(it->second.allocation);
    give_(it->second.allocation);
  }
  holds_.erase(it);
}

void Replacements::Rekey(uint64_t from, uint64_t to) {
  auto it = holds_.find(from);
  if (it == holds_.end()) return;
  holds_[to] = it->second;
  holds_.erase(it);
}

}  // namespace hz::experiment
