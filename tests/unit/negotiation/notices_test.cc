// Preemption notices before a reservation's end and CAPACITY/AVAILABLE to
// the tenants waiting for a device kind (SPEC.md §8.3.3, §8.3.4, §9.6), with
// the engine's clock in the test's hands.
#include <gtest/gtest.h>

#include "hz/negotiation/availability_limiter.h"
#include "hz/negotiation/negotiation.h"
#include "in_memory_inventory.h"
#include "request_util.h"
#include "test_util.h"

namespace hz::negotiation {
namespace {

using events::testing::PayloadAs;
using events::testing::RecordingSink;

using testing::kNow;
const TenantId kA("a"), kB("b"), kC("c"), kD("d");

// A request anywhere, starting in the minute from `start`.
hz_neg_request ReqStartingAt(uint16_t count, uint64_t start, uint64_t duration,
                             uint16_t kind = HZ_DEV_GPU) {
  return testing::Req(count, HZ_LOC_ANY, start, start + 60, duration, HZ_PRIO_NORMAL, kind);
}

NegotiationOptions Options() {
  NegotiationOptions o;
  o.preemption_notice_s = 120;
  // A request decided without offers stays open (its tenant waiting) this long.
  o.offer_ttl_s = 600;
  o.id_key = 7;
  return o;
}

class Notices : public ::testing::Test {
 protected:
  Notices() : engine_(Options(), &inv_, &sink_) {
    inv_.AddPool(HZ_DEV_GPU, 0, 4);  // pool 0
    inv_.AddPool(HZ_DEV_NIC, 0, 2);  // pool 1
  }

  // Asks at `now` and returns the negotiation's decision.
  Decision Ask(const TenantId& tenant, const hz_neg_request& r, uint64_t now) {
    uint64_t id = 0;
    Status s = engine_.Submit(tenant, r, now, &id);
    EXPECT_TRUE(s.ok()) << s.ToString();
    for (Decision& d : engine_.Decide(now)) {
      if (d.result.negotiation_id == id) return d;
    }
    ADD_FAILURE() << "no decision for " << id;
    return {};
  }
  // Asks and accepts the first offer at `now`; the reservation's id.
  uint64_t Reserve(const TenantId& tenant, const hz_neg_request& r, uint64_t now) {
    Decision d = Ask(tenant, r, now);
    EXPECT_FALSE(d.offers.empty());
    if (d.offers.empty()) return 0;
    uint64_t id = 0;
    Status s = engine_.Accept(tenant, d.offers[0].offer_id, now, &id);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return id;
  }

  size_t Count(uint16_t topic, uint16_t kind) const { return sink_.Matching(topic, kind).size(); }
  // Position of the first event of (topic, kind) in the order published,
  // of `tenant` when it is not empty.
  size_t PositionOf(uint16_t topic, uint16_t kind, const TenantId& tenant = TenantId()) const {
    std::vector<RecordingSink::Entry> all = sink_.entries();
    for (size_t i = 0; i < all.size(); ++i) {
      if (!tenant.empty() && all[i].tenant != tenant) continue;
      if (all[i].spec.topic == topic && all[i].spec.kind == kind) return i;
    }
    return all.size();
  }
  std::vector<RecordingSink::Entry> Available() const {
    return sink_.Matching(HZ_TOPIC_CAPACITY, events::kCapacityAvailable);
  }

  testing::InMemoryInventory inv_;
  RecordingSink sink_;
  NegotiationEngine engine_;
};

TEST_F(Notices, ScheduledComesOnceWithTheLeadThenStartedBeforeTheEnd) {
  // Ends at kNow + 605: the deadline is coarse, the lead counted from the end.
  Reserve(kA, ReqStartingAt(2, kNow, 605), kNow);
  engine_.Tick(kNow + 484);
  EXPECT_EQ(Count(HZ_TOPIC_PREEMPTION, events::kPreemptionScheduled), 0u);
  engine_.Tick(kNow + 485);
  auto notices = sink_.Matching(HZ_TOPIC_PREEMPTION, events::kPreemptionScheduled);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].tenant, kA);
  EXPECT_EQ(notices[0].spec.deadline_s, kNow + 600);  // rounded down to 10 s
  EXPECT_EQ(notices[0].spec.flags, 0u);               // not approvable
  auto p = PayloadAs<events::PreemptionPayload>(notices[0].spec.payload.data());
  EXPECT_EQ(p.devices, 2u);  // exact: the tenant's own reservation
  EXPECT_EQ(p.device_index, events::kAllDevices);
  for (uint64_t t = kNow + 486; t < kNow + 605; t += 7) engine_.Tick(t);
  EXPECT_EQ(Count(HZ_TOPIC_PREEMPTION, events::kPreemptionScheduled), 1u);
  EXPECT_EQ(Count(HZ_TOPIC_PREEMPTION, events::kPreemptionStarted), 0u);

  engine_.Tick(kNow + 605);
  auto started = sink_.Matching(HZ_TOPIC_PREEMPTION, events::kPreemptionStarted);
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].spec.deadline_s, 0u);
  p = PayloadAs<events::PreemptionPayload>(started[0].spec.payload.data());
  EXPECT_EQ(p.devices, 2u);
  EXPECT_LT(PositionOf(HZ_TOPIC_PREEMPTION, events::kPreemptionStarted),
            PositionOf(HZ_TOPIC_CAPACITY, events::kCapacityReservationEnded));
  EXPECT_EQ(inv_.Attached(kA), 0u);
  engine_.Tick(kNow + 700);
  EXPECT_EQ(Count(HZ_TOPIC_PREEMPTION, events::kPreemptionScheduled), 1u);
  EXPECT_EQ(Count(HZ_TOPIC_PREEMPTION, events::kPreemptionStarted), 1u);
}

TEST_F(Notices, ALateTickStillGivesTheNoticeOnce) {
  Reserve(kA, ReqStartingAt(1, kNow, 600), kNow);
  engine_.Tick(kNow + 100);
  engine_.Tick(kNow + 595);  // the engine missed the notice's time
  ASSERT_EQ(Count(HZ_TOPIC_PREEMPTION, events::kPreemptionScheduled), 1u);
  engine_.Tick(kNow + 598);
  EXPECT_EQ(Count(HZ_TOPIC_PREEMPTION, events::kPreemptionScheduled), 1u);
}

TEST_F(Notices, AReservationShorterThanTheLeadIsNoticedAtItsStart) {
  // Starts at kNow + 600 for 60 s: no notice before it starts, one at once then.
  Decision d = Ask(kA, ReqStartingAt(1, kNow + 600, 60), kNow);
  ASSERT_FALSE(d.offers.empty());
  uint64_t id = 0;
  ASSERT_TRUE(engine_.Accept(kA, d.offers[0].offer_id, kNow, &id).ok());
  engine_.Tick(kNow + 599);
  EXPECT_EQ(Count(HZ_TOPIC_PREEMPTION, events::kPreemptionScheduled), 0u);
  engine_.Tick(kNow + 600);
  auto notices = sink_.Matching(HZ_TOPIC_PREEMPTION, events::kPreemptionScheduled);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_LT(PositionOf(HZ_TOPIC_CAPACITY, events::kCapacityReservationStarted),
            PositionOf(HZ_TOPIC_PREEMPTION, events::kPreemptionScheduled));
  EXPECT_EQ(notices[0].spec.deadline_s, kNow + 660);
  auto p = PayloadAs<events::PreemptionPayload>(notices[0].spec.payload.data());
  EXPECT_EQ(p.devices, 1u);
  EXPECT_EQ(p.device_index, 0u);  // its one device, by its tenant-visible index
}

TEST_F(Notices, AcceptedWithLessThanTheLeadLeftIsNoticedAtOnce) {
  Reserve(kA, ReqStartingAt(1, kNow, 90), kNow);
  EXPECT_EQ(Count(HZ_TOPIC_PREEMPTION, events::kPreemptionScheduled), 1u);
}

TEST_F(Notices, AReservationStartedAtItsEndGetsStartedAlone) {
  Decision d = Ask(kA, ReqStartingAt(1, kNow, 1), kNow);
  ASSERT_FALSE(d.offers.empty());
  uint64_t id = 0;
  ASSERT_TRUE(engine_.Accept(kA, d.offers[0].offer_id, kNow + 5, &id).ok());
  EXPECT_EQ(Count(HZ_TOPIC_PREEMPTION, events::kPreemptionScheduled), 0u);
  EXPECT_EQ(Count(HZ_TOPIC_PREEMPTION, events::kPreemptionStarted), 1u);
}

TEST_F(Notices, AReservationReleasedBeforeItsNoticeGetsNone) {
  uint64_t id = Reserve(kA, ReqStartingAt(2, kNow, 600), kNow);
  ASSERT_TRUE(engine_.Release(kA, id, 0, kNow + 100).ok());
  for (uint64_t t = kNow + 100; t <= kNow + 700; t += 10) engine_.Tick(t);
  for (uint16_t kind :
       {events::kPreemptionScheduled, events::kPreemptionStarted, events::kPreemptionCancelled}) {
    EXPECT_EQ(Count(HZ_TOPIC_PREEMPTION, kind), 0u) << kind;
  }
}

TEST_F(Notices, GivingEverythingBackAfterTheNoticeCancelsIt) {
  uint64_t id = Reserve(kA, ReqStartingAt(2, kNow, 600), kNow);
  engine_.Tick(kNow + 500);
  ASSERT_EQ(Count(HZ_TOPIC_PREEMPTION, events::kPreemptionScheduled), 1u);
  ASSERT_TRUE(engine_.Release(kA, id, 1, kNow + 510).ok());  // one is still to be taken
  EXPECT_EQ(Count(HZ_TOPIC_PREEMPTION, events::kPreemptionCancelled), 0u);
  ASSERT_TRUE(engine_.Release(kA, id, 0, kNow + 520).ok());
  auto cancelled = sink_.Matching(HZ_TOPIC_PREEMPTION, events::kPreemptionCancelled);
  ASSERT_EQ(cancelled.size(), 1u);
  EXPECT_EQ(cancelled[0].spec.deadline_s, 0u);
  auto p = PayloadAs<events::PreemptionPayload>(cancelled[0].spec.payload.data());
  EXPECT_EQ(p.devices, 2u);  // as the notice said
  EXPECT_LT(PositionOf(HZ_TOPIC_CAPACITY, events::kCapacityReservationReleased),
            PositionOf(HZ_TOPIC_PREEMPTION, events::kPreemptionCancelled));
  engine_.Tick(kNow + 700);
  EXPECT_EQ(Count(HZ_TOPIC_PREEMPTION, events::kPreemptionStarted), 0u);
}

TEST_F(Notices, ARevocationAfterTheNoticeStartsThePreemptionAndOneBeforeItGivesNone) {
  uint64_t early = Reserve(kA, ReqStartingAt(1, kNow, 600), kNow);
  ASSERT_TRUE(engine_.Revoke(early, events::kRevokeOperator, kNow + 10).ok());
  EXPECT_TRUE(sink_.Matching(HZ_TOPIC_PREEMPTION, events::kPreemptionStarted).empty());

  uint64_t late = Reserve(kB, ReqStartingAt(1, kNow + 60, 600), kNow + 60);
  engine_.Tick(kNow + 560);
  ASSERT_EQ(Count(HZ_TOPIC_PREEMPTION, events::kPreemptionScheduled), 1u);
  ASSERT_TRUE(engine_.Revoke(late, events::kRevokeOperator, kNow + 570).ok());
  auto started = sink_.Matching(HZ_TOPIC_PREEMPTION, events::kPreemptionStarted);
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0].tenant, kB);
  EXPECT_LT(PositionOf(HZ_TOPIC_PREEMPTION, events::kPreemptionStarted, kB),
            PositionOf(HZ_TOPIC_NEGOTIATION, events::kNegotiationReservationRevoked, kB));
  engine_.Tick(kNow + 700);
  EXPECT_EQ(Count(HZ_TOPIC_PREEMPTION, events::kPreemptionStarted), 1u);
}

TEST_F(Notices, AvailableGoesOnlyToTenantsWaitingForTheKindBucketed) {
  uint64_t all = Reserve(kA, ReqStartingAt(4, kNow, 3600), kNow);  // every GPU
  Decision waiting = Ask(kB, ReqStartingAt(1, kNow, 60), kNow + 1);
  EXPECT_TRUE(waiting.offers.empty());
  Decision nic = Ask(kC, ReqStartingAt(1, kNow + 1, 60, HZ_DEV_NIC), kNow + 1);  // holds an offer
  EXPECT_FALSE(nic.offers.empty());
  engine_.Tick(kNow + 2);
  EXPECT_TRUE(Available().empty()) << "nothing was freed yet";

  ASSERT_TRUE(engine_.Release(kA, all, 3, kNow + 3).ok());
  engine_.Tick(kNow + 4);
  auto available = Available();
  ASSERT_EQ(available.size(), 1u);
  EXPECT_EQ(available[0].tenant, kB);
  auto p = PayloadAs<events::CapacityPayload>(available[0].spec.payload.data());
  EXPECT_EQ(p.count, 2u);  // 3 free: the bucket 2-3
  EXPECT_EQ(p.device_kind, HZ_DEV_GPU);
  EXPECT_EQ(p.reservation_id, 0u);
  EXPECT_EQ(p.devices_now, 0u);
}

TEST_F(Notices, AvailableIsRateLimitedPerTenantAndKindAndSentOnlyOnABucketChange) {
  uint64_t all = Reserve(kA, ReqStartingAt(4, kNow, 3600), kNow);
  Ask(kB, ReqStartingAt(1, kNow, 60), kNow + 1);
  engine_.Tick(kNow + 2);
  ASSERT_TRUE(engine_.Release(kA, all, 2, kNow + 3).ok());  // 2 free
  engine_.Tick(kNow + 4);
  ASSERT_EQ(Available().size(), 1u);
  ASSERT_TRUE(engine_.Release(kA, all, 1, kNow + 5).ok());  // 3 free: the same bucket
  engine_.Tick(kNow + 6);
  engine_.Tick(kNow + 100);
  EXPECT_EQ(Available().size(), 1u);
  ASSERT_TRUE(engine_.Release(kA, all, 1, kNow + 110).ok());  // 4 free: a new bucket...
  engine_.Tick(kNow + 111);
  EXPECT_EQ(Available().size(), 2u) << "60 s passed since the last one";

  // A change inside the 60 s is held back and told once they are over.
  engine_.Tick(kNow + 112);
  Reserve(kD, ReqStartingAt(4, kNow + 120, 3600), kNow + 120);  // 0 free
  engine_.Tick(kNow + 121);
  inv_.SetCapacityFrom(0, 0, 6);  // two more GPUs: 2 free
  engine_.Tick(kNow + 130);
  EXPECT_EQ(Available().size(), 2u);
  engine_.Tick(kNow + 170);
  EXPECT_EQ(Available().size(), 2u);
  engine_.Tick(kNow + 171);
  auto available = Available();
  ASSERT_EQ(available.size(), 3u);
  EXPECT_EQ(PayloadAs<events::CapacityPayload>(available[2].spec.payload.data()).count, 2u);
  engine_.Tick(kNow + 300);
  EXPECT_EQ(Available().size(), 3u);
}

TEST_F(Notices, AHeldBackChangeIsNotToldToATenantThatStoppedWaiting) {
  uint64_t all = Reserve(kA, ReqStartingAt(4, kNow, 3600), kNow);
  Decision waiting = Ask(kB, ReqStartingAt(1, kNow, 60), kNow + 1);
  engine_.Tick(kNow + 2);
  ASSERT_TRUE(engine_.Release(kA, all, 1, kNow + 3).ok());
  engine_.Tick(kNow + 4);
  ASSERT_EQ(Available().size(), 1u);
  ASSERT_TRUE(engine_.Release(kA, all, 2, kNow + 5).ok());  // held back
  engine_.Tick(kNow + 6);
  ASSERT_TRUE(engine_.Decline(kB, waiting.result.negotiation_id, kNow + 7).ok());
  engine_.Tick(kNow + 100);
  EXPECT_EQ(Available().size(), 1u);
}

TEST_F(Notices, DevicesThatComeBackAreAvailableToo) {
  inv_.SetCapacityFrom(0, 0, 0);  // every GPU failed or allocated otherwise
  Ask(kB, ReqStartingAt(1, kNow, 60), kNow);
  engine_.Tick(kNow + 1);
  inv_.SetCapacityFrom(0, 0, 1);  // one repaired, or released by its allocation
  engine_.Tick(kNow + 2);
  auto available = Available();
  ASSERT_EQ(available.size(), 1u);
  EXPECT_EQ(PayloadAs<events::CapacityPayload>(available[0].spec.payload.data()).count, 1u);
}

TEST_F(Notices, ForgettingATenantForgetsWhatItWasTold) {
  inv_.SetCapacityFrom(0, 0, 0);
  Ask(kB, ReqStartingAt(1, kNow, 60), kNow);
  engine_.Tick(kNow + 1);
  inv_.SetCapacityFrom(0, 0, 2);
  engine_.Tick(kNow + 2);
  ASSERT_EQ(Available().size(), 1u);
  engine_.ForgetTenant(kB, kNow + 3);
  // A tenant created again under the name is told at once, not 60 s later.
  Ask(kB, ReqStartingAt(1, kNow + 4, 60), kNow + 4);
  inv_.SetCapacityFrom(0, 0, 0);
  engine_.Tick(kNow + 5);
  inv_.SetCapacityFrom(0, 0, 4);
  engine_.Tick(kNow + 6);
  EXPECT_EQ(Available().size(), 2u);
}

TEST(AvailabilityLimiter, TellsTheFirstBucketThenOnlyChangesAtMostOncePerInterval) {
  AvailabilityLimiter l(60);
  EXPECT_TRUE(l.Update(kA, HZ_DEV_GPU, 2, 1000));
  EXPECT_FALSE(l.Update(kA, HZ_DEV_GPU, 2, 2000)) << "the same bucket";
  EXPECT_FALSE(l.Owed(kA, HZ_DEV_GPU));
  EXPECT_TRUE(l.Update(kA, HZ_DEV_GPU, 4, 2000));
  EXPECT_FALSE(l.Update(kA, HZ_DEV_GPU, 8, 2059));
  EXPECT_TRUE(l.Owed(kA, HZ_DEV_GPU));
  EXPECT_TRUE(l.Update(kB, HZ_DEV_GPU, 8, 2059)) << "another tenant";
  EXPECT_TRUE(l.Update(kA, HZ_DEV_NIC, 8, 2059)) << "another kind";
  EXPECT_TRUE(l.Update(kA, HZ_DEV_GPU, 8, 2060));
  EXPECT_FALSE(l.Owed(kA, HZ_DEV_GPU));
  // Back to the bucket told last: nothing is owed any more.
  EXPECT_FALSE(l.Update(kA, HZ_DEV_GPU, 1, 2070));
  EXPECT_TRUE(l.Owed(kA, HZ_DEV_GPU));
  EXPECT_FALSE(l.Update(kA, HZ_DEV_GPU, 8, 2080));
  EXPECT_FALSE(l.Owed(kA, HZ_DEV_GPU));
  // A clock that went back counts as no time passed.
  EXPECT_FALSE(l.Update(kA, HZ_DEV_GPU, 2, 100));
}

TEST(AvailabilityLimiter, DropsWhatIsOwedToThoseNoLongerWaitingAndForgetsTenants) {
  AvailabilityLimiter l(60);
  ASSERT_TRUE(l.Update(kA, HZ_DEV_GPU, 1, 0));
  ASSERT_TRUE(l.Update(kB, HZ_DEV_GPU, 1, 0));
  EXPECT_FALSE(l.Update(kA, HZ_DEV_GPU, 2, 10));
  EXPECT_FALSE(l.Update(kB, HZ_DEV_GPU, 2, 10));
  l.KeepOwedIf([](const TenantId& t, hz_device_kind) { return t == kB; });
  EXPECT_FALSE(l.Owed(kA, HZ_DEV_GPU));
  EXPECT_TRUE(l.Owed(kB, HZ_DEV_GPU));
  l.Forget(kB);
  EXPECT_FALSE(l.Owed(kB, HZ_DEV_GPU));
  EXPECT_TRUE(l.Update(kB, HZ_DEV_GPU, 2, 11)) << "told as if for the first time";
}

}  // namespace
}  // namespace hz::negotiation
