// What a tenant can rely on when other tenants are hostile: one request's
// decision costs bounded work, offers that are never accepted cost their
// holder, and identifiers say nothing about other tenants' activity.
#include <gtest/gtest.h>

#include <set>

#include "hz/negotiation/negotiation.h"
#include "in_memory_inventory.h"
#include "request_util.h"
#include "test_util.h"

namespace hz::negotiation {
namespace {

using testing::kNow;
using testing::Req;

// Counts Capacity() calls. Past `limit` it reports no devices, so that an
// engine doing unbounded work still finishes quickly (and the count shows it).
class CountingInventory : public testing::InMemoryInventory {
 public:
  explicit CountingInventory(uint64_t limit) : limit_(limit) {}
  uint32_t Capacity(uint32_t pool, uint64_t window) const override {
    if (++calls_ > limit_) return 0;
    return InMemoryInventory::Capacity(pool, window);
  }
  uint64_t calls() const { return calls_; }
  void Reset() { calls_ = 0; }

 private:
  uint64_t limit_;
  mutable uint64_t calls_ = 0;
};

constexpr uint64_t kCallBound = 100000;

// The largest request the limits allow: every device, a week of start
// windows, a day long. It can never be placed.
hz_neg_request Oversized(uint64_t now) {
  return Req(65535, HZ_LOC_ANY, now, now + 7 * 86400, 86400);
}

TEST(NegotiationCost, AnImpossibleRequestCostsBoundedCapacityQueries) {
  CountingInventory inv(10 * kCallBound);
  inv.AddPool(HZ_DEV_GPU, 0, 4);
  inv.AddPool(HZ_DEV_GPU, 1, 4);
  NegotiationEngine e(NegotiationOptions{}, &inv, nullptr);
  uint64_t id = 0;
  ASSERT_TRUE(e.Submit(TenantId("a"), Oversized(kNow), kNow, &id).ok());
  inv.Reset();
  auto decisions = e.Decide(kNow);
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_TRUE(decisions[0].offers.empty());
  EXPECT_LE(inv.calls(), kCallBound);
}

TEST(NegotiationCost, ManyImpossibleRequestsCostBoundedCapacityQueriesPerDecision) {
  CountingInventory inv(10 * kCallBound);
  inv.AddPool(HZ_DEV_GPU, 0, 4);
  inv.AddPool(HZ_DEV_GPU, 1, 4);
  NegotiationEngine e(NegotiationOptions{}, &inv, nullptr);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 64; ++i) {
    uint64_t id = 0;
    ASSERT_TRUE(e.Submit(TenantId("a"), Oversized(kNow), kNow, &id).ok());
    ids.push_back(id);
  }
  inv.Reset();
  e.Decide(kNow);
  EXPECT_LE(inv.calls(), kCallBound);
  // Every one countered at once: the next decision point is bounded too.
  for (uint64_t id : ids) ASSERT_TRUE(e.Counter(TenantId("a"), id, Oversized(kNow), kNow).ok());
  inv.Reset();
  e.Decide(kNow + 1);
  EXPECT_LE(inv.calls(), kCallBound);
}

TEST(NegotiationCost, ATenantsFloodDoesNotDelayAnotherTenantsDecision) {
  testing::InMemoryInventory inv;
  inv.AddPool(HZ_DEV_GPU, 0, 4);
  inv.AddPool(HZ_DEV_GPU, 1, 4);
  NegotiationEngine e(NegotiationOptions{}, &inv, nullptr);
  uint64_t id = 0;
  for (int i = 0; i < 64; ++i) {
    ASSERT_TRUE(e.Submit(TenantId("a"), Oversized(kNow), kNow, &id).ok());
  }
  uint64_t b = 0;
  ASSERT_TRUE(e.Submit(TenantId("b"), Req(1, HZ_LOC_ANY, kNow, kNow, 60), kNow, &b).ok());
  bool decided = false;
  for (const Decision& d : e.Decide(kNow)) {
    if (d.result.negotiation_id != b) continue;
    decided = true;
    ASSERT_FALSE(d.offers.empty());
    EXPECT_EQ(d.offers[0].start_s, kNow);
  }
  EXPECT_TRUE(decided);
}

// Past its share of the budget a tenant's requests wait for the next
// decision point; none is lost, and each tenant's first is always decided.
TEST(NegotiationCost, RequestsPastATenantsShareWaitForTheNextDecisionPoint) {
  testing::InMemoryInventory inv;
  inv.AddPool(HZ_DEV_GPU, 0, 64);
  NegotiationOptions options;
  options.decide_budget = 2;  // one tenant's first request uses it all
  NegotiationEngine e(options, &inv, nullptr);
  std::set<uint64_t> queued;
  for (const char* t : {"a", "a", "a", "b"}) {
    uint64_t id = 0;
    ASSERT_TRUE(e.Submit(TenantId(t), Req(1, HZ_LOC_ANY, kNow, kNow + 600, 60), kNow, &id).ok());
    queued.insert(id);
  }
  std::set<std::string> first_round;
  for (uint64_t now = kNow; now < kNow + 10 && !queued.empty(); ++now) {
    for (const Decision& d : e.Decide(now)) {
      EXPECT_EQ(queued.erase(d.result.negotiation_id), 1u);
      EXPECT_FALSE(d.offers.empty());
      if (now == kNow) first_round.insert(d.tenant.name());
    }
  }
  EXPECT_TRUE(queued.empty());
  EXPECT_EQ(first_round, (std::set<std::string>{"a", "b"}));
}

// The quota counts what the tenant itself has open: not other tenants',
// not the provider's replacement offers, and no longer what it closed.
TEST(NegotiationFairness, TheOpenQuotaCountsOnlyTheTenantsOwnOpenNegotiations) {
  testing::InMemoryInventory inv;
  inv.AddPool(HZ_DEV_GPU, 0, 4);
  NegotiationEngine e(NegotiationOptions{}, &inv, nullptr);
  const TenantId a("a"), b("b");
  e.SetMaxOpen(a, 2);
  const hz_neg_request r = Req(1, HZ_LOC_ANY, kNow, kNow + 600, 60);
  uint64_t first = 0, id = 0;
  ASSERT_TRUE(e.Submit(a, r, kNow, &first).ok());
  ASSERT_TRUE(e.OfferReplacement(a, r, kNow, &id).ok());
  ASSERT_TRUE(e.Submit(b, r, kNow, &id).ok());
  ASSERT_TRUE(e.Submit(a, r, kNow, &id).ok()) << "neither b's nor the provider's count";
  EXPECT_TRUE(e.Submit(a, r, kNow, &id).IsLimit());
  ASSERT_TRUE(e.Decline(a, first, kNow).ok());
  EXPECT_TRUE(e.Submit(a, r, kNow, &id).ok()) << "a declined negotiation frees its place";
  EXPECT_TRUE(e.Submit(a, r, kNow, &id).IsLimit());
  e.ForgetTenant(a, kNow);
  EXPECT_TRUE(e.Submit(a, r, kNow, &id).ok());
  EXPECT_TRUE(e.Submit(a, r, kNow, &id).ok());
}

// Tenant a asks for every GPU for a day at every decision point and never
// accepts; tenant b asks for one GPU now, asking again whenever it got no
// offer. b must get an offer for the current window once a's first hold has
// lapsed, not be starved by holds that cost a nothing.
TEST(NegotiationFairness, OffersThatAreNeverAcceptedCostTheirHolder) {
  testing::InMemoryInventory inv;
  inv.AddPool(HZ_DEV_GPU, 0, 4);
  inv.AddPool(HZ_DEV_GPU, 1, 4);
  NegotiationOptions options;
  NegotiationEngine e(options, &inv, nullptr);
  const TenantId a("a"), b("b");
  uint64_t served_at = 0;
  for (uint64_t now = kNow; now < kNow + 4 * options.offer_ttl_s && served_at == 0; ++now) {
    uint64_t id = 0;
    ASSERT_TRUE(e.Submit(a, Req(8, HZ_LOC_ANY, now, now, 86400), now, &id).ok());
    if (now > kNow) {
      ASSERT_TRUE(e.Submit(b, Req(1, HZ_LOC_ANY, now, now + 50, 60), now, &id).ok());
    }
    for (const Decision& d : e.Decide(now)) {
      if (d.tenant == b && !d.offers.empty()) {
        EXPECT_LT(d.offers[0].start_s, now + options.window_s);
        served_at = now;
      }
      if (!d.offers.empty() || d.tenant != b) continue;
      ASSERT_TRUE(e.Decline(b, d.result.negotiation_id, now).ok());
    }
  }
  EXPECT_NE(served_at, 0u) << "b got no offer while a held every device";
  uint64_t usage = 0;
  uint32_t weight = 0;
  e.Usage(a, served_at, &usage, &weight);
  EXPECT_GE(usage, 8u * 86400u);  // a's lapsed offer is charged as if accepted
}

// Weighted usage honours the operator's weight for held offers as well.
TEST(NegotiationFairness, HeldOffersCountTowardWeightedUsage) {
  testing::InMemoryInventory inv;
  inv.AddPool(HZ_DEV_GPU, 0, 4);
  NegotiationEngine e(NegotiationOptions{}, &inv, nullptr);
  uint64_t id = 0;
  ASSERT_TRUE(e.Submit(TenantId("a"), Req(2, HZ_LOC_ANY, kNow, kNow, 600), kNow, &id).ok());
  ASSERT_EQ(e.Decide(kNow).at(0).offers.size(), 1u);
  uint64_t usage = 0;
  uint32_t weight = 0;
  e.Usage(TenantId("a"), kNow, &usage, &weight);
  EXPECT_EQ(usage, 2u * 600u);
  // Accepting does not charge twice.
  uint64_t res = 0;
  ASSERT_TRUE(e.Accept(TenantId("a"), e.Offers().at(0).offer.offer_id, kNow + 1, &res).ok());
  e.Usage(TenantId("a"), kNow + 1, &usage, &weight);
  EXPECT_EQ(usage, 2u * 600u);
}

// The SplitMix64 finaliser and its inverse: what a tenant could compute from
// one identifier if identifiers were a public permutation of a counter.
uint64_t MulInverse(uint64_t a) {
  uint64_t x = a;  // Newton's iteration: correct to 3, 6, 12, 24, 48, 96 bits
  for (int i = 0; i < 5; ++i) x *= 2 - a * x;
  return x;
}
uint64_t UnXorShift(uint64_t x, int s) {
  uint64_t y = x;
  for (int i = s; i < 64; i += s) y = x ^ (y >> s);
  return y;
}
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}
uint64_t Unmix(uint64_t x) {
  x = UnXorShift(x, 31);
  x *= MulInverse(0x94d049bb133111ebull);
  x = UnXorShift(x, 27);
  x *= MulInverse(0xbf58476d1ce4e5b9ull);
  return UnXorShift(x, 30);
}

TEST(NegotiationIdentifiers, OneIdentifierDoesNotRevealTheNext) {
  ASSERT_EQ(Unmix(Mix(12345)), 12345u);  // the inverse is right
  testing::InMemoryInventory inv;
  inv.AddPool(HZ_DEV_GPU, 0, 4);
  NegotiationEngine e(NegotiationOptions{}, &inv, nullptr);
  uint64_t ida = 0, idb = 0;
  ASSERT_TRUE(e.Submit(TenantId("a"), Req(1, HZ_LOC_ANY, kNow, kNow, 60), kNow, &ida).ok());
  ASSERT_TRUE(e.Submit(TenantId("b"), Req(1, HZ_LOC_ANY, kNow, kNow, 60), kNow, &idb).ok());
  const uint64_t guess = Mix(Unmix(ida) + 1);
  EXPECT_NE(guess, idb);
  // Nor does a guess find another tenant's negotiation to probe.
  EXPECT_EQ(e.Decline(TenantId("a"), guess, kNow).code(), StatusCode::kNotFound);
}

TEST(NegotiationIdentifiers, IdentifiersAreUniqueAcrossKinds) {
  testing::InMemoryInventory inv;
  inv.AddPool(HZ_DEV_GPU, 0, 64);
  NegotiationEngine e(NegotiationOptions{}, &inv, nullptr);
  std::set<uint64_t> seen;
  for (int i = 0; i < 40; ++i) {
    uint64_t id = 0;
    ASSERT_TRUE(e.Submit(TenantId("t" + std::to_string(i % 4)),
                         Req(1, HZ_LOC_ANY, kNow, kNow + 600, 60), kNow, &id)
                    .ok());
    EXPECT_TRUE(seen.insert(id).second);
  }
  for (const Decision& d : e.Decide(kNow)) {
    for (const hz_neg_offer& o : d.offers) EXPECT_TRUE(seen.insert(o.offer_id).second);
  }
  EXPECT_EQ(seen.count(0), 0u);
}

}  // namespace
}  // namespace hz::negotiation

namespace hz::negotiation {
namespace {

// A busy mixed scenario (pools of several sizes and hosts, a capacity drop,
// every locality, ranges and durations of many windows, reservations taken
// between decision points), summarised as text: where and when each offer
// is, in decision order. The bounded scan must decide exactly as an
// exhaustive one; the expected digest was produced by the exhaustive scan.
std::string ScenarioDigest() {
  testing::InMemoryInventory inv;
  inv.AddPool(HZ_DEV_GPU, 0, 4);
  inv.AddPool(HZ_DEV_GPU, 0, 4);
  inv.AddPool(HZ_DEV_GPU, 1, 8);
  inv.AddPool(HZ_DEV_GPU, 1, 3);
  inv.AddPool(HZ_DEV_NIC, 0, 2);
  NegotiationOptions options;
  options.id_key = 7;
  NegotiationEngine e(options, &inv, nullptr);
  inv.SetCapacityFrom(2, e.WindowOf(kNow) + 7, 5);
  std::string out;
  size_t accepted = 0;
  uint64_t now = kNow;
  for (int round = 0; round < 12; ++round) {
    for (int t = 0; t < 4; ++t) {
      const int i = round * 4 + t;
      hz_neg_request r =
          Req(static_cast<uint16_t>(1 + (i * 7) % 9), static_cast<uint8_t>(i % 3),
              now + (i % 5) * 25, now + (i % 5) * 25 + 60 * ((i * 3) % 11), 60 * (1 + (i * 5) % 7),
              HZ_PRIO_NORMAL, i % 6 == 5 ? HZ_DEV_NIC : HZ_DEV_GPU);
      if (r.kind == HZ_DEV_NIC) r.count = 1 + i % 2;
      uint64_t id = 0;
      EXPECT_TRUE(e.Submit(TenantId("t" + std::to_string(t)), r, now, &id).ok());
    }
    std::map<uint64_t, OfferInfo> offers;
    for (const Decision& d : e.Decide(now)) {
      for (const OfferInfo& o : e.Offers()) offers[o.offer.offer_id] = o;
      out += d.tenant.name() + ":";
      for (const hz_neg_offer& o : d.offers) {
        out += " " + std::to_string(o.start_s - kNow) + "/" + std::to_string(o.duration_s) + "x" +
               std::to_string(o.count) + "@";
        for (const PoolCount& pc : offers[o.offer_id].devices) {
          out += std::to_string(pc.pool) + "." + std::to_string(pc.count) + ",";
        }
      }
      out += "\n";
      if (!d.offers.empty()) {
        uint64_t res = 0;
        const hz_neg_offer& o = d.offers[++accepted % d.offers.size()];
        EXPECT_TRUE(e.Accept(d.tenant, o.offer_id, now, &res).ok());
      }
    }
    now += 130;
    e.Tick(now);
  }
  return out;
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

TEST(NegotiationCost, BoundedScanDecidesAsTheExhaustiveScan) {
  const std::string digest = ScenarioDigest();
  EXPECT_EQ(Fnv1a(digest), 9987271179036486718ull) << digest;
}

}  // namespace
}  // namespace hz::negotiation

namespace hz::negotiation {
namespace {

// A decision point taken in three steps, with calls between the scan and the
// booking (what the service does while the scan runs unlocked): only what
// still holds is booked.
TEST(NegotiationSteps, WhatChangedDuringTheScanIsNotBookedFromTheOldSnapshot) {
  testing::InMemoryInventory inv;
  inv.AddPool(HZ_DEV_GPU, 0, 2);
  NegotiationEngine e(NegotiationOptions{}, &inv, nullptr);
  const hz_neg_request two = Req(2, HZ_LOC_ANY, kNow, kNow + 60, 600);
  uint64_t countered = 0, declined = 0, kept = 0;
  ASSERT_TRUE(e.Submit(TenantId("a"), two, kNow, &countered).ok());
  ASSERT_TRUE(e.Submit(TenantId("b"), Req(1, HZ_LOC_ANY, kNow, kNow, 600), kNow, &declined).ok());
  ASSERT_TRUE(e.Submit(TenantId("c"), Req(1, HZ_LOC_ANY, kNow, kNow, 600), kNow, &kept).ok());

  DecisionRound round = e.PrepareDecide(kNow);
  e.PlanDecide(round);
  // Meanwhile: a counters (its new request waits), b declines, and a
  // request of d arrives (decided next time).
  ASSERT_TRUE(e.Counter(TenantId("a"), countered, Req(1, HZ_LOC_ANY, kNow, kNow, 60), kNow).ok());
  ASSERT_TRUE(e.Decline(TenantId("b"), declined, kNow).ok());
  uint64_t late = 0;
  ASSERT_TRUE(e.Submit(TenantId("d"), Req(1, HZ_LOC_ANY, kNow, kNow, 600), kNow, &late).ok());
  std::vector<Decision> decided = e.ApplyDecide(round, kNow);

  std::set<uint64_t> answered;
  for (const Decision& d : decided) answered.insert(d.result.negotiation_id);
  EXPECT_EQ(answered.count(countered), 0u);
  EXPECT_EQ(answered.count(declined), 0u);
  EXPECT_EQ(answered.count(late), 0u);
  for (const OfferInfo& o : e.Offers()) EXPECT_NE(o.tenant, TenantId("b"));
  // Nothing is booked twice: the pool's two devices are never exceeded.
  for (uint64_t w = e.WindowOf(kNow); w < e.WindowOf(kNow + 1200); ++w) {
    EXPECT_LE(e.Booked(0, w), 2u) << w;
  }
  // The countered request and d's are decided at the next decision point.
  std::set<uint64_t> next;
  for (const Decision& d : e.Decide(kNow)) next.insert(d.result.negotiation_id);
  EXPECT_EQ(next.count(countered), 1u);
  EXPECT_EQ(next.count(late), 1u);
}

}  // namespace
}  // namespace hz::negotiation
