// The negotiation engine in the emulator's loop (src/replacements.h): the
// provider's replacement offer at a notice, held from the queue, accepted by
// the tenant, started and moved onto; refused without capacity; lapsing on
// simulated time.
#include "replacements.h"

#include <gtest/gtest.h>

#include "hz/scheduler/allocator.h"
#include "hz/scheduler/synthetic_cluster.h"

namespace hz::experiment {
namespace {

using scheduler::Allocation;
using scheduler::DeviceKind;
using scheduler::DeviceRef;

class ReplacementsTest : public ::testing::Test {
 protected:
  void SetUp() override { replacements_ = Make(1); }

  std::unique_ptr<Replacements> Make(uint64_t seed) {
    return std::make_unique<Replacements>(
        alloc_,
        [this](const std::vector<DeviceRef>& devices) {
          Allocation a;
          const scheduler::Request r{static_cast<uint32_t>(devices.size()), 0, HZ_LOC_SAME_HOST};
          return alloc_.AllocateDevices("reserved", r, devices, &a).ok() ? a.id : 0;
        },
        [this](uint64_t id) { alloc_.Release(id); }, nullptr, seed);
  }

  // A job's run of `gpus` on `host`, and the notice's drain of that host.
  uint64_t RunOn(uint32_t host, uint32_t gpus) {
    std::vector<DeviceRef> devices;
    for (uint32_t i = 0; devices.size() < gpus; ++i) {
      if (cluster_.host(host).devices[i].kind == DeviceKind::kGpu) devices.push_back({host, i});
    }
    Allocation a;
    EXPECT_TRUE(alloc_.AllocateDevices("run", {gpus, 0, HZ_LOC_SAME_HOST}, devices, &a).ok());
    return a.id;
  }
  void Drain(uint32_t host) {
    for (uint32_t i = 0; i < cluster_.host(host).devices.size(); ++i) {
      ASSERT_TRUE(alloc_.SetFailed({host, i}, true).ok());
    }
  }
  uint32_t FreeGpus() const { return alloc_.TotalFree(DeviceKind::kGpu); }

  scheduler::Cluster cluster_ = scheduler::UniformCluster(2, 8);
  scheduler::Allocator alloc_{&cluster_};
  std::unique_ptr<Replacements> replacements_;
};

TEST_F(ReplacementsTest, ANoticedJobIsOfferedHeldDevicesAndMovesOntoItsReservation) {
  RunOn(0, 4);
  Drain(0);
  ASSERT_EQ(FreeGpus(), 8u);
  const Replacements::Offered o = replacements_->Offer(0, 4, 101, 1001);
  ASSERT_NE(o.offer, 0u);
  EXPECT_GT(o.expires, 101);
  // Held from the offer on: a queued job of the whole host no longer fits.
  EXPECT_EQ(FreeGpus(), 4u);
  std::vector<DeviceRef> placed;
  EXPECT_FALSE(alloc_.Place({8, 0, HZ_LOC_SAME_HOST}, &placed));

  const Replacements::Accepted a = replacements_->Accept(0, o.offer, 101.5);
  ASSERT_NE(a.reservation, 0u);
  // The offer starts at the notice rounded up to 10 s: nothing to move to before.
  EXPECT_EQ(a.start, 110);
  EXPECT_EQ(replacements_->Ready(a.reservation), 0u);
  replacements_->Tick(a.start);
  const uint64_t id = replacements_->Ready(a.reservation);
  ASSERT_NE(id, 0u);
  const Allocation* held = alloc_.Find(id);
  ASSERT_NE(held, nullptr);
  for (DeviceRef d : held->devices) EXPECT_EQ(d.host, 1u);

  replacements_->Consume(0, a.reservation, 120);
  // The devices stay allocated, now as the job's, and no longer count as
  // the engine's to offer.
  EXPECT_NE(alloc_.Find(id), nullptr);
  EXPECT_EQ(FreeGpus(), 4u);
  uint32_t capacity = 0;
  for (uint32_t pool : cluster_.host_pools(1)) {
    if (cluster_.pools()[pool].kind == DeviceKind::kGpu)
      capacity += replacements_->Capacity(pool, 0);
  }
  EXPECT_EQ(capacity, 4u);
  EXPECT_TRUE(replacements_->TakeLost().empty());
  const ReplacementCounts& c = replacements_->counts();
  EXPECT_EQ(c.offers_made, 1u);
  EXPECT_EQ(c.offers_accepted, 1u);
  EXPECT_EQ(c.honoured, 1u);
}

TEST_F(ReplacementsTest, WithoutCapacityThereIsNoOffer) {
  RunOn(0, 4);
  Drain(0);
  RunOn(1, 6);
  const Replacements::Offered o = replacements_->Offer(0, 4, 100, 1000);
  EXPECT_EQ(o.offer, 0u);
  EXPECT_EQ(replacements_->counts().offers_made, 0u);
  EXPECT_EQ(FreeGpus(), 2u);  // nothing held
}

TEST_F(ReplacementsTest, AnOfferNobodyAcceptsLapsesOnSimulatedTime) {
  RunOn(0, 4);
  Drain(0);
  const Replacements::Offered o = replacements_->Offer(0, 4, 100, 4000);
  ASSERT_NE(o.offer, 0u);
  replacements_->Tick(o.expires - 1);
  EXPECT_EQ(FreeGpus(), 4u);
  replacements_->Tick(o.expires);
  EXPECT_EQ(FreeGpus(), 8u);  // the hold went with the offer
  EXPECT_EQ(replacements_->Accept(0, o.offer, o.expires).reservation, 0u);
  EXPECT_EQ(replacements_->counts().offers_accepted, 0u);
}

TEST_F(ReplacementsTest, AReservationWhoseDevicesFailIsTakenBack) {
  RunOn(0, 4);
  Drain(0);
  RunOn(1, 4);
  const Replacements::Offered o = replacements_->Offer(0, 4, 100, 1000);
  ASSERT_NE(o.offer, 0u);
  const Replacements::Accepted a = replacements_->Accept(0, o.offer, 100);
  ASSERT_NE(a.reservation, 0u);
  Drain(1);
  replacements_->Tick(200);
  EXPECT_EQ(replacements_->Ready(a.reservation), 0u);
  EXPECT_EQ(replacements_->TakeLost(), std::vector<uint64_t>{a.reservation});
}

TEST_F(ReplacementsTest, TheSameSeedGivesTheSameIdentifiers) {
  RunOn(0, 2);
  Drain(0);
  const Replacements::Offered a = replacements_->Offer(0, 2, 100, 1000);
  const Replacements::Offered b = Make(1)->Offer(0, 2, 100, 1000);
  ASSERT_NE(a.offer, 0u);
  EXPECT_EQ(a.offer, b.offer);
  EXPECT_EQ(a.expires, b.expires);
}

}  // namespace
}  // namespace hz::experiment
