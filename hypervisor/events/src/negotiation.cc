#include "hz/events/negotiation.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "hz/events/coarse.h"

namespace hz::events {

namespace {

uint64_t RoundUpTime(uint64_t s) {
  uint64_t down = RoundDownTime(s);
  return down == s ? s : down + kTimeGranularityS;
}

// Candidate start windows scanned per request and decision, so one request
// with a wide range cannot stall the control path.
constexpr uint64_t kMaxCandidates = 4096;

}  // namespace

NegotiationEngine::NegotiationEngine(NegotiationOptions options, ResourceProvider* provider,
                                     EventSink* sink)
    : options_(options), provider_(provider), sink_(sink) {}

Status NegotiationEngine::ValidateOptions(const NegotiationOptions& o) {
  if (o.window_s < kTimeGranularityS || o.window_s % kTimeGranularityS != 0) {
    return Status::InvalidArgument("window_s must be a positive multiple of 10");
  }
  if (o.offer_ttl_s < kTimeGranularityS) return Status::InvalidArgument("offer_ttl_s below 10");
  if (o.max_rounds == 0) return Status::InvalidArgument("max_rounds is zero");
  if (o.usage_horizon_s == 0) return Status::InvalidArgument("usage_horizon_s is zero");
  if (o.max_duration_s == 0 || o.max_lookahead_s == 0) {
    return Status::InvalidArgument("max_duration_s and max_lookahead_s must be positive");
  }
  if (o.max_duration_s > (uint64_t{1} << 40) || o.max_lookahead_s > (uint64_t{1} << 40)) {
    return Status::InvalidArgument("limits too large");
  }
  return Status::Ok();
}

Status NegotiationEngine::SetWeight(const std::string& tenant, uint32_t weight) {
  if (weight == 0) return Status::InvalidArgument("weight must be at least 1");
  weights_[tenant] = weight;
  return Status::Ok();
}

Status NegotiationEngine::ValidateRequest(const hz_neg_request& r, uint64_t now) const {
  if (r.kind != HZ_DEV_GPU && r.kind != HZ_DEV_NIC) return Status::InvalidArgument("unknown kind");
  if (r.count == 0) return Status::InvalidArgument("count is zero");
  if (r.locality > HZ_LOC_SAME_GROUP) return Status::InvalidArgument("unknown locality");
  if (r.priority_class >= HZ_PRIO_MAX) return Status::InvalidArgument("unknown priority class");
  if (r.reserved != 0) return Status::InvalidArgument("reserved field is not zero");
  if (r.duration_s == 0) return Status::InvalidArgument("duration is zero");
  if (r.duration_s > options_.max_duration_s) return Status::Limit("duration too long");
  if (r.earliest_start_s > r.latest_start_s) {
    return Status::InvalidArgument("earliest_start_s after latest_start_s");
  }
  if (now > (uint64_t{1} << 62)) return Status::InvalidArgument("clock out of range");
  if (r.latest_start_s < now) return Status::InvalidArgument("start range is in the past");
  if (r.latest_start_s - now > options_.max_lookahead_s) {
    return Status::Limit("latest_start_s too far ahead");
  }
  return Status::Ok();
}

Status NegotiationEngine::CountOpen(const std::string& tenant) const {
  uint32_t open = 0;
  for (const auto& [id, n] : negotiations_) {
    if (n.tenant == tenant) ++open;
  }
  if (open >= options_.max_open_per_tenant) return Status::Limit("too many open negotiations");
  return Status::Ok();
}

Status NegotiationEngine::Submit(const std::string& tenant, const hz_neg_request& request,
                                 uint64_t now, uint64_t* negotiation_id) {
  Status s = ValidateRequest(request, now);
  if (!s.ok()) return s;
  s = CountOpen(tenant);
  if (!s.ok()) return s;
  uint64_t id = next_negotiation_++;
  Negotiation& n = negotiations_[id];
  n.tenant = tenant;
  n.request = request;
  n.state = NegState::kPending;
  n.round = 1;
  n.arrival = next_arrival_++;
  *negotiation_id = id;
  return Status::Ok();
}

Status NegotiationEngine::Counter(const std::string& tenant, uint64_t negotiation_id,
                                  const hz_neg_request& request, uint64_t now) {
  auto it = negotiations_.find(negotiation_id);
  if (it == negotiations_.end() || it->second.tenant != tenant) {
    return Status::NotFound("no such negotiation");
  }
  Negotiation& n = it->second;
  if (n.round >= options_.max_rounds) return Status::Limit("too many rounds");
  Status s = ValidateRequest(request, now);
  if (!s.ok()) return s;
  DropOffers(n);
  n.request = request;
  n.state = NegState::kPending;
  ++n.round;
  n.arrival = next_arrival_++;
  return Status::Ok();
}

uint32_t NegotiationEngine::Free(uint32_t pool, uint64_t first, uint64_t last) const {
  uint32_t free = UINT32_MAX;
  for (uint64_t w = first; w <= last && free > 0; ++w) {
    uint32_t cap = provider_->Capacity(pool, w);
    auto it = booked_.find({pool, w});
    uint32_t used = it == booked_.end() ? 0 : it->second;
    free = std::min(free, cap > used ? cap - used : 0);
  }
  return free;
}

bool NegotiationEngine::FindPlacement(const hz_neg_request& r, uint64_t first, uint64_t last,
                                      std::vector<PoolCount>* devices) const {
  struct Candidate {
    uint32_t pool;
    uint32_t host;
    uint32_t free;
  };
  std::vector<Candidate> pools;
  for (const Pool& p : provider_->Pools()) {
    if (p.kind != r.kind) continue;
    uint32_t free = Free(p.id, first, last);
    if (free > 0) pools.push_back({p.id, p.host, free});
  }
  devices->clear();
  const uint32_t want = r.count;
  // Fill from `set` (already ordered) until `want` devices are taken.
  auto fill = [&](const std::vector<Candidate>& set) {
    uint32_t left = want;
    for (const Candidate& c : set) {
      if (left == 0) break;
      uint32_t take = std::min(left, c.free);
      devices->push_back({c.pool, take});
      left -= take;
    }
  };
  switch (r.locality) {
    case HZ_LOC_SAME_GROUP: {
      // Best fit: the smallest pool that holds the request, lowest id on ties.
      const Candidate* best = nullptr;
      for (const Candidate& c : pools) {
        if (c.free < want) continue;
        if (best == nullptr || c.free < best->free) best = &c;
      }
      if (best == nullptr) return false;
      devices->push_back({best->pool, want});
      return true;
    }
    case HZ_LOC_SAME_HOST: {
      std::map<uint32_t, uint64_t> per_host;
      for (const Candidate& c : pools) per_host[c.host] += c.free;
      bool found = false;
      uint32_t host = 0;
      uint64_t best = 0;
      for (const auto& [h, free] : per_host) {
        if (free < want) continue;
        if (!found || free < best) {
          found = true;
          host = h;
          best = free;
        }
      }
      if (!found) return false;
      std::vector<Candidate> set;
      for (const Candidate& c : pools) {
        if (c.host == host) set.push_back(c);
      }
      std::stable_sort(set.begin(), set.end(),
                       [](const Candidate& a, const Candidate& b) { return a.free > b.free; });
      fill(set);
      return true;
    }
    default: {
      uint64_t total = 0;
      for (const Candidate& c : pools) total += c.free;
      if (total < want) return false;
      // Fewest pools: largest free first, lowest id on ties.
      std::stable_sort(pools.begin(), pools.end(),
                       [](const Candidate& a, const Candidate& b) { return a.free > b.free; });
      fill(pools);
      return true;
    }
  }
}

void NegotiationEngine::Book(const std::vector<PoolCount>& devices, uint64_t first, uint64_t last,
                             int64_t sign) {
  for (const PoolCount& pc : devices) {
    if (pc.count == 0) continue;
    for (uint64_t w = first; w <= last; ++w) {
      auto key = std::make_pair(pc.pool, w);
      if (sign > 0) {
        booked_[key] += pc.count;
      } else {
        auto it = booked_.find(key);
        if (it == booked_.end()) continue;  // window already collected
        it->second -= std::min(it->second, pc.count);
        if (it->second == 0) booked_.erase(it);
      }
    }
  }
}

bool NegotiationEngine::MakeOffer(uint64_t id, Negotiation& n, uint64_t now,
                                  uint64_t* next_candidate) {
  const hz_neg_request& r = n.request;
  const uint64_t W = options_.window_s;
  const uint64_t from = std::max(r.earliest_start_s, now);
  const uint64_t hi = WindowOf(r.latest_start_s);
  uint64_t lo = WindowOf(from);
  uint64_t& w = *next_candidate;
  if (w < lo) w = lo;
  uint64_t scanned = 0;
  for (; w <= hi && scanned < kMaxCandidates; ++w, ++scanned) {
    // Start at the window boundary, or inside the first window at the
    // earliest allowed time rounded up to 10 s.
    uint64_t start = w * W >= from ? w * W : RoundUpTime(from);
    if (start > r.latest_start_s) break;
    // Rounding up may cross into the next window, which the next candidate covers.
    if (WindowOf(start) != w) continue;
    uint64_t first = w;
    uint64_t last = WindowOf(start + r.duration_s - 1);
    std::vector<PoolCount> devices;
    if (!FindPlacement(r, first, last, &devices)) continue;
    Book(devices, first, last, +1);
    uint64_t offer_id = next_offer_++;
    Offer& o = offers_[offer_id];
    o.first_window = first;
    o.last_window = last;
    o.info.tenant = n.tenant;
    o.info.negotiation_id = id;
    o.info.devices = std::move(devices);
    o.info.offer.offer_id = offer_id;
    o.info.offer.start_s = start;
    o.info.offer.duration_s = r.duration_s;
    o.info.offer.expires_s = RoundDownTime(now + options_.offer_ttl_s);
    o.info.offer.count = r.count;
    o.info.offer.locality = r.locality;
    n.offers.push_back(offer_id);
    ++w;
    return true;
  }
  w = hi + 1;  // nothing more for this decision
  return false;
}

void NegotiationEngine::DropOffer(uint64_t offer_id) {
  auto it = offers_.find(offer_id);
  if (it == offers_.end()) return;
  Book(it->second.info.devices, it->second.first_window, it->second.last_window, -1);
  auto nit = negotiations_.find(it->second.info.negotiation_id);
  if (nit != negotiations_.end()) std::erase(nit->second.offers, offer_id);
  offers_.erase(it);
}

void NegotiationEngine::DropOffers(Negotiation& n) {
  std::vector<uint64_t> ids = n.offers;
  for (uint64_t id : ids) DropOffer(id);
  n.offers.clear();
}

void NegotiationEngine::ExpireOffers(uint64_t now) {
  std::vector<uint64_t> expired;
  for (const auto& [id, o] : offers_) {
    if (now >= o.info.offer.expires_s) expired.push_back(id);
  }
  for (uint64_t id : expired) DropOffer(id);
}

void NegotiationEngine::Usage(const std::string& tenant, uint64_t now, uint64_t* device_seconds,
                              uint32_t* weight) const {
  uint64_t sum = 0;
  for (const auto& [id, r] : reservations_) {
    if (r.info.tenant != tenant || r.info.state == ReservationState::kRevoked) continue;
    if (r.info.accepted_s + options_.usage_horizon_s <= now) continue;
    sum += r.device_seconds;
  }
  *device_seconds = sum;
  auto it = weights_.find(tenant);
  *weight = it == weights_.end() ? 1 : it->second;
}

std::vector<Decision> NegotiationEngine::Decide(uint64_t now) {
  Tick(now);
  struct Key {
    uint64_t id;
    uint64_t usage;
    uint32_t weight;
    uint8_t priority;
    uint64_t arrival;
  };
  std::vector<Key> order;
  std::map<std::string, std::pair<uint64_t, uint32_t>> usage;
  for (const auto& [id, n] : negotiations_) {
    if (n.state != NegState::kPending) continue;
    auto u = usage.find(n.tenant);
    if (u == usage.end()) {
      std::pair<uint64_t, uint32_t> v;
      Usage(n.tenant, now, &v.first, &v.second);
      u = usage.emplace(n.tenant, v).first;
    }
    order.push_back({id, u->second.first, u->second.second, n.request.priority_class, n.arrival});
  }
  std::sort(order.begin(), order.end(), [](const Key& a, const Key& b) {
    // usage_a / weight_a < usage_b / weight_b, exactly.
    unsigned __int128 ua = static_cast<unsigned __int128>(a.usage) * b.weight;
    unsigned __int128 ub = static_cast<unsigned __int128>(b.usage) * a.weight;
    if (ua != ub) return ua < ub;
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.arrival != b.arrival) return a.arrival < b.arrival;
    return a.id < b.id;
  });

  std::map<uint64_t, uint64_t> scan;
  // First pass: everyone's earliest feasible offer, in order. Second pass:
  // alternatives, in the same order, while capacity lasts.
  for (const Key& k : order) MakeOffer(k.id, negotiations_[k.id], now, &scan[k.id]);
  for (const Key& k : order) {
    Negotiation& n = negotiations_[k.id];
    while (n.offers.size() < HZ_NEG_MAX_OFFERS && MakeOffer(k.id, n, now, &scan[k.id])) {
    }
  }

  std::vector<Decision> decisions;
  for (const Key& k : order) {
    Negotiation& n = negotiations_[k.id];
    n.state = NegState::kOpen;
    Decision d;
    d.tenant = n.tenant;
    d.result.negotiation_id = k.id;
    d.result.round = n.round;
    for (uint64_t offer_id : n.offers) d.offers.push_back(offers_[offer_id].info.offer);
    d.result.num_offers = static_cast<uint32_t>(d.offers.size());
    decisions.push_back(std::move(d));
  }
  return decisions;
}

Status NegotiationEngine::Accept(const std::string& tenant, uint64_t offer_id, uint64_t now,
                                 uint64_t* reservation_id) {
  ExpireOffers(now);
  auto it = offers_.find(offer_id);
  if (it == offers_.end() || it->second.info.tenant != tenant) {
    return Status::NotFound("no such offer (unknown or expired)");
  }
  Offer offer = it->second;
  offers_.erase(it);  // its booking passes to the reservation
  hz_device_kind kind = HZ_DEV_GPU;
  auto nit = negotiations_.find(offer.info.negotiation_id);
  if (nit != negotiations_.end()) {
    kind = static_cast<hz_device_kind>(nit->second.request.kind);
    std::erase(nit->second.offers, offer_id);
    DropOffers(nit->second);
    negotiations_.erase(nit);
  }
  uint64_t id = next_reservation_++;
  Reservation& r = reservations_[id];
  r.info.id = id;
  r.info.tenant = tenant;
  r.info.negotiation_id = offer.info.negotiation_id;
  r.info.start_s = offer.info.offer.start_s;
  r.info.duration_s = offer.info.offer.duration_s;
  r.info.accepted_s = now;
  r.info.count = offer.info.offer.count;
  r.info.devices = offer.info.devices;
  r.info.state = ReservationState::kAccepted;
  r.first_window = offer.first_window;
  r.last_window = offer.last_window;
  r.device_seconds = uint64_t{r.info.count} * r.info.duration_s;
  r.info.kind = kind;
  *reservation_id = id;
  StartAndEnd(now);
  return Status::Ok();
}

Status NegotiationEngine::Decline(const std::string& tenant, uint64_t negotiation_id,
                                  uint64_t now) {
  ExpireOffers(now);
  auto it = negotiations_.find(negotiation_id);
  if (it == negotiations_.end() || it->second.tenant != tenant) {
    return Status::NotFound("no such negotiation");
  }
  DropOffers(it->second);
  negotiations_.erase(it);
  return Status::Ok();
}

Status NegotiationEngine::Release(const std::string& tenant, uint64_t reservation_id,
                                  uint32_t count, uint64_t now) {
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end() || it->second.info.tenant != tenant) {
    return Status::NotFound("no such reservation");
  }
  Reservation& r = it->second;
  if (r.info.state != ReservationState::kAccepted && r.info.state != ReservationState::kActive) {
    return Status::State("reservation is no longer held");
  }
  if (count == 0) count = r.info.count;
  if (count > r.info.count) return Status::InvalidArgument("releasing more devices than held");

  // Give back from the last pools first.
  std::vector<PoolCount> released;
  uint32_t left = count;
  for (auto pc = r.info.devices.rbegin(); pc != r.info.devices.rend() && left > 0; ++pc) {
    uint32_t take = std::min(left, pc->count);
    released.push_back({pc->pool, take});
    pc->count -= take;
    left -= take;
  }
  std::erase_if(r.info.devices, [](const PoolCount& pc) { return pc.count == 0; });
  if (r.info.state == ReservationState::kActive) {
    Status s = provider_->Detach(tenant, reservation_id, released);
    if (!s.ok()) spdlog::warn("negotiation: detach for release failed: {}", s.ToString());
  }
  Book(released, std::max(r.first_window, WindowOf(now)), r.last_window, -1);
  uint64_t end = r.info.start_s + r.info.duration_s;
  uint64_t remaining =
      end > std::max(now, r.info.start_s) ? end - std::max(now, r.info.start_s) : 0;
  r.device_seconds -= std::min(r.device_seconds, uint64_t{count} * remaining);
  r.info.count -= count;
  bool was_active = r.info.state == ReservationState::kActive;
  if (r.info.count == 0) r.info.state = ReservationState::kReleased;
  PublishTo(tenant, MakeReservationCapacity(kCapacityReservationReleased, reservation_id, count,
                                            DevicesOf(tenant), r.info.kind));
  if (was_active) NotifyAllocation(tenant);
  return Status::Ok();
}

void NegotiationEngine::EndReservation(Reservation& r, ReservationState state, uint64_t now) {
  if (r.info.state == ReservationState::kActive) {
    Status s = provider_->Detach(r.info.tenant, r.info.id, r.info.devices);
    if (!s.ok()) spdlog::warn("negotiation: detach failed: {}", s.ToString());
  }
  Book(r.info.devices, std::max(r.first_window, WindowOf(now)), r.last_window, -1);
  r.info.state = state;
}

Status NegotiationEngine::Revoke(uint64_t reservation_id, RevokeReason reason, uint64_t now) {
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end()) return Status::NotFound("no such reservation");
  Reservation& r = it->second;
  if (r.info.state != ReservationState::kAccepted && r.info.state != ReservationState::kActive) {
    return Status::State("reservation is no longer held");
  }
  bool was_active = r.info.state == ReservationState::kActive;
  EndReservation(r, ReservationState::kRevoked, now);
  PublishTo(r.info.tenant,
            MakeNegotiation(kNegotiationRevoked, r.info.negotiation_id, reservation_id, 0, reason));
  if (was_active) NotifyAllocation(r.info.tenant);
  return Status::Ok();
}

void NegotiationEngine::StartAndEnd(uint64_t now) {
  for (auto& [id, r] : reservations_) {
    if (r.info.state == ReservationState::kAccepted && r.info.start_s <= now) {
      Status s = provider_->Attach(r.info.tenant, id, r.info.devices);
      if (!s.ok()) {
        spdlog::warn("negotiation: attach for reservation {} failed: {}", id, s.ToString());
        EndReservation(r, ReservationState::kRevoked, now);
        PublishTo(r.info.tenant, MakeNegotiation(kNegotiationRevoked, r.info.negotiation_id, id, 0,
                                                 kRevokeAttachFailed));
        continue;
      }
      r.info.state = ReservationState::kActive;
      PublishTo(r.info.tenant,
                MakeReservationCapacity(kCapacityReservationStarted, id, r.info.count,
                                        DevicesOf(r.info.tenant), r.info.kind));
      NotifyAllocation(r.info.tenant);
    }
    if (r.info.state == ReservationState::kActive && now >= r.info.start_s + r.info.duration_s) {
      uint32_t count = r.info.count;
      EndReservation(r, ReservationState::kEnded, now);
      PublishTo(r.info.tenant, MakeReservationCapacity(kCapacityReservationEnded, id, count,
                                                       DevicesOf(r.info.tenant), r.info.kind));
      NotifyAllocation(r.info.tenant);
    }
  }
}

void NegotiationEngine::Reconcile(uint64_t now) {
  const uint64_t current = WindowOf(now);
  std::vector<std::pair<uint32_t, uint64_t>> over;
  for (const auto& [key, used] : booked_) {
    if (key.second >= current && used > provider_->Capacity(key.first, key.second)) {
      over.push_back(key);
    }
  }
  auto touches = [](const std::vector<PoolCount>& devices, uint32_t pool, uint64_t first,
                    uint64_t last, uint64_t w) {
    if (w < first || w > last) return false;
    for (const PoolCount& pc : devices) {
      if (pc.pool == pool && pc.count > 0) return true;
    }
    return false;
  };
  for (const auto& key : over) {
    const uint32_t cap = provider_->Capacity(key.first, key.second);
    for (;;) {
      auto it = booked_.find(key);
      if (it == booked_.end() || it->second <= cap) break;
      // Tentative offers go first, newest first; then reservations, newest first.
      uint64_t victim = 0;
      for (auto o = offers_.rbegin(); o != offers_.rend(); ++o) {
        if (touches(o->second.info.devices, key.first, o->second.first_window,
                    o->second.last_window, key.second)) {
          victim = o->first;
          break;
        }
      }
      if (victim != 0) {
        Offer o = offers_[victim];
        DropOffer(victim);
        PublishTo(o.info.tenant, MakeNegotiation(kNegotiationOfferWithdrawn, o.info.negotiation_id,
                                                 0, victim, kRevokeCapacityLost));
        continue;
      }
      for (auto r = reservations_.rbegin(); r != reservations_.rend(); ++r) {
        ReservationState st = r->second.info.state;
        if ((st == ReservationState::kAccepted || st == ReservationState::kActive) &&
            touches(r->second.info.devices, key.first, r->second.first_window,
                    r->second.last_window, key.second)) {
          victim = r->first;
          break;
        }
      }
      if (victim == 0) break;  // nothing left to take back; bookings are stale
      Revoke(victim, kRevokeCapacityLost, now);
    }
  }
}

void NegotiationEngine::Tick(uint64_t now) {
  ExpireOffers(now);
  StartAndEnd(now);
  Reconcile(now);
  // Windows before the current one can no longer be booked: forget them.
  const uint64_t current = WindowOf(now);
  for (auto it = booked_.begin(); it != booked_.end();) {
    it = it->first.second < current ? booked_.erase(it) : std::next(it);
  }
}

uint32_t NegotiationEngine::DevicesOf(const std::string& tenant) const {
  uint32_t n = 0;
  for (const auto& [id, r] : reservations_) {
    if (r.info.tenant == tenant && r.info.state == ReservationState::kActive) n += r.info.count;
  }
  return n;
}

void NegotiationEngine::NotifyAllocation(const std::string& tenant) {
  if (listener_) listener_(tenant, DevicesOf(tenant));
}

void NegotiationEngine::PublishTo(const std::string& tenant, const EventSpec& spec) {
  if (sink_ == nullptr) return;
  Status s = sink_->Publish(tenant, spec, nullptr);
  if (!s.ok()) spdlog::warn("negotiation: publishing to {} failed: {}", tenant, s.ToString());
}

std::vector<ReservationInfo> NegotiationEngine::Reservations() const {
  std::vector<ReservationInfo> out;
  for (const auto& [id, r] : reservations_) out.push_back(r.info);
  return out;
}

std::vector<OfferInfo> NegotiationEngine::Offers() const {
  std::vector<OfferInfo> out;
  for (const auto& [id, o] : offers_) out.push_back(o.info);
  return out;
}

uint32_t NegotiationEngine::Booked(uint32_t pool, uint64_t window) const {
  auto it = booked_.find({pool, window});
  return it == booked_.end() ? 0 : it->second;
}

}  // namespace hz::events
