#include "hz/negotiation/negotiation.h"

#include <gtest/gtest.h>

#include <set>

#include "in_memory_inventory.h"
#include "request_util.h"
#include "test_util.h"

namespace hz::negotiation {
namespace {

using testing::kNow;
using testing::Req;

class Negotiation : public ::testing::Test {
 protected:
  Negotiation() : engine_(NegotiationOptions{}, &inv_, &sink_) {
    inv_.AddPool(HZ_DEV_GPU, 0, 4);  // pool 0
    inv_.AddPool(HZ_DEV_GPU, 0, 4);  // pool 1
    inv_.AddPool(HZ_DEV_GPU, 1, 8);  // pool 2
    inv_.AddPool(HZ_DEV_NIC, 0, 2);  // pool 3
  }

  Decision Ask(const TenantId& tenant, const hz_neg_request& r, uint64_t now = kNow) {
    uint64_t id = 0;
    Status s = engine_.Submit(tenant, r, now, &id);
    EXPECT_TRUE(s.ok()) << s.ToString();
    auto decisions = engine_.Decide(now);
    for (auto& d : decisions) {
      if (d.result.negotiation_id == id) return d;
    }
    ADD_FAILURE() << "no decision for " << id;
    return {};
  }

  testing::InMemoryInventory inv_;
  events::testing::RecordingSink sink_;
  NegotiationEngine engine_;
};

TEST_F(Negotiation, OffersRespectTheRequestedWindow) {
  uint64_t earliest = kNow + 25, latest = kNow + 300;
  Decision d = Ask(TenantId("a"), Req(4, HZ_LOC_SAME_GROUP, earliest, latest, 600));
  EXPECT_EQ(d.result.round, 1u);
  ASSERT_GT(d.offers.size(), 0u);
  ASSERT_LE(d.offers.size(), HZ_NEG_MAX_OFFERS);
  EXPECT_EQ(d.result.num_offers, d.offers.size());
  uint64_t prev = 0;
  for (const auto& o : d.offers) {
    EXPECT_GE(o.start_s, earliest);
    EXPECT_LE(o.start_s, latest);
    EXPECT_EQ(o.start_s % 10, 0u);
    EXPECT_GT(o.start_s, prev);  // one offer per start window, in time order
    prev = o.start_s;
    EXPECT_EQ(o.duration_s, 600u);
    EXPECT_EQ(o.expires_s, kNow + 30);
    EXPECT_EQ(o.count, 4u);
    EXPECT_EQ(o.locality, HZ_LOC_SAME_GROUP);
  }
  EXPECT_EQ(d.offers[0].start_s, kNow + 30);  // 25 rounded up to the 10 s grid
  EXPECT_EQ(d.offers[1].start_s, kNow + 60);
}

TEST_F(Negotiation, AcceptedReservationStartsAndEnds) {
  std::vector<std::pair<std::string, uint32_t>> alloc;
  engine_.SetAllocationListener(
      [&](const TenantId& t, uint32_t n) { alloc.emplace_back(t.name(), n); });
  Decision d = Ask(TenantId("a"), Req(4, HZ_LOC_SAME_GROUP, kNow, kNow + 120, 300));
  ASSERT_FALSE(d.offers.empty());
  EXPECT_EQ(d.offers[0].start_s, kNow);
  uint64_t res = 0;
  ASSERT_TRUE(engine_.Accept(TenantId("a"), d.offers[0].offer_id, kNow + 5, &res).ok());
  EXPECT_TRUE(engine_.Offers().empty());  // the alternatives were released
  EXPECT_EQ(inv_.Attached(TenantId("a")), 4u);
  auto started = sink_.Matching(HZ_TOPIC_CAPACITY, events::kCapacityReservationStarted);
  ASSERT_EQ(started.size(), 1u);
  auto p = events::testing::PayloadAs<events::CapacityPayload>(started[0].spec.payload.data());
  EXPECT_EQ(p.reservation_id, res);
  EXPECT_EQ(p.count, 4u);
  EXPECT_EQ(p.devices_now, 4u);
  ASSERT_EQ(alloc.size(), 1u);
  EXPECT_EQ(alloc[0].second, 4u);

  engine_.Tick(kNow + 299);
  EXPECT_EQ(inv_.Attached(TenantId("a")), 4u);
  engine_.Tick(kNow + 300);
  EXPECT_EQ(inv_.Attached(TenantId("a")), 0u);
  EXPECT_EQ(sink_.Matching(HZ_TOPIC_CAPACITY, events::kCapacityReservationEnded).size(), 1u);
  EXPECT_EQ(alloc.back().second, 0u);
  EXPECT_EQ(engine_.Reservations()[0].state, ReservationState::kEnded);
}

TEST_F(Negotiation, FutureReservationStartsAtItsStart) {
  Decision d = Ask(TenantId("a"), Req(2, HZ_LOC_ANY, kNow + 600, kNow + 600, 60));
  ASSERT_EQ(d.offers.size(), 1u);
  uint64_t res = 0;
  ASSERT_TRUE(engine_.Accept(TenantId("a"), d.offers[0].offer_id, kNow, &res).ok());
  engine_.Tick(kNow + 599);
  EXPECT_EQ(inv_.Attached(TenantId("a")), 0u);
  engine_.Tick(kNow + 600);
  EXPECT_EQ(inv_.Attached(TenantId("a")), 2u);
}

TEST_F(Negotiation, ExpiredUnknownAndForeignOffersAreNotFound) {
  Decision d = Ask(TenantId("a"), Req(1, HZ_LOC_ANY, kNow, kNow, 60));
  ASSERT_EQ(d.offers.size(), 1u);
  uint64_t res = 0;
  EXPECT_EQ(engine_.Accept(TenantId("b"), d.offers[0].offer_id, kNow, &res).code(),
            StatusCode::kPermission);
  EXPECT_EQ(engine_.Accept(TenantId("a"), 9999, kNow, &res).code(), StatusCode::kNotFound);
  EXPECT_EQ(engine_.Accept(TenantId("a"), d.offers[0].offer_id, d.offers[0].expires_s, &res).code(),
            StatusCode::kNotFound);
  EXPECT_TRUE(engine_.Offers().empty());
  EXPECT_EQ(engine_.Booked(0, engine_.WindowOf(kNow)) + engine_.Booked(2, engine_.WindowOf(kNow)),
            0u);
  auto expired = sink_.Matching(HZ_TOPIC_NEGOTIATION, events::kNegotiationOfferExpired);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].tenant, TenantId("a"));
  auto p = events::testing::PayloadAs<events::NegotiationPayload>(expired[0].spec.payload.data());
  EXPECT_EQ(p.offer_id, d.offers[0].offer_id);
  EXPECT_EQ(p.negotiation_id, d.result.negotiation_id);
}

TEST_F(Negotiation, OffersHoldCapacity) {
  // Pool 2 is the only group with 8 GPUs.
  Decision a = Ask(TenantId("a"), Req(8, HZ_LOC_SAME_GROUP, kNow, kNow, 60));
  ASSERT_EQ(a.offers.size(), 1u);
  Decision b = Ask(TenantId("b"), Req(8, HZ_LOC_SAME_GROUP, kNow, kNow, 60));
  EXPECT_TRUE(b.offers.empty());
  EXPECT_EQ(engine_.Booked(2, engine_.WindowOf(kNow)), 8u);
  // b counters with a wider range: the windows after a's hold are free.
  uint64_t later = kNow + 20;
  ASSERT_TRUE(engine_
                  .Counter(TenantId("b"), b.result.negotiation_id,
                           Req(8, HZ_LOC_SAME_GROUP, kNow, kNow + 120, 60), later)
                  .ok());
  auto decisions = engine_.Decide(later);
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0].result.round, 2u);
  ASSERT_EQ(decisions[0].offers.size(), 2u);
  EXPECT_EQ(decisions[0].offers[0].start_s, kNow + 60);
  EXPECT_EQ(decisions[0].offers[1].start_s, kNow + 120);
  EXPECT_EQ(engine_.Booked(2, engine_.WindowOf(kNow + 60)), 8u);
}

TEST_F(Negotiation, LowerWeightedUsageIsServedFirst) {
  // a already holds a reservation: its usage is higher than b's.
  Decision first = Ask(TenantId("a"), Req(1, HZ_LOC_ANY, kNow, kNow, 60, HZ_PRIO_HIGH, HZ_DEV_NIC));
  uint64_t res = 0;
  ASSERT_TRUE(engine_.Accept(TenantId("a"), first.offers[0].offer_id, kNow, &res).ok());
  // One NIC left; a asks first and with a higher priority, but b has used nothing.
  uint64_t ida = 0, idb = 0;
  ASSERT_TRUE(engine_
                  .Submit(TenantId("a"),
                          Req(1, HZ_LOC_ANY, kNow, kNow, 60, HZ_PRIO_HIGH, HZ_DEV_NIC), kNow, &ida)
                  .ok());
  ASSERT_TRUE(engine_
                  .Submit(TenantId("b"),
                          Req(1, HZ_LOC_ANY, kNow, kNow, 60, HZ_PRIO_LOW, HZ_DEV_NIC), kNow, &idb)
                  .ok());
  auto decisions = engine_.Decide(kNow);
  ASSERT_EQ(decisions.size(), 2u);
  EXPECT_EQ(decisions[0].tenant, TenantId("b"));
  EXPECT_EQ(decisions[0].offers.size(), 1u);
  EXPECT_EQ(decisions[1].tenant, TenantId("a"));
  EXPECT_TRUE(decisions[1].offers.empty());
}

TEST_F(Negotiation, WeightsScaleUsage) {
  // a and b each hold 60 NIC-seconds; a's weight of 2 halves its weighted usage.
  for (const TenantId& t : {TenantId("a"), TenantId("b")}) {
    Decision d = Ask(t, Req(1, HZ_LOC_ANY, kNow + 600, kNow + 600, 60, HZ_PRIO_NORMAL, HZ_DEV_NIC));
    uint64_t res;
    ASSERT_TRUE(engine_.Accept(t, d.offers[0].offer_id, kNow, &res).ok());
  }
  ASSERT_TRUE(engine_.SetWeight(TenantId("a"), 2).ok());
  EXPECT_EQ(engine_.SetWeight(TenantId("a"), 0).code(), StatusCode::kInvalidArgument);
  uint64_t id;
  ASSERT_TRUE(engine_
                  .Submit(TenantId("b"),
                          Req(2, HZ_LOC_ANY, kNow, kNow, 60, HZ_PRIO_HIGH, HZ_DEV_NIC), kNow, &id)
                  .ok());
  ASSERT_TRUE(engine_
                  .Submit(TenantId("a"),
                          Req(2, HZ_LOC_ANY, kNow, kNow, 60, HZ_PRIO_LOW, HZ_DEV_NIC), kNow, &id)
                  .ok());
  auto decisions = engine_.Decide(kNow);
  ASSERT_EQ(decisions.size(), 2u);
  EXPECT_EQ(decisions[0].tenant, TenantId("a"));
  EXPECT_EQ(decisions[0].offers.size(), 1u);
  EXPECT_TRUE(decisions[1].offers.empty());
}

TEST_F(Negotiation, TiesBreakByPriorityThenArrivalThenId) {
  uint64_t id1, id2, id3;
  ASSERT_TRUE(engine_
                  .Submit(TenantId("x"),
                          Req(2, HZ_LOC_ANY, kNow, kNow, 60, HZ_PRIO_LOW, HZ_DEV_NIC), kNow, &id1)
                  .ok());
  ASSERT_TRUE(engine_
                  .Submit(TenantId("y"),
                          Req(2, HZ_LOC_ANY, kNow, kNow, 60, HZ_PRIO_NORMAL, HZ_DEV_NIC), kNow,
                          &id2)
                  .ok());
  ASSERT_TRUE(engine_
                  .Submit(TenantId("z"),
                          Req(2, HZ_LOC_ANY, kNow, kNow, 60, HZ_PRIO_NORMAL, HZ_DEV_NIC), kNow,
                          &id3)
                  .ok());
  auto decisions = engine_.Decide(kNow);
  ASSERT_EQ(decisions.size(), 3u);
  EXPECT_EQ(decisions[0].tenant, TenantId("y"));  // higher priority, earlier arrival than z
  EXPECT_EQ(decisions[0].offers.size(), 1u);
  EXPECT_EQ(decisions[1].tenant, TenantId("z"));
  EXPECT_EQ(decisions[2].tenant, TenantId("x"));
  EXPECT_TRUE(decisions[1].offers.empty());
  EXPECT_TRUE(decisions[2].offers.empty());
}

TEST_F(Negotiation, DecisionsAreDeterministic) {
  auto run = [] {
    testing::InMemoryInventory inv;
    inv.AddPool(HZ_DEV_GPU, 0, 3);
    inv.AddPool(HZ_DEV_GPU, 1, 5);
    events::testing::RecordingSink sink;
    NegotiationOptions options;
    options.id_key = 42;
    NegotiationEngine e(options, &inv, &sink);
    std::vector<uint64_t> out;
    uint64_t id;
    for (int i = 0; i < 6; ++i) {
      EXPECT_TRUE(e.Submit(TenantId("t" + std::to_string(i % 3)),
                           Req(static_cast<uint16_t>(1 + i % 4), static_cast<uint8_t>(i % 3), kNow,
                               kNow + 600, 120),
                           kNow, &id)
                      .ok());
    }
    for (const auto& d : e.Decide(kNow)) {
      out.push_back(d.result.negotiation_id);
      for (const auto& o : d.offers) {
        out.push_back(o.offer_id);
        out.push_back(o.start_s);
      }
    }
    return out;
  };
  EXPECT_EQ(run(), run());
}

TEST_F(Negotiation, LocalityShapesPlacement) {
  Decision host = Ask(TenantId("a"), Req(6, HZ_LOC_SAME_HOST, kNow, kNow, 60));
  ASSERT_EQ(host.offers.size(), 1u);
  auto offers = engine_.Offers();
  ASSERT_EQ(offers.size(), 1u);
  uint32_t total = 0;
  for (const auto& pc : offers[0].devices) {
    EXPECT_NE(pc.pool, 2u);  // host 0 fits 6 exactly as well as host 1; lowest host wins
    total += pc.count;
  }
  EXPECT_EQ(total, 6u);
  Decision group = Ask(TenantId("b"), Req(5, HZ_LOC_SAME_GROUP, kNow, kNow, 60));
  ASSERT_EQ(group.offers.size(), 1u);  // only pool 2 has 5 in one group
  Decision any = Ask(TenantId("c"), Req(6, HZ_LOC_ANY, kNow, kNow, 60));
  EXPECT_TRUE(any.offers.empty());  // 2 + 3 left: 5 < 6
  Decision any5 = Ask(TenantId("c"), Req(5, HZ_LOC_ANY, kNow, kNow, 60));
  EXPECT_EQ(any5.offers.size(), 1u);
}

TEST_F(Negotiation, RoundsAreLimited) {
  Decision d = Ask(TenantId("a"), Req(1, HZ_LOC_ANY, kNow, kNow + 60, 60));
  uint64_t id = d.result.negotiation_id;
  for (uint32_t round = 2; round <= 8; ++round) {
    ASSERT_TRUE(
        engine_.Counter(TenantId("a"), id, Req(1, HZ_LOC_ANY, kNow, kNow + 60, 60), kNow).ok());
    auto decisions = engine_.Decide(kNow);
    ASSERT_EQ(decisions.size(), 1u);
    EXPECT_EQ(decisions[0].result.round, round);
  }
  EXPECT_EQ(
      engine_.Counter(TenantId("a"), id, Req(1, HZ_LOC_ANY, kNow, kNow + 60, 60), kNow).code(),
      StatusCode::kLimit);
}

TEST_F(Negotiation, DeclineEndsTheNegotiation) {
  Decision d = Ask(TenantId("a"), Req(1, HZ_LOC_ANY, kNow, kNow + 60, 60));
  ASSERT_FALSE(d.offers.empty());
  EXPECT_EQ(engine_.Decline(TenantId("b"), d.result.negotiation_id, kNow).code(),
            StatusCode::kPermission);
  ASSERT_TRUE(engine_.Decline(TenantId("a"), d.result.negotiation_id, kNow).ok());
  EXPECT_TRUE(engine_.Offers().empty());
  uint64_t res;
  EXPECT_EQ(engine_.Accept(TenantId("a"), d.offers[0].offer_id, kNow, &res).code(),
            StatusCode::kNotFound);
  EXPECT_EQ(
      engine_
          .Counter(TenantId("a"), d.result.negotiation_id, Req(1, HZ_LOC_ANY, kNow, kNow, 60), kNow)
          .code(),
      StatusCode::kNotFound);
  EXPECT_EQ(engine_.Decline(TenantId("a"), d.result.negotiation_id, kNow).code(),
            StatusCode::kNotFound);
}

TEST_F(Negotiation, BadRequestsAreRejected) {
  uint64_t id;
  auto code = [&](hz_neg_request r) { return engine_.Submit(TenantId("a"), r, kNow, &id).code(); };
  using C = StatusCode;
  EXPECT_EQ(code(Req(0, HZ_LOC_ANY, kNow, kNow, 60)), C::kInvalidArgument);
  EXPECT_EQ(code(Req(1, HZ_LOC_ANY, kNow + 60, kNow, 60)), C::kInvalidArgument);
  EXPECT_EQ(code(Req(1, HZ_LOC_ANY, kNow - 120, kNow - 60, 60)), C::kInvalidArgument);
  EXPECT_EQ(code(Req(1, HZ_LOC_ANY, kNow, kNow, 0)), C::kInvalidArgument);
  EXPECT_EQ(code(Req(1, 7, kNow, kNow, 60)), C::kInvalidArgument);
  EXPECT_EQ(code(Req(1, HZ_LOC_ANY, kNow, kNow, 60, HZ_PRIO_MAX)), C::kInvalidArgument);
  EXPECT_EQ(code(Req(1, HZ_LOC_ANY, kNow, kNow, 60, HZ_PRIO_LOW, 9)), C::kInvalidArgument);
  hz_neg_request reserved = Req(1, HZ_LOC_ANY, kNow, kNow, 60);
  reserved.reserved = 1;
  EXPECT_EQ(code(reserved), C::kNotSupported);
  ASSERT_TRUE(engine_.SetMaxPriority(TenantId("a"), HZ_PRIO_NORMAL).ok());
  EXPECT_EQ(code(Req(1, HZ_LOC_ANY, kNow, kNow, 60, HZ_PRIO_HIGH)), C::kPermission);
  EXPECT_EQ(engine_.SetMaxPriority(TenantId("a"), HZ_PRIO_MAX).code(), C::kInvalidArgument);
  EXPECT_EQ(code(Req(1, HZ_LOC_ANY, kNow, kNow, 86401)), C::kLimit);
  EXPECT_EQ(code(Req(1, HZ_LOC_ANY, kNow, kNow + 8 * 86400, 60)), C::kLimit);
  EXPECT_EQ(code(Req(1, HZ_LOC_ANY, UINT64_MAX - 10, UINT64_MAX, UINT64_MAX)), C::kLimit);
  EXPECT_TRUE(engine_.Decide(kNow).empty());
  // Unknown ids.
  EXPECT_EQ(engine_.Counter(TenantId("a"), 42, Req(1, HZ_LOC_ANY, kNow, kNow, 60), kNow).code(),
            C::kNotFound);
  EXPECT_EQ(engine_.Decline(TenantId("a"), 42, kNow).code(), C::kNotFound);
  EXPECT_EQ(engine_.Release(TenantId("a"), 42, 0, kNow).code(), C::kNotFound);
  EXPECT_EQ(engine_.Revoke(42, events::kRevokeOperator, kNow).code(), C::kNotFound);
}

TEST_F(Negotiation, OpenNegotiationsAreLimited) {
  uint64_t id;
  for (int i = 0; i < 64; ++i) {
    ASSERT_TRUE(engine_.Submit(TenantId("a"), Req(1, HZ_LOC_ANY, kNow, kNow, 60), kNow, &id).ok());
  }
  EXPECT_EQ(engine_.Submit(TenantId("a"), Req(1, HZ_LOC_ANY, kNow, kNow, 60), kNow, &id).code(),
            StatusCode::kLimit);
  EXPECT_TRUE(engine_.Submit(TenantId("b"), Req(1, HZ_LOC_ANY, kNow, kNow, 60), kNow, &id).ok());
}

TEST_F(Negotiation, ReleaseScalesDown) {
  std::vector<uint32_t> alloc;
  engine_.SetAllocationListener([&](const TenantId&, uint32_t n) { alloc.push_back(n); });
  Decision d = Ask(TenantId("a"), Req(4, HZ_LOC_SAME_GROUP, kNow, kNow, 600));
  uint64_t res;
  ASSERT_TRUE(engine_.Accept(TenantId("a"), d.offers[0].offer_id, kNow, &res).ok());
  EXPECT_EQ(engine_.Release(TenantId("b"), res, 1, kNow).code(), StatusCode::kPermission);
  hz_neg_release_args bad{res, 1, 1, 0};
  EXPECT_EQ(engine_.Release(TenantId("a"), bad, kNow).code(), StatusCode::kNotSupported);
  EXPECT_EQ(engine_.Release(TenantId("a"), res, 5, kNow).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(engine_.Release(TenantId("a"), res, 1, kNow + 60).ok());
  EXPECT_EQ(inv_.Attached(TenantId("a")), 3u);
  EXPECT_EQ(alloc.back(), 3u);
  auto rel = sink_.Matching(HZ_TOPIC_CAPACITY, events::kCapacityReservationReleased);
  ASSERT_EQ(rel.size(), 1u);
  EXPECT_EQ(
      events::testing::PayloadAs<events::CapacityPayload>(rel[0].spec.payload.data()).devices_now,
      3u);
  // The released device is free again from the current window on.
  uint32_t pool = engine_.Reservations()[0].devices[0].pool;
  EXPECT_EQ(engine_.Booked(pool, engine_.WindowOf(kNow + 60)), 3u);
  ASSERT_TRUE(engine_.Release(TenantId("a"), res, 0, kNow + 120).ok());
  EXPECT_EQ(inv_.Attached(TenantId("a")), 0u);
  EXPECT_EQ(engine_.Reservations()[0].state, ReservationState::kReleased);
  EXPECT_EQ(engine_.Release(TenantId("a"), res, 0, kNow + 120).code(), StatusCode::kState);
}

TEST_F(Negotiation, CapacityLossRevokesWithAnEvent) {
  Decision d = Ask(TenantId("a"), Req(8, HZ_LOC_SAME_GROUP, kNow + 120, kNow + 120, 600));
  uint64_t res;
  ASSERT_TRUE(engine_.Accept(TenantId("a"), d.offers[0].offer_id, kNow, &res).ok());
  Decision other = Ask(TenantId("b"), Req(4, HZ_LOC_SAME_GROUP, kNow, kNow, 60));
  ASSERT_EQ(other.offers.size(), 1u);
  // Pool 2 loses half its GPUs from the reservation's second window.
  inv_.SetCapacityFrom(2, engine_.WindowOf(kNow + 180), 4);
  engine_.Tick(kNow + 10);
  auto revoked = sink_.Matching(HZ_TOPIC_NEGOTIATION, events::kNegotiationReservationRevoked);
  ASSERT_EQ(revoked.size(), 1u);
  EXPECT_EQ(revoked[0].tenant, TenantId("a"));
  auto p = events::testing::PayloadAs<events::NegotiationPayload>(revoked[0].spec.payload.data());
  EXPECT_EQ(p.reservation_id, res);
  EXPECT_EQ(p.reason, events::kRevokeCapacityLost);
  EXPECT_EQ(engine_.Reservations()[0].state, ReservationState::kRevoked);
  // b's offer sits on pool 0 or 1 and is unaffected.
  EXPECT_EQ(engine_.Offers().size(), 1u);
}

TEST_F(Negotiation, CapacityLossWithdrawsOffersFirst) {
  // a reserves 2 GPUs of pool 0 (best fit); b is offered the other 2 of pool 0.
  Decision d = Ask(TenantId("a"), Req(2, HZ_LOC_SAME_GROUP, kNow, kNow, 60));
  uint64_t res;
  ASSERT_TRUE(engine_.Accept(TenantId("a"), d.offers[0].offer_id, kNow, &res).ok());
  ASSERT_EQ(engine_.Reservations()[0].devices, (std::vector<PoolCount>{{0, 2}}));
  Decision b = Ask(TenantId("b"), Req(2, HZ_LOC_SAME_GROUP, kNow, kNow, 60));
  ASSERT_EQ(b.offers.size(), 1u);
  ASSERT_EQ(engine_.Offers()[0].devices, (std::vector<PoolCount>{{0, 2}}));
  // Pool 0 shrinks to 2: the tentative offer goes, the reservation stays.
  inv_.SetCapacityFrom(0, engine_.WindowOf(kNow), 2);
  engine_.Tick(kNow);
  auto withdrawn = sink_.Matching(HZ_TOPIC_NEGOTIATION, events::kNegotiationOfferWithdrawn);
  ASSERT_EQ(withdrawn.size(), 1u);
  EXPECT_EQ(withdrawn[0].tenant, TenantId("b"));
  EXPECT_EQ(events::testing::PayloadAs<events::NegotiationPayload>(withdrawn[0].spec.payload.data())
                .offer_id,
            b.offers[0].offer_id);
  EXPECT_TRUE(engine_.Offers().empty());
  EXPECT_TRUE(sink_.Matching(HZ_TOPIC_NEGOTIATION, events::kNegotiationReservationRevoked).empty());
  EXPECT_EQ(inv_.Attached(TenantId("a")), 2u);
  // Shrinking further takes the reservation back, with an event.
  inv_.SetCapacityFrom(0, engine_.WindowOf(kNow), 1);
  engine_.Tick(kNow + 1);
  EXPECT_EQ(sink_.Matching(HZ_TOPIC_NEGOTIATION, events::kNegotiationReservationRevoked).size(),
            1u);
  EXPECT_EQ(inv_.Attached(TenantId("a")), 0u);
}

TEST_F(Negotiation, AttachFailureRevokes) {
  inv_.FailAttach(true);
  Decision d = Ask(TenantId("a"), Req(2, HZ_LOC_ANY, kNow, kNow, 60));
  uint64_t res;
  ASSERT_TRUE(engine_.Accept(TenantId("a"), d.offers[0].offer_id, kNow, &res).ok());
  auto revoked = sink_.Matching(HZ_TOPIC_NEGOTIATION, events::kNegotiationReservationRevoked);
  ASSERT_EQ(revoked.size(), 1u);
  EXPECT_EQ(
      events::testing::PayloadAs<events::NegotiationPayload>(revoked[0].spec.payload.data()).reason,
      events::kRevokeAttachFailed);
  EXPECT_EQ(engine_.Booked(0, engine_.WindowOf(kNow)) + engine_.Booked(1, engine_.WindowOf(kNow)) +
                engine_.Booked(2, engine_.WindowOf(kNow)),
            0u);
}

TEST_F(Negotiation, OperatorRevoke) {
  Decision d = Ask(TenantId("a"), Req(2, HZ_LOC_ANY, kNow, kNow, 600));
  uint64_t res;
  ASSERT_TRUE(engine_.Accept(TenantId("a"), d.offers[0].offer_id, kNow, &res).ok());
  ASSERT_TRUE(engine_.Revoke(res, events::kRevokeHardwareFailure, kNow + 10).ok());
  EXPECT_EQ(inv_.Attached(TenantId("a")), 0u);
  EXPECT_EQ(engine_.Revoke(res, events::kRevokeHardwareFailure, kNow + 10).code(),
            StatusCode::kState);
  auto revoked = sink_.Matching(HZ_TOPIC_NEGOTIATION, events::kNegotiationReservationRevoked);
  ASSERT_EQ(revoked.size(), 1u);
  EXPECT_EQ(
      events::testing::PayloadAs<events::NegotiationPayload>(revoked[0].spec.payload.data()).reason,
      events::kRevokeHardwareFailure);
}

TEST_F(Negotiation, RevocationEventCarriesCountAndKind) {
  Decision d = Ask(TenantId("a"), Req(2, HZ_LOC_ANY, kNow, kNow, 600, HZ_PRIO_NORMAL, HZ_DEV_NIC));
  uint64_t res;
  ASSERT_TRUE(engine_.Accept(TenantId("a"), d.offers[0].offer_id, kNow, &res).ok());
  ASSERT_TRUE(engine_.Revoke(res, events::kRevokeOperator, kNow + 10).ok());
  auto revoked = sink_.Matching(HZ_TOPIC_NEGOTIATION, events::kNegotiationReservationRevoked);
  ASSERT_EQ(revoked.size(), 1u);
  auto p = events::testing::PayloadAs<events::NegotiationPayload>(revoked[0].spec.payload.data());
  EXPECT_EQ(p.count, 2u);
  EXPECT_EQ(p.device_kind, HZ_DEV_NIC);
  EXPECT_EQ(p.negotiation_id, d.result.negotiation_id);
  EXPECT_EQ(p.reason, events::kRevokeOperator);
}

TEST_F(Negotiation, NegotiationWithoutOffersClosesAfterOneLifetime) {
  Decision d = Ask(TenantId("a"), Req(9, HZ_LOC_SAME_GROUP, kNow, kNow, 60));
  ASSERT_TRUE(d.offers.empty());
  uint64_t id = d.result.negotiation_id;
  // Still open within one offer lifetime of the decision.
  ASSERT_TRUE(
      engine_.Counter(TenantId("a"), id, Req(9, HZ_LOC_SAME_GROUP, kNow, kNow + 60, 60), kNow + 10)
          .ok());
  auto decisions = engine_.Decide(kNow + 10);
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_TRUE(decisions[0].offers.empty());
  engine_.Tick(kNow + 40);
  EXPECT_EQ(
      engine_.Counter(TenantId("a"), id, Req(1, HZ_LOC_ANY, kNow + 40, kNow + 60, 60), kNow + 40)
          .code(),
      StatusCode::kNotFound);
  EXPECT_EQ(engine_.Decline(TenantId("a"), id, kNow + 40).code(), StatusCode::kNotFound);
  EXPECT_EQ(engine_.Decline(TenantId("b"), id, kNow + 40).code(), StatusCode::kPermission);
}

TEST_F(Negotiation, ReplacementOfferIsPublished) {
  uint64_t id = 0;
  ASSERT_TRUE(
      engine_.OfferReplacement(TenantId("a"), Req(1, HZ_LOC_SAME_GROUP, kNow, kNow, 300), kNow, &id)
          .ok());
  auto decisions = engine_.Decide(kNow);
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_TRUE(decisions[0].provider_initiated);
  ASSERT_EQ(decisions[0].offers.size(), 1u);
  auto made = sink_.Matching(HZ_TOPIC_NEGOTIATION, events::kNegotiationOfferMade);
  ASSERT_EQ(made.size(), 1u);
  auto p = events::testing::PayloadAs<events::NegotiationPayload>(made[0].spec.payload.data());
  EXPECT_EQ(p.negotiation_id, id);
  EXPECT_EQ(p.offer_id, decisions[0].offers[0].offer_id);
  EXPECT_EQ(p.start_s, kNow);
  EXPECT_EQ(p.duration_s, 300u);
  EXPECT_EQ(p.expires_s, kNow + 30);
  EXPECT_EQ(p.count, 1u);
  EXPECT_EQ(p.locality, HZ_LOC_SAME_GROUP);
  EXPECT_EQ(p.device_kind, HZ_DEV_GPU);
  uint64_t res;
  ASSERT_TRUE(engine_.Accept(TenantId("a"), p.offer_id, kNow + 5, &res).ok());
  EXPECT_EQ(inv_.Attached(TenantId("a")), 1u);
}

TEST_F(Negotiation, IdentifiersAreUniqueAndKeyed) {
  auto ids = [](uint64_t key) {
    testing::InMemoryInventory inv;
    inv.AddPool(HZ_DEV_GPU, 0, 64);
    NegotiationOptions o;
    o.id_key = key;
    NegotiationEngine e(o, &inv, nullptr);
    std::vector<uint64_t> out;
    for (int i = 0; i < 20; ++i) {
      uint64_t id;
      EXPECT_TRUE(
          e.Submit(TenantId("a"), Req(1, HZ_LOC_ANY, kNow, kNow + 600, 60), kNow, &id).ok());
      out.push_back(id);
    }
    for (const auto& d : e.Decide(kNow)) {
      for (const auto& offer : d.offers) out.push_back(offer.offer_id);
    }
    return out;
  };
  auto a = ids(1), b = ids(1), c = ids(2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::set<uint64_t> unique(a.begin(), a.end());
  EXPECT_EQ(unique.size(), a.size());
  EXPECT_EQ(unique.count(0), 0u);
  // Not a counter: consecutive identifiers are far apart.
  EXPECT_GT(a[1] > a[0] ? a[1] - a[0] : a[0] - a[1], 1000u);
}

TEST_F(Negotiation, FinishedReservationsAreForgottenAfterTheHorizon) {
  Decision d = Ask(TenantId("a"), Req(1, HZ_LOC_ANY, kNow, kNow, 60));
  uint64_t res;
  ASSERT_TRUE(engine_.Accept(TenantId("a"), d.offers[0].offer_id, kNow, &res).ok());
  engine_.Tick(kNow + 60);
  uint64_t usage;
  uint32_t weight;
  engine_.Usage(TenantId("a"), kNow + 60, &usage, &weight);
  EXPECT_EQ(usage, 60u);
  EXPECT_EQ(engine_.Release(TenantId("a"), res, 0, kNow + 61).code(), StatusCode::kState);
  engine_.Tick(kNow + 60 + 3600);
  EXPECT_TRUE(engine_.Reservations().empty());
  engine_.Usage(TenantId("a"), kNow + 3660, &usage, &weight);
  EXPECT_EQ(usage, 0u);
  engine_.Tick(kNow + 60 + 2 * 3600);
  EXPECT_EQ(engine_.Release(TenantId("a"), res, 0, kNow + 2 * 3600 + 61).code(),
            StatusCode::kNotFound);
}

TEST_F(Negotiation, CapacityEventsReportTheWholeAllocation) {
  inv_.SetBaseDevices(TenantId("a"), HZ_DEV_GPU, 8);
  std::vector<uint32_t> gpus;
  engine_.SetAllocationListener([&](const TenantId&, uint32_t n) { gpus.push_back(n); });
  Decision d = Ask(TenantId("a"), Req(2, HZ_LOC_ANY, kNow, kNow, 60));
  uint64_t res;
  ASSERT_TRUE(engine_.Accept(TenantId("a"), d.offers[0].offer_id, kNow, &res).ok());
  auto started = sink_.Matching(HZ_TOPIC_CAPACITY, events::kCapacityReservationStarted);
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(events::testing::PayloadAs<events::CapacityPayload>(started[0].spec.payload.data())
                .devices_now,
            10u);
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0], 10u);
}

TEST(NegotiationOptions, Validation) {
  NegotiationOptions o;
  EXPECT_TRUE(NegotiationEngine::ValidateOptions(o).ok());
  o.window_s = 55;
  EXPECT_FALSE(NegotiationEngine::ValidateOptions(o).ok());
  o = {};
  o.offer_ttl_s = 5;
  EXPECT_FALSE(NegotiationEngine::ValidateOptions(o).ok());
  o = {};
  o.max_rounds = 0;
  EXPECT_FALSE(NegotiationEngine::ValidateOptions(o).ok());
}

}  // namespace
}  // namespace hz::negotiation
