#include "hz/negotiation/negotiation.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "hz/events/coarse.h"

namespace hz::negotiation {

namespace {

uint64_t RoundUpTime(uint64_t s) {
  uint64_t down = events::RoundDownTime(s);
  return down == s ? s : down + events::kTimeGranularityS;
}

// Candidate start windows examined per request and decision point, so one
// request with a wide range cannot stall the control path (SPEC.md §9.2).
constexpr uint64_t kMaxCandidates = 4096;

// Mixes a seed into a second key word (tests give one 64-bit key).
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

uint64_t Rotl(uint64_t x, int b) {
  return (x << b) | (x >> (64 - b));
}

// SipHash-2-4 of one 64-bit word under the 128-bit key (k0, k1): a keyed
// pseudo-random function, so identifiers reveal nothing about the counter
// (nor other tenants' activity) to anyone without the key.
uint64_t SipHash24(uint64_t k0, uint64_t k1, uint64_t m) {
  uint64_t v0 = 0x736f6d6570736575ull ^ k0;
  uint64_t v1 = 0x646f72616e646f6dull ^ k1;
  uint64_t v2 = 0x6c7967656e657261ull ^ k0;
  uint64_t v3 = 0x7465646279746573ull ^ k1;
  auto round = [&] {
    v0 += v1;
    v1 = Rotl(v1, 13);
    v1 ^= v0;
    v0 = Rotl(v0, 32);
    v2 += v3;
    v3 = Rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = Rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = Rotl(v1, 17);
    v1 ^= v2;
    v2 = Rotl(v2, 32);
  };
  v3 ^= m;
  round();
  round();
  v0 ^= m;
  const uint64_t b = uint64_t{8} << 56;  // an 8-byte message: its length, no tail
  v3 ^= b;
  round();
  round();
  v0 ^= b;
  v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) round();
  return v0 ^ v1 ^ v2 ^ v3;
}

uint32_t Sum(const std::vector<PoolCount>& devices) {
  uint32_t n = 0;
  for (const PoolCount& pc : devices) n += pc.count;
  return n;
}

// Adds (or takes back) `devices` in every window of [first, last].
void BookInto(std::map<WindowKey, uint32_t>& booked, const std::vector<PoolCount>& devices,
              uint64_t first, uint64_t last, bool add) {
  for (const PoolCount& pc : devices) {
    if (pc.count == 0) continue;
    for (uint64_t w = first; w <= last; ++w) {
      auto key = std::make_pair(pc.pool, w);
      if (add) {
        booked[key] += pc.count;
        continue;
      }
      auto it = booked.find(key);
      if (it == booked.end()) continue;  // a past window, already forgotten
      it->second -= std::min(it->second, pc.count);
      if (it->second == 0) booked.erase(it);
    }
  }
}

}  // namespace

NegotiationEngine::NegotiationEngine(NegotiationOptions options, ResourceProvider* provider,
                                     events::EventSink* sink)
    : options_(options), provider_(provider), sink_(sink) {
  if (options_.id_key == 0) {
    std::random_device rd;
    options_.id_key = (uint64_t{rd()} << 32) | rd();
    id_key2_ = (uint64_t{rd()} << 32) | rd();
  } else {
    id_key2_ = Mix(options_.id_key ^ 0x9e3779b97f4a7c15ull);
  }
}

// While one is open, the provider is asked for each (pool, window) once: a
// decision point's capacity is a snapshot.
class NegotiationEngine::CapacityScope {
 public:
  explicit CapacityScope(const NegotiationEngine& e) : e_(e), owner_(!e.caching_) {
    e_.caching_ = true;
  }
  ~CapacityScope() {
    if (!owner_) return;
    e_.caching_ = false;
    e_.capacity_cache_.clear();
  }
  CapacityScope(const CapacityScope&) = delete;
  CapacityScope& operator=(const CapacityScope&) = delete;

 private:
  const NegotiationEngine& e_;
  bool owner_;
};

uint32_t NegotiationEngine::CapacityOf(uint32_t pool, uint64_t window) const {
  if (!caching_) return provider_->Capacity(pool, window);
  auto [it, added] = capacity_cache_.try_emplace({pool, window}, 0);
  if (added) it->second = provider_->Capacity(pool, window);
  return it->second;
}

Status NegotiationEngine::ValidateOptions(const NegotiationOptions& o) {
  if (o.window_s < events::kTimeGranularityS || o.window_s % events::kTimeGranularityS != 0) {
    return Status::InvalidArgument("window_s must be a positive multiple of 10");
  }
  if (o.offer_ttl_s < events::kTimeGranularityS)
    return Status::InvalidArgument("offer_ttl_s below 10");
  if (o.max_rounds == 0) return Status::InvalidArgument("max_rounds is zero");
  if (o.usage_horizon_s == 0) return Status::InvalidArgument("usage_horizon_s is zero");
  if (o.max_duration_s == 0 || o.max_lookahead_s == 0) {
    return Status::InvalidArgument("max_duration_s and max_lookahead_s must be positive");
  }
  if (o.max_duration_s > (uint64_t{1} << 40) || o.max_lookahead_s > (uint64_t{1} << 40) ||
      o.preemption_notice_s > (uint64_t{1} << 40)) {
    return Status::InvalidArgument("limits too large");
  }
  if (o.max_open_per_tenant == 0) return Status::InvalidArgument("max_open_per_tenant is zero");
  if (o.decide_budget == 0) return Status::InvalidArgument("decide_budget is zero");
  return Status::Ok();
}

uint64_t NegotiationEngine::NewId() {
  for (;;) {
    uint64_t id = SipHash24(options_.id_key, id_key2_, ++id_counter_);
    if (id != 0 && owners_.count(id) == 0) return id;
  }
}

Status NegotiationEngine::CheckOwner(uint64_t id, const TenantId& tenant, const char* what) const {
  auto it = owners_.find(id);
  if (it == owners_.end()) return Status::NotFound(std::string("unknown ") + what);
  if (it->second.tenant != tenant)
    return Status::Permission(std::string(what) + " of another tenant");
  return Status::Ok();
}

void NegotiationEngine::CloseId(uint64_t id, uint64_t now) {
  auto it = owners_.find(id);
  if (it != owners_.end() && it->second.closed_s == 0)
    it->second.closed_s = std::max<uint64_t>(now, 1);
}

Status NegotiationEngine::SetWeight(const TenantId& tenant, uint32_t weight) {
  if (weight == 0) return Status::InvalidArgument("weight must be at least 1");
  weights_[tenant] = weight;
  return Status::Ok();
}

Status NegotiationEngine::SetMaxPriority(const TenantId& tenant, uint8_t priority_class) {
  if (priority_class >= HZ_PRIO_MAX) return Status::InvalidArgument("unknown priority class");
  max_priority_[tenant] = priority_class;
  return Status::Ok();
}

void NegotiationEngine::SetMaxOpen(const TenantId& tenant, uint32_t max_open) {
  if (max_open == 0) {
    max_open_.erase(tenant);
  } else {
    max_open_[tenant] = max_open;
  }
}

Status NegotiationEngine::ValidateRequest(const TenantId& tenant, const hz_neg_request& r,
                                          uint64_t now) const {
  // The order of SPEC.md §7.8.1's table.
  if (r.reserved != 0) return Status::NotSupported("reserved field is not zero");
  if (r.kind != HZ_DEV_GPU && r.kind != HZ_DEV_NIC) return Status::InvalidArgument("unknown kind");
  if (r.count == 0) return Status::InvalidArgument("count is zero");
  if (r.locality > HZ_LOC_SAME_GROUP) return Status::InvalidArgument("unknown locality");
  if (r.priority_class >= HZ_PRIO_MAX) return Status::InvalidArgument("unknown priority class");
  if (r.duration_s == 0) return Status::InvalidArgument("duration is zero");
  if (r.earliest_start_s > r.latest_start_s) {
    return Status::InvalidArgument("earliest_start_s after latest_start_s");
  }
  if (now > (uint64_t{1} << 62)) return Status::InvalidArgument("clock out of range");
  if (r.latest_start_s < now) return Status::InvalidArgument("start range is in the past");
  if (r.latest_start_s - now > options_.max_lookahead_s) {
    return Status::Limit("latest_start_s too far ahead");
  }
  if (r.duration_s > options_.max_duration_s) return Status::Limit("duration too long");
  auto it = max_priority_.find(tenant);
  uint8_t allowed = it == max_priority_.end() ? uint8_t{HZ_PRIO_HIGH} : it->second;
  if (r.priority_class > allowed) return Status::Permission("priority class above the allowed one");
  return Status::Ok();
}

Status NegotiationEngine::CountOpen(const TenantId& tenant) const {
  auto counted = open_by_tenant_.find(tenant);
  const uint32_t open = counted == open_by_tenant_.end() ? 0 : counted->second;
  auto it = max_open_.find(tenant);
  const uint32_t limit = it == max_open_.end() ? options_.max_open_per_tenant : it->second;
  if (open >= limit) return Status::Limit("too many open negotiations");
  return Status::Ok();
}

Status NegotiationEngine::Submit(const TenantId& tenant, const hz_neg_request& request,
                                 uint64_t now, uint64_t* negotiation_id) {
  Status s = ValidateRequest(tenant, request, now);
  if (!s.ok()) return s;
  s = CountOpen(tenant);
  if (!s.ok()) return s;
  uint64_t id = NewId();
  owners_[id] = Owner{tenant, 0};
  Negotiation& n = negotiations_[id];
  n.tenant = tenant;
  n.request = request;
  n.arrival = next_arrival_++;
  ++open_by_tenant_[tenant];
  *negotiation_id = id;
  return Status::Ok();
}

Status NegotiationEngine::OfferReplacement(const TenantId& tenant, const hz_neg_request& request,
                                           uint64_t now, uint64_t* negotiation_id) {
  hz_neg_request r = request;
  r.priority_class = std::min<uint8_t>(r.priority_class, HZ_PRIO_HIGH);
  // The provider's own request is not bound by the tenant's priority cap.
  Status s = ValidateRequest(TenantId(), r, now);
  if (!s.ok()) return s;
  uint64_t id = NewId();
  owners_[id] = Owner{tenant, 0};
  Negotiation& n = negotiations_[id];
  n.tenant = tenant;
  n.request = r;
  n.arrival = next_arrival_++;
  n.provider_initiated = true;
  *negotiation_id = id;
  return Status::Ok();
}

Status NegotiationEngine::Counter(const TenantId& tenant, uint64_t negotiation_id,
                                  const hz_neg_request& request, uint64_t now) {
  ExpireOffers(now);
  Status s = CheckOwner(negotiation_id, tenant, "negotiation");
  if (!s.ok()) return s;
  auto it = negotiations_.find(negotiation_id);
  if (it == negotiations_.end()) return Status::NotFound("negotiation is closed");
  Negotiation& n = it->second;
  s = ValidateRequest(tenant, request, now);
  if (!s.ok()) return s;
  if (n.round >= options_.max_rounds) return Status::Limit("too many rounds");
  DropOffers(n, now, /*charge=*/true);
  n.request = request;
  n.state = NegState::kPending;
  ++n.round;
  n.round_charged = false;
  n.arrival = next_arrival_++;
  return Status::Ok();
}

uint32_t NegotiationEngine::FreeIn(DecisionRound& round, uint32_t pool, uint64_t w) const {
  auto [cap, added] = round.capacity.try_emplace({pool, w}, 0);
  if (added) cap->second = provider_->Capacity(pool, w);
  auto it = round.booked.find({pool, w});
  const uint32_t used = it == round.booked.end() ? 0 : it->second;
  return cap->second > used ? cap->second - used : 0;
}

uint32_t NegotiationEngine::ScanFree(DecisionRound& round, PoolScan& s, uint64_t first,
                                     uint64_t last, uint64_t* steps) const {
  if (s.next < first) {
    s.queue.clear();
    s.next = first;
  }
  for (; s.next <= last; ++s.next, ++*steps) {
    const uint32_t free = FreeIn(round, s.pool, s.next);
    while (!s.queue.empty() && s.queue.back().second >= free) s.queue.pop_back();
    s.queue.emplace_back(s.next, free);
  }
  while (s.queue.front().first < first) s.queue.pop_front();
  ++*steps;
  return s.queue.front().second;  // the least free over [first, last]
}

bool NegotiationEngine::Place(DecisionRound& round, const hz_neg_request& r,
                              std::vector<PoolScan>& scans, uint64_t first, uint64_t last,
                              uint64_t* steps, std::vector<PoolCount>* devices) const {
  struct Candidate {
    uint32_t pool;
    uint32_t host;
    uint32_t free;
  };
  std::vector<Candidate> pools;
  for (PoolScan& scan : scans) {
    uint32_t free = ScanFree(round, scan, first, last, steps);
    if (free > 0) pools.push_back({scan.pool, scan.host, free});
  }
  devices->clear();
  const uint32_t want = r.count;
  // Takes devices from `set` in its order until `want` are taken.
  auto fill = [&](const std::vector<Candidate>& set) {
    uint32_t left = want;
    for (const Candidate& c : set) {
      if (left == 0) break;
      uint32_t take = std::min(left, c.free);
      devices->push_back({c.pool, take});
      left -= take;
    }
  };
  auto larger_first = [](const Candidate& a, const Candidate& b) { return a.free > b.free; };
  switch (r.locality) {
    case HZ_LOC_SAME_GROUP: {
      // Best fit: the smallest group that holds the request, lowest id on ties.
      const Candidate* best = nullptr;
      for (const Candidate& c : pools) {
        if (c.free >= want && (best == nullptr || c.free < best->free)) best = &c;
      }
      if (best == nullptr) return false;
      devices->push_back({best->pool, want});
      return true;
    }
    case HZ_LOC_SAME_HOST: {
      // Best fit over hosts, lowest host on ties; within it, fewest groups.
      std::map<uint32_t, uint64_t> per_host;
      for (const Candidate& c : pools) per_host[c.host] += c.free;
      bool found = false;
      uint32_t host = 0;
      uint64_t best = 0;
      for (const auto& [h, free] : per_host) {
        if (free >= want && (!found || free < best)) {
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
      std::stable_sort(set.begin(), set.end(), larger_first);
      fill(set);
      return true;
    }
    default: {
      uint64_t total = 0;
      for (const Candidate& c : pools) total += c.free;
      if (total < want) return false;
      // Fewest groups: largest free first, lowest id on ties.
      std::stable_sort(pools.begin(), pools.end(), larger_first);
      fill(pools);
      return true;
    }
  }
}

void NegotiationEngine::Book(const std::vector<PoolCount>& devices, uint64_t first, uint64_t last,
                             bool add) {
  BookInto(booked_, devices, first, last, add);
}

NegotiationEngine::OfferResult NegotiationEngine::PlanOffer(DecisionRound& round,
                                                            PlannedRequest& pr,
                                                            uint64_t* next_candidate,
                                                            uint64_t* budget) const {
  if (*budget == 0) return OfferResult::kOutOfBudget;
  const hz_neg_request& r = pr.request;
  std::vector<PoolScan> scans;  // the pools of the kind, in the provider's order
  for (const Pool& p : round.pools) {
    if (p.kind != r.kind) continue;
    PoolScan scan;
    scan.pool = p.id;
    scan.host = p.host;
    scans.push_back(std::move(scan));
  }
  uint64_t steps = 0;
  auto spend = [&] {
    const uint64_t spent = std::min(*budget, steps);
    *budget -= spent;
    round.steps += spent;
  };
  const uint64_t W = options_.window_s;
  const uint64_t e = std::max(r.earliest_start_s, round.now);
  const uint64_t hi = WindowOf(r.latest_start_s);
  uint64_t& w = *next_candidate;
  if (w < WindowOf(e)) w = WindowOf(e);
  for (uint64_t scanned = 0; w <= hi && scanned < kMaxCandidates; ++w, ++scanned) {
    // SPEC.md §9.2: the window start, or e rounded up to 10 s in e's window.
    uint64_t start = w * W >= e ? w * W : RoundUpTime(e);
    if (start > r.latest_start_s) break;
    if (WindowOf(start) != w) continue;  // rounding crossed into the next candidate
    PlannedOffer o;
    o.start_s = start;
    o.first_window = w;
    o.last_window = WindowOf(start + r.duration_s - 1);
    ++steps;
    if (!Place(round, r, scans, o.first_window, o.last_window, &steps, &o.devices)) continue;
    // Later requests of this round see the devices as taken.
    BookInto(round.booked, o.devices, o.first_window, o.last_window, /*add=*/true);
    pr.offers.push_back(std::move(o));
    ++w;
    spend();
    return OfferResult::kOffer;
  }
  w = hi + 1;  // nothing more for this decision point
  spend();
  return OfferResult::kNone;
}

bool NegotiationEngine::StillFits(const DecisionRound& round, const PlannedOffer& o) const {
  for (const PoolCount& pc : o.devices) {
    for (uint64_t w = o.first_window; w <= o.last_window; ++w) {
      auto cap = round.capacity.find({pc.pool, w});
      const uint32_t capacity = cap == round.capacity.end() ? 0 : cap->second;
      auto it = booked_.find({pc.pool, w});
      const uint32_t used = it == booked_.end() ? 0 : it->second;
      if (capacity < used || capacity - used < pc.count) return false;
    }
  }
  return true;
}

void NegotiationEngine::AddOffer(uint64_t negotiation_id, Negotiation& n, const PlannedOffer& po,
                                 uint64_t now) {
  Book(po.devices, po.first_window, po.last_window, /*add=*/true);
  uint64_t offer_id = NewId();
  owners_[offer_id] = Owner{n.tenant, 0};
  Offer& o = offers_[offer_id];
  o.first_window = po.first_window;
  o.last_window = po.last_window;
  o.order = next_order_++;
  o.info.tenant = n.tenant;
  o.info.negotiation_id = negotiation_id;
  o.info.devices = po.devices;
  o.info.offer.offer_id = offer_id;
  o.info.offer.start_s = po.start_s;
  o.info.offer.duration_s = n.request.duration_s;
  o.info.offer.expires_s = events::RoundDownTime(now + options_.offer_ttl_s);
  o.info.offer.count = n.request.count;
  o.info.offer.locality = n.request.locality;
  n.offers.push_back(offer_id);
}

void NegotiationEngine::DropOffer(uint64_t offer_id, uint64_t now) {
  auto it = offers_.find(offer_id);
  if (it == offers_.end()) return;
  Book(it->second.info.devices, it->second.first_window, it->second.last_window, /*add=*/false);
  auto nit = negotiations_.find(it->second.info.negotiation_id);
  if (nit != negotiations_.end()) std::erase(nit->second.offers, offer_id);
  offers_.erase(it);
  CloseId(offer_id, now);
}

void NegotiationEngine::Charge(Negotiation& n, uint64_t now) {
  if (n.round_charged || n.offers.empty() || n.provider_initiated) return;
  n.round_charged = true;
  const uint64_t cost = uint64_t{n.request.count} * n.request.duration_s;
  const uint64_t bucket = events::RoundDownTime(now);
  Charges& c = charges_[n.tenant];
  if (!c.empty() && c.back().first == bucket) {
    c.back().second += cost;
  } else {
    c.emplace_back(bucket, cost);
  }
}

void NegotiationEngine::DropOffers(Negotiation& n, uint64_t now, bool charge) {
  if (charge) Charge(n, now);
  std::vector<uint64_t> ids = n.offers;
  for (uint64_t id : ids) DropOffer(id, now);
  n.offers.clear();
}

void NegotiationEngine::CloseNegotiation(uint64_t negotiation_id, uint64_t now, bool charge) {
  auto it = negotiations_.find(negotiation_id);
  if (it == negotiations_.end()) return;
  DropOffers(it->second, now, charge);
  if (!it->second.provider_initiated) {
    auto counted = open_by_tenant_.find(it->second.tenant);
    if (--counted->second == 0) open_by_tenant_.erase(counted);
  }
  negotiations_.erase(it);
  CloseId(negotiation_id, now);
}

void NegotiationEngine::ExpireOffers(uint64_t now) {
  std::vector<uint64_t> expired;
  for (const auto& [id, o] : offers_) {
    if (now >= o.info.offer.expires_s) expired.push_back(id);
  }
  for (uint64_t id : expired) {
    OfferInfo info = offers_[id].info;
    auto nit = negotiations_.find(info.negotiation_id);
    if (nit != negotiations_.end()) Charge(nit->second, now);  // lapsed unaccepted
    DropOffer(id, now);
    events::NegotiationPayload p{};
    p.negotiation_id = info.negotiation_id;
    p.offer_id = id;
    PublishTo(info.tenant, events::MakeNegotiation(events::kNegotiationOfferExpired, p));
  }
  // A decided negotiation closes when its offers are gone and one offer
  // lifetime has passed since its decision (SPEC.md §9.4).
  std::vector<uint64_t> done;
  for (const auto& [id, n] : negotiations_) {
    if (n.state == NegState::kOpen && n.offers.empty() &&
        now >= events::RoundDownTime(n.decided_s + options_.offer_ttl_s)) {
      done.push_back(id);
    }
  }
  for (uint64_t id : done) CloseNegotiation(id, now);
}

void NegotiationEngine::Usage(const TenantId& tenant, uint64_t now, uint64_t* device_seconds,
                              uint32_t* weight) const {
  uint64_t sum = 0;
  for (const auto& [id, r] : reservations_) {
    if (r.info.tenant != tenant || r.info.state == ReservationState::kRevoked) continue;
    if (r.info.accepted_s + options_.usage_horizon_s <= now) continue;
    sum += r.device_seconds;
  }
  // Offers held now, and those that lapsed unaccepted, cost as accepting would.
  for (const auto& [id, n] : negotiations_) {
    if (n.tenant != tenant || n.provider_initiated || n.round_charged || n.offers.empty()) continue;
    sum += uint64_t{n.request.count} * n.request.duration_s;
  }
  auto c = charges_.find(tenant);
  if (c != charges_.end()) {
    for (const auto& [bucket, cost] : c->second) {
      if (bucket + options_.usage_horizon_s > now) sum += cost;
    }
  }
  *device_seconds = sum;
  auto it = weights_.find(tenant);
  *weight = it == weights_.end() ? 1 : it->second;
}

std::vector<Decision> NegotiationEngine::Decide(uint64_t now) {
  DecisionRound round = PrepareDecide(now);
  PlanDecide(round);
  return ApplyDecide(round, now);
}

DecisionRound NegotiationEngine::PrepareDecide(uint64_t now) {
  DecisionRound round;
  round.now = now;
  {
    CapacityScope scope(*this);
    Tick(now);
    round.capacity = capacity_cache_;  // capacity is asked once per decision point
  }
  struct Key {
    uint64_t id;
    uint64_t usage;
    uint32_t weight;
    uint8_t priority;
    uint64_t arrival;
  };
  std::vector<Key> order;
  std::map<TenantId, std::pair<uint64_t, uint32_t>> usage;
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

  round.pools = provider_->Pools();
  round.booked = booked_;
  for (const Key& k : order) {
    const Negotiation& n = negotiations_.at(k.id);
    round.requests.push_back({k.id, n.arrival, n.tenant, n.request, false, {}});
  }
  return round;
}

void NegotiationEngine::PlanDecide(DecisionRound& round) const {
  // Each tenant with queued requests gets an equal share of the budget. A
  // tenant's first request in order is always decided (a request runs to its
  // end once started); the others only while its share lasts, and stay queued
  // otherwise.
  std::map<TenantId, uint64_t> budget;
  for (const PlannedRequest& pr : round.requests) budget[pr.tenant] = 0;
  const uint64_t share =
      budget.empty() ? 0 : std::max<uint64_t>(1, options_.decide_budget / budget.size());
  for (auto& [tenant, b] : budget) b = share;

  // First pass: everyone's earliest feasible offer, in order. Second pass:
  // alternatives, in the same order, while capacity lasts.
  std::vector<uint64_t> next(round.requests.size(), 0);
  for (size_t i = 0; i < round.requests.size(); ++i) {
    PlannedRequest& pr = round.requests[i];
    pr.decided = PlanOffer(round, pr, &next[i], &budget[pr.tenant]) != OfferResult::kOutOfBudget;
  }
  for (size_t i = 0; i < round.requests.size(); ++i) {
    PlannedRequest& pr = round.requests[i];
    if (!pr.decided) continue;
    while (pr.offers.size() < HZ_NEG_MAX_OFFERS &&
           PlanOffer(round, pr, &next[i], &budget[pr.tenant]) == OfferResult::kOffer) {
    }
  }
}

std::vector<Decision> NegotiationEngine::ApplyDecide(const DecisionRound& round, uint64_t now) {
  std::vector<uint64_t> decided;
  for (const PlannedRequest& pr : round.requests) {
    if (!pr.decided) continue;
    // Countered, declined or closed while the round was planned: the request
    // as it is now waits for the next decision point.
    auto it = negotiations_.find(pr.negotiation_id);
    if (it == negotiations_.end() || it->second.state != NegState::kPending ||
        it->second.arrival != pr.arrival) {
      continue;
    }
    bool dropped = false;
    for (const PlannedOffer& po : pr.offers) {
      if (StillFits(round, po)) {
        AddOffer(pr.negotiation_id, it->second, po, now);
      } else {
        dropped = true;
      }
    }
    if (dropped && it->second.offers.empty()) continue;  // stays queued
    decided.push_back(pr.negotiation_id);
  }
  last_decide_steps_ = round.steps;
  return Answer(decided, now);
}

std::vector<Decision> NegotiationEngine::Answer(const std::vector<uint64_t>& decided,
                                                uint64_t now) {
  std::vector<Decision> decisions;
  for (uint64_t id : decided) {
    Negotiation& n = negotiations_[id];
    n.state = NegState::kOpen;
    n.decided_s = now;
    Decision d;
    d.tenant = n.tenant;
    d.provider_initiated = n.provider_initiated;
    d.result.negotiation_id = id;
    d.result.round = n.round;
    for (uint64_t offer_id : n.offers) d.offers.push_back(offers_[offer_id].info.offer);
    d.result.num_offers = static_cast<uint32_t>(d.offers.size());
    if (n.provider_initiated) {
      for (const hz_neg_offer& o : d.offers) {
        events::NegotiationPayload p{};
        p.negotiation_id = id;
        p.offer_id = o.offer_id;
        p.start_s = o.start_s;
        p.duration_s = o.duration_s;
        p.expires_s = o.expires_s;
        p.count = o.count;
        p.locality = o.locality;
        p.device_kind = static_cast<uint8_t>(n.request.kind);
        PublishTo(n.tenant, events::MakeNegotiation(events::kNegotiationOfferMade, p));
      }
    }
    decisions.push_back(std::move(d));
  }
  return decisions;
}

Status NegotiationEngine::Accept(const TenantId& tenant, uint64_t offer_id, uint64_t now,
                                 uint64_t* reservation_id) {
  ExpireOffers(now);
  Status s = CheckOwner(offer_id, tenant, "offer");
  if (!s.ok()) return s;
  auto it = offers_.find(offer_id);
  if (it == offers_.end()) return Status::NotFound("offer expired, withdrawn or released");
  Offer offer = it->second;
  offers_.erase(it);  // its hold passes to the reservation
  CloseId(offer_id, now);
  hz_device_kind kind = HZ_DEV_GPU;
  auto nit = negotiations_.find(offer.info.negotiation_id);
  if (nit != negotiations_.end()) {
    kind = static_cast<hz_device_kind>(nit->second.request.kind);
    std::erase(nit->second.offers, offer_id);
    CloseNegotiation(offer.info.negotiation_id, now);
  }
  uint64_t id = NewId();
  owners_[id] = Owner{tenant, 0};
  Reservation& r = reservations_[id];
  r.info.id = id;
  r.info.tenant = tenant;
  r.info.negotiation_id = offer.info.negotiation_id;
  r.info.kind = kind;
  r.info.start_s = offer.info.offer.start_s;
  r.info.duration_s = offer.info.offer.duration_s;
  r.info.accepted_s = now;
  r.info.count = offer.info.offer.count;
  r.info.devices = offer.info.devices;
  r.info.state = ReservationState::kAccepted;
  r.first_window = offer.first_window;
  r.last_window = offer.last_window;
  r.device_seconds = uint64_t{r.info.count} * r.info.duration_s;
  r.order = next_order_++;
  *reservation_id = id;
  StartAndEnd(now);
  return Status::Ok();
}

Status NegotiationEngine::Decline(const TenantId& tenant, uint64_t negotiation_id, uint64_t now) {
  ExpireOffers(now);
  Status s = CheckOwner(negotiation_id, tenant, "negotiation");
  if (!s.ok()) return s;
  if (negotiations_.count(negotiation_id) == 0) return Status::NotFound("negotiation is closed");
  CloseNegotiation(negotiation_id, now, /*charge=*/true);
  return Status::Ok();
}

Status NegotiationEngine::Release(const TenantId& tenant, const hz_neg_release_args& args,
                                  uint64_t now) {
  if (args.reserved != 0 || args.reserved2 != 0) {
    return Status::NotSupported("reserved field is not zero");
  }
  return Release(tenant, args.reservation_id, args.count, now);
}

Status NegotiationEngine::Release(const TenantId& tenant, uint64_t reservation_id, uint32_t count,
                                  uint64_t now) {
  Status s = CheckOwner(reservation_id, tenant, "reservation");
  if (!s.ok()) return s;
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end()) return Status::State("reservation no longer holds devices");
  Reservation& r = it->second;
  if (r.info.state != ReservationState::kAccepted && r.info.state != ReservationState::kActive) {
    return Status::State("reservation no longer holds devices");
  }
  if (count == 0) count = r.info.count;
  if (count > r.info.count) return Status::InvalidArgument("releasing more devices than held");

  std::vector<PoolCount> released;
  if (r.info.state == ReservationState::kActive) {
    // The provider takes the devices with the highest tenant-visible indices.
    s = provider_->Detach(tenant, reservation_id, count, &released);
    if (!s.ok()) return s;
  } else {
    uint32_t left = count;
    for (auto pc = r.info.devices.rbegin(); pc != r.info.devices.rend() && left > 0; ++pc) {
      uint32_t take = std::min(left, pc->count);
      released.push_back({pc->pool, take});
      left -= take;
    }
  }
  for (const PoolCount& rel : released) {
    for (PoolCount& pc : r.info.devices) {
      if (pc.pool != rel.pool) continue;
      pc.count -= std::min(pc.count, rel.count);
    }
  }
  std::erase_if(r.info.devices, [](const PoolCount& pc) { return pc.count == 0; });
  // Released capacity returns to the pool at once (SPEC.md §7.8.5).
  Book(released, std::max(r.first_window, WindowOf(now)), r.last_window, /*add=*/false);
  const uint64_t end = r.info.start_s + r.info.duration_s;
  const uint64_t from = std::max(now, r.info.start_s);
  const uint64_t remaining = end > from ? end - from : 0;
  r.device_seconds -= std::min(r.device_seconds, uint64_t{count} * remaining);
  r.info.count = Sum(r.info.devices);
  const bool was_active = r.info.state == ReservationState::kActive;
  if (r.info.count == 0) {
    r.info.state = ReservationState::kReleased;
    r.closed_s = now;
  }
  PublishTo(tenant, events::MakeAllocationCapacity(
                        events::kCapacityReservationReleased, reservation_id, count,
                        provider_->DevicesHeld(tenant, r.info.kind), r.info.kind));
  // Nothing is left to take at the end: the notice's preemption is off.
  if (r.info.count == 0 && r.noticed) PublishPreemptionCancelled(r);
  if (was_active) NotifyAllocation(tenant);
  return Status::Ok();
}

void NegotiationEngine::EndReservation(Reservation& r, ReservationState state, uint64_t now) {
  if (r.info.state == ReservationState::kActive) {
    std::vector<PoolCount> detached;
    Status s = provider_->Detach(r.info.tenant, r.info.id, r.info.count, &detached);
    if (!s.ok()) spdlog::warn("negotiation: detach failed: {}", s.ToString());
  }
  Book(r.info.devices, std::max(r.first_window, WindowOf(now)), r.last_window, /*add=*/false);
  r.info.state = state;
  r.closed_s = now;
}

Status NegotiationEngine::Revoke(uint64_t reservation_id, events::RevokeReason reason,
                                 uint64_t now) {
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end()) return Status::NotFound("no such reservation");
  Reservation& r = it->second;
  if (r.info.state != ReservationState::kAccepted && r.info.state != ReservationState::kActive) {
    return Status::State("reservation no longer holds devices");
  }
  const bool was_active = r.info.state == ReservationState::kActive;
  const uint32_t count = r.info.count;
  // After its notice, the preemption it announced happens now.
  if (was_active && r.noticed) PublishPreemptionStarted(r);
  EndReservation(r, ReservationState::kRevoked, now);
  events::NegotiationPayload p{};
  p.negotiation_id = r.info.negotiation_id;
  p.reservation_id = reservation_id;
  p.reason = reason;
  p.count = static_cast<uint16_t>(count);
  p.device_kind = static_cast<uint8_t>(r.info.kind);
  PublishTo(r.info.tenant, events::MakeNegotiation(events::kNegotiationReservationRevoked, p));
  if (was_active) NotifyAllocation(r.info.tenant);
  return Status::Ok();
}

uint32_t NegotiationEngine::LiveReservations(const TenantId& tenant) const {
  uint32_t n = 0;
  for (const auto& [id, r] : reservations_) {
    const ReservationState st = r.info.state;
    if (r.info.tenant == tenant &&
        (st == ReservationState::kAccepted || st == ReservationState::kActive)) {
      ++n;
    }
  }
  return n;
}

std::vector<uint64_t> NegotiationEngine::ForgetTenant(const TenantId& tenant, uint64_t now) {
  std::vector<uint64_t> closed;
  for (const auto& [id, n] : negotiations_) {
    if (n.tenant == tenant) closed.push_back(id);
  }
  for (uint64_t id : closed) CloseNegotiation(id, now);
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    Reservation& r = it->second;
    if (r.info.tenant != tenant) {
      ++it;
      continue;
    }
    const ReservationState st = r.info.state;
    if (st == ReservationState::kAccepted || st == ReservationState::kActive) {
      EndReservation(r, ReservationState::kReleased, now);
    }
    it = reservations_.erase(it);
  }
  std::erase_if(owners_, [&](const auto& o) { return o.second.tenant == tenant; });
  charges_.erase(tenant);
  availability_.Forget(tenant);
  weights_.erase(tenant);
  max_priority_.erase(tenant);
  max_open_.erase(tenant);
  return closed;
}

void NegotiationEngine::StartAndEnd(uint64_t now) {
  // In acceptance order, so events come out in a deterministic order.
  std::vector<Reservation*> order;
  for (auto& [id, r] : reservations_) order.push_back(&r);
  std::sort(order.begin(), order.end(),
            [](const Reservation* a, const Reservation* b) { return a->order < b->order; });
  for (Reservation* rp : order) {
    Reservation& r = *rp;
    const uint64_t id = r.info.id;
    if (r.info.state == ReservationState::kAccepted && r.info.start_s <= now) {
      Status s = provider_->Attach(r.info.tenant, id, r.info.devices);
      // Its devices are still leaving the VM of the reservation they ended:
      // it starts at a later tick, once they left.
      if (s.code() == StatusCode::kTryAgain) continue;
      if (!s.ok()) {
        spdlog::warn("negotiation: attach for a reservation failed: {}", s.ToString());
        Revoke(id, events::kRevokeAttachFailed, now);
        continue;
      }
      r.info.state = ReservationState::kActive;
      PublishTo(r.info.tenant,
                events::MakeAllocationCapacity(
                    events::kCapacityReservationStarted, id, r.info.count,
                    provider_->DevicesHeld(r.info.tenant, r.info.kind), r.info.kind));
      NotifyAllocation(r.info.tenant);
    }
    NoticePreemption(r, now);
    if (r.info.state == ReservationState::kActive && now >= r.info.start_s + r.info.duration_s) {
      const uint32_t count = r.info.count;
      // PREEMPTION/STARTED, then the devices go, then RESERVATION_ENDED.
      PublishPreemptionStarted(r);
      EndReservation(r, ReservationState::kEnded, now);
      PublishTo(r.info.tenant,
                events::MakeAllocationCapacity(events::kCapacityReservationEnded, id, count,
                                               provider_->DevicesHeld(r.info.tenant, r.info.kind),
                                               r.info.kind));
      NotifyAllocation(r.info.tenant);
    }
  }
}

void NegotiationEngine::Reconcile(uint64_t now) {
  const uint64_t current = WindowOf(now);
  std::vector<std::pair<uint32_t, uint64_t>> over;
  for (const auto& [key, used] : booked_) {
    if (key.second >= current && used > CapacityOf(key.first, key.second)) {
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
    const uint32_t cap = CapacityOf(key.first, key.second);
    for (;;) {
      auto it = booked_.find(key);
      if (it == booked_.end() || it->second <= cap) break;
      // Offers go first (newest first), then reservations, most recently
      // accepted first (SPEC.md §9.6).
      uint64_t victim = 0, newest = 0;
      for (const auto& [id, o] : offers_) {
        if (o.order > newest &&
            touches(o.info.devices, key.first, o.first_window, o.last_window, key.second)) {
          victim = id;
          newest = o.order;
        }
      }
      if (victim != 0) {
        OfferInfo info = offers_[victim].info;
        DropOffer(victim, now);
        events::NegotiationPayload p{};
        p.negotiation_id = info.negotiation_id;
        p.offer_id = victim;
        p.reason = events::kRevokeCapacityLost;
        PublishTo(info.tenant, events::MakeNegotiation(events::kNegotiationOfferWithdrawn, p));
        continue;
      }
      for (const auto& [id, r] : reservations_) {
        ReservationState st = r.info.state;
        if ((st == ReservationState::kAccepted || st == ReservationState::kActive) &&
            r.order > newest &&
            touches(r.info.devices, key.first, r.first_window, r.last_window, key.second)) {
          victim = id;
          newest = r.order;
        }
      }
      if (victim == 0) break;  // nothing left to take back
      Revoke(victim, events::kRevokeCapacityLost, now);
    }
  }
}

void NegotiationEngine::Collect(uint64_t now) {
  // Windows before the current one can no longer be booked.
  const uint64_t current = WindowOf(now);
  for (auto it = booked_.begin(); it != booked_.end();) {
    it = it->first.second < current ? booked_.erase(it) : std::next(it);
  }
  // Finished reservations leave once they no longer count toward usage;
  // closed identifiers are remembered as long (EPERM/ENOENT stay accurate).
  const uint64_t keep = options_.usage_horizon_s;
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    const Reservation& r = it->second;
    bool done = r.closed_s != 0 && r.info.accepted_s + keep <= now && r.closed_s + keep <= now;
    if (done) CloseId(it->first, now);
    it = done ? reservations_.erase(it) : std::next(it);
  }
  for (auto it = charges_.begin(); it != charges_.end();) {
    std::erase_if(it->second, [&](const auto& c) { return c.first + keep <= now; });
    it = it->second.empty() ? charges_.erase(it) : std::next(it);
  }
  for (auto it = owners_.begin(); it != owners_.end();) {
    bool old = it->second.closed_s != 0 && it->second.closed_s + keep <= now &&
               reservations_.count(it->first) == 0;
    it = old ? owners_.erase(it) : std::next(it);
  }
}

void NegotiationEngine::Tick(uint64_t now) {
  CapacityScope scope(*this);
  ExpireOffers(now);
  StartAndEnd(now);
  Reconcile(now);
  Collect(now);
  NoticeAvailability(now);
}

void NegotiationEngine::NotifyAllocation(const TenantId& tenant) {
  if (listener_) listener_(tenant, provider_->DevicesHeld(tenant, HZ_DEV_GPU));
}

void NegotiationEngine::PublishTo(const TenantId& tenant, const events::EventSpec& spec) {
  if (sink_ == nullptr) return;
  Status s = sink_->Publish(tenant, spec, nullptr);
  if (!s.ok()) {
    spdlog::warn("negotiation: publishing to {} failed: {}", tenant.name(), s.ToString());
  }
}

std::vector<ReservationInfo> NegotiationEngine::Reservations() const {
  std::vector<std::pair<uint64_t, ReservationInfo>> sorted;
  for (const auto& [id, r] : reservations_) sorted.emplace_back(r.order, r.info);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<ReservationInfo> out;
  for (auto& [order, info] : sorted) out.push_back(std::move(info));
  return out;
}

std::vector<OfferInfo> NegotiationEngine::Offers() const {
  std::vector<std::pair<uint64_t, OfferInfo>> sorted;
  for (const auto& [id, o] : offers_) sorted.emplace_back(o.order, o.info);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<OfferInfo> out;
  for (auto& [order, info] : sorted) out.push_back(std::move(info));
  return out;
}

uint32_t NegotiationEngine::Booked(uint32_t pool, uint64_t window) const {
  auto it = booked_.find({pool, window});
  return it == booked_.end() ? 0 : it->second;
}

}  // namespace hz::negotiation
