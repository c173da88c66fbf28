// Property-based tests of the negotiation invariants: nothing is ever booked
// twice, offers respect their request's window and expiry, every accepted
// reservation is honoured or revoked with an event, and tenants of equal
// weight get equal shares over time.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <map>
#include <set>

#include "hz/events/coarse.h"
#include "hz/negotiation/negotiation.h"
#include "in_memory_inventory.h"
#include "test_util.h"

namespace hz::negotiation {
namespace {

constexpr uint64_t kStart = 1800000000;  // a 60 s window boundary

struct Span {
  uint64_t first, last;
};

Span WindowsOf(const NegotiationEngine& e, uint64_t start, uint64_t duration) {
  return {e.WindowOf(start), e.WindowOf(start + duration - 1)};
}

// Independently recomputes, from the engine's live offers and reservations,
// what each pool holds in each window from `now` on, and checks it against
// the provider's capacity and the engine's own accounting.
void CheckNoDoubleBooking(const NegotiationEngine& e, const testing::InMemoryInventory& inv,
                          uint64_t now) {
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> held;
  const uint64_t current = e.WindowOf(now);
  auto add = [&](const std::vector<PoolCount>& devices, Span s) {
    for (const PoolCount& pc : devices) {
      for (uint64_t w = std::max(s.first, current); w <= s.last; ++w)
        held[{pc.pool, w}] += pc.count;
    }
  };
  for (const OfferInfo& o : e.Offers())
    add(o.devices, WindowsOf(e, o.offer.start_s, o.offer.duration_s));
  for (const ReservationInfo& r : e.Reservations()) {
    if (r.state == ReservationState::kAccepted || r.state == ReservationState::kActive) {
      uint32_t sum = 0;
      for (const PoolCount& pc : r.devices) sum += pc.count;
      RC_ASSERT(sum == r.count);
      add(r.devices, WindowsOf(e, r.start_s, r.duration_s));
    }
  }
  for (const auto& [key, n] : held) {
    RC_ASSERT(n <= inv.Capacity(key.first, key.second));
    RC_ASSERT(n == e.Booked(key.first, key.second));
  }
}

hz_neg_request GenRequest(uint64_t now) {
  hz_neg_request r{};
  r.kind = static_cast<uint16_t>(*rc::gen::inRange(0, 2));
  r.count = static_cast<uint16_t>(*rc::gen::inRange(1, 7));
  r.locality = static_cast<uint8_t>(*rc::gen::inRange(0, 3));
  r.priority_class = static_cast<uint8_t>(*rc::gen::inRange(0, 3));
  r.earliest_start_s = now - 30 + static_cast<uint64_t>(*rc::gen::inRange(0, 400));
  r.latest_start_s = r.earliest_start_s + static_cast<uint64_t>(*rc::gen::inRange(0, 600));
  r.duration_s = static_cast<uint64_t>(*rc::gen::inRange(1, 900));
  return r;
}

RC_GTEST_PROP(NegotiationProperty, NoDoubleBookingOffersValidAcceptedHonouredOrRevoked, ()) {
  testing::InMemoryInventory inv;
  const int pools = *rc::gen::inRange(1, 5);
  for (int p = 0; p < pools; ++p) {
    inv.AddPool(static_cast<hz_device_kind>(*rc::gen::inRange(0, 2)),
                static_cast<uint32_t>(*rc::gen::inRange(0, 2)),
                static_cast<uint32_t>(*rc::gen::inRange(1, 9)));
  }
  events::testing::RecordingSink sink;
  NegotiationOptions options;
  options.usage_horizon_s = 30 * 86400;  // keep every reservation for the final checks
  NegotiationEngine e(options, &inv, &sink);
  const std::vector<TenantId> tenants = {TenantId("t0"), TenantId("t1"), TenantId("t2")};

  uint64_t now = kStart;
  std::map<uint64_t, hz_neg_request> requests;  // negotiation -> current request
  std::map<uint64_t, TenantId> owner;           // negotiation -> tenant
  std::vector<std::pair<hz_neg_offer, TenantId>> seen_offers;
  std::vector<std::pair<uint64_t, TenantId>> accepted;  // reservation, tenant

  const int steps = *rc::gen::inRange(10, 80);
  for (int step = 0; step < steps; ++step) {
    const int op = *rc::gen::inRange(0, 10);
    const TenantId& tenant = tenants[static_cast<size_t>(*rc::gen::inRange(0, 3))];
    switch (op) {
      case 0:
      case 1: {  // request
        hz_neg_request r = GenRequest(now);
        uint64_t id = 0;
        Status s = e.Submit(tenant, r, now, &id);
        if (r.latest_start_s < now) {
          RC_ASSERT(s.code() == StatusCode::kInvalidArgument);
        } else {
          RC_ASSERT(s.ok());
          requests[id] = r;
          owner[id] = tenant;
        }
        break;
      }
      case 2: {  // decide
        for (const Decision& d : e.Decide(now)) {
          RC_ASSERT(d.offers.size() <= HZ_NEG_MAX_OFFERS);
          RC_ASSERT(d.result.num_offers == d.offers.size());
          RC_ASSERT(owner.at(d.result.negotiation_id) == d.tenant);
          const hz_neg_request& r = requests.at(d.result.negotiation_id);
          for (const hz_neg_offer& o : d.offers) {
            RC_ASSERT(o.start_s >= r.earliest_start_s);
            RC_ASSERT(o.start_s <= r.latest_start_s);
            RC_ASSERT(o.start_s >= now);
            RC_ASSERT(o.start_s % events::kTimeGranularityS == 0);
            RC_ASSERT(o.duration_s == r.duration_s);
            RC_ASSERT(o.count == r.count);
            RC_ASSERT(o.locality == r.locality);
            RC_ASSERT(o.expires_s == events::RoundDownTime(now + 30));
            seen_offers.emplace_back(o, d.tenant);
          }
        }
        break;
      }
      case 3:
      case 4: {  // accept a known offer, maybe expired, sometimes someone else's
        if (seen_offers.empty()) break;
        auto [offer, who] =
            seen_offers[static_cast<size_t>(*rc::gen::inRange<size_t>(0, seen_offers.size()))];
        const TenantId& by = *rc::gen::inRange(0, 4) == 0 ? tenant : who;
        uint64_t res = 0;
        Status s = e.Accept(by, offer.offer_id, now, &res);
        if (who != by) {
          RC_ASSERT(s.code() == StatusCode::kPermission);
        } else if (now >= offer.expires_s) {
          RC_ASSERT(s.code() == StatusCode::kNotFound);
        }
        if (s.ok()) accepted.emplace_back(res, by);
        break;
      }
      case 5: {  // counter or decline
        if (owner.empty()) break;
        auto it = owner.begin();
        std::advance(it, *rc::gen::inRange<size_t>(0, owner.size()));
        if (*rc::gen::arbitrary<bool>()) {
          hz_neg_request r = GenRequest(now);
          if (e.Counter(it->second, it->first, r, now).ok()) requests[it->first] = r;
        } else {
          (void)e.Decline(it->second, it->first, now);
        }
        break;
      }
      case 6: {  // release part of a reservation
        if (accepted.empty()) break;
        auto [res, who] =
            accepted[static_cast<size_t>(*rc::gen::inRange<size_t>(0, accepted.size()))];
        (void)e.Release(who, res, static_cast<uint32_t>(*rc::gen::inRange(0, 4)), now);
        break;
      }
      case 7: {  // a pool loses or regains devices
        uint32_t pool = static_cast<uint32_t>(*rc::gen::inRange(0, pools));
        uint64_t from = e.WindowOf(now) + static_cast<uint64_t>(*rc::gen::inRange(0, 10));
        inv.SetCapacityFrom(pool, from, static_cast<uint32_t>(*rc::gen::inRange(0, 9)));
        e.Tick(now);
        break;
      }
      case 8: {  // hardware failure revokes a reservation
        if (accepted.empty()) break;
        auto [res, who] =
            accepted[static_cast<size_t>(*rc::gen::inRange<size_t>(0, accepted.size()))];
        (void)e.Revoke(res, events::kRevokeHardwareFailure, now);
        break;
      }
      default:  // time passes
        now += static_cast<uint64_t>(*rc::gen::inRange(1, 61));
        e.Tick(now);
        break;
    }
    CheckNoDoubleBooking(e, inv, now);
  }

  // Run every reservation to its end.
  now += 2 * 86400;
  e.Tick(now);
  std::set<uint64_t> started, revoked, ended, released;
  for (const auto& entry : sink.entries()) {
    if (entry.spec.topic == HZ_TOPIC_CAPACITY) {
      auto p = events::testing::PayloadAs<events::CapacityPayload>(entry.spec.payload.data());
      if (entry.spec.kind == events::kCapacityReservationStarted) started.insert(p.reservation_id);
      if (entry.spec.kind == events::kCapacityReservationEnded) ended.insert(p.reservation_id);
      if (entry.spec.kind == events::kCapacityReservationReleased)
        released.insert(p.reservation_id);
    }
    if (entry.spec.topic == HZ_TOPIC_NEGOTIATION &&
        entry.spec.kind == events::kNegotiationReservationRevoked) {
      revoked.insert(
          events::testing::PayloadAs<events::NegotiationPayload>(entry.spec.payload.data())
              .reservation_id);
    }
  }
  for (const ReservationInfo& r : e.Reservations()) {
    RC_ASSERT(r.state != ReservationState::kAccepted);
    RC_ASSERT(r.state != ReservationState::kActive);
    if (r.state == ReservationState::kRevoked) {
      RC_ASSERT(revoked.count(r.id) == 1u);
    } else {
      // Honoured: attached at its start, and ended or fully released.
      RC_ASSERT(revoked.count(r.id) == 0u);
      RC_ASSERT(started.count(r.id) == 1u || r.state == ReservationState::kReleased);
      RC_ASSERT(ended.count(r.id) + released.count(r.id) >= 1u);
    }
  }
  RC_ASSERT(e.Reservations().size() == accepted.size());
  RC_TAG(accepted.empty() ? "no reservation" : "reservations");
  RC_TAG(revoked.empty() ? "no revocation" : "revocations");
  for (const TenantId& t : tenants) RC_ASSERT(inv.Attached(t) == 0u);
}

RC_GTEST_PROP(NegotiationProperty, EqualWeightsGetEqualShares, ()) {
  const int k = *rc::gen::inRange(2, 5);
  const uint32_t capacity = static_cast<uint32_t>(*rc::gen::inRange(1, 5));
  testing::InMemoryInventory inv;
  inv.AddPool(HZ_DEV_GPU, 0, capacity);
  events::testing::RecordingSink sink;
  NegotiationOptions options;
  options.usage_horizon_s = uint64_t{1} << 40;  // the whole run counts
  NegotiationEngine e(options, &inv, nullptr);

  const uint64_t kMaxDuration = 180;
  std::map<TenantId, uint64_t> share;
  uint64_t now = kStart;
  const int rounds = 200;
  for (int round = 0; round < rounds; ++round) {
    for (int t = 0; t < k; ++t) {
      hz_neg_request r{};
      r.kind = HZ_DEV_GPU;
      r.count = static_cast<uint16_t>(*rc::gen::inRange<uint32_t>(1, capacity + 1));
      r.locality = HZ_LOC_ANY;
      r.priority_class = static_cast<uint8_t>(*rc::gen::inRange(0, 3));
      r.earliest_start_s = now;
      r.latest_start_s = now;
      r.duration_s = 60 * static_cast<uint64_t>(*rc::gen::inRange(1, 4));
      uint64_t id;
      RC_ASSERT(e.Submit(TenantId("t" + std::to_string(t)), r, now, &id).ok());
    }
    for (const Decision& d : e.Decide(now)) {
      if (d.offers.empty()) {
        RC_ASSERT(e.Decline(d.tenant, d.result.negotiation_id, now).ok());
        continue;
      }
      uint64_t res;
      RC_ASSERT(e.Accept(d.tenant, d.offers[0].offer_id, now, &res).ok());
      share[d.tenant] += d.offers[0].count * d.offers[0].duration_s;
    }
    now += 60;
    e.Tick(now);
  }
  uint64_t lo = UINT64_MAX, hi = 0, total = 0;
  for (int t = 0; t < k; ++t) {
    uint64_t s = share[TenantId("t" + std::to_string(t))];
    lo = std::min(lo, s);
    hi = std::max(hi, s);
    total += s;
  }
  RC_ASSERT(total > 0u);
  // Lowest usage goes first, so shares stay close: within a couple of the
  // largest grants, or a fifth of the fair share when requests of mixed sizes
  // fragment the pool (a large request can wait behind smaller ones that fit).
  // Arrival order alone would give the first tenant nearly everything it asks.
  const uint64_t fair = total / static_cast<uint64_t>(k);
  RC_ASSERT(hi - lo <= std::max<uint64_t>(2 * capacity * kMaxDuration, fair / 5));
}

}  // namespace
}  // namespace hz::negotiation
