// The scheduler and the negotiation engine, joined by the service
// (scheduler_resources.h): the engine books and attaches reservations through
// SchedulerResources, and a device failure becomes a replacement offer.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include "hz/negotiation/negotiation.h"
#include "hz/scheduler/scheduler.h"
#include "hz/service/scheduler_resources.h"
#include "test_util.h"

namespace hz::service {
namespace {

namespace ev = hz::events;
namespace sc = hz::scheduler;
using sc::testing::RecordingSink;
using sc::testing::TempDir;

class NoVm : public sc::DomainAttacher {
 public:
  Status Attach(const std::string&, const std::string&) override { return Status::Ok(); }
  Status Detach(const std::string&, const std::string&) override { return Status::Ok(); }
};

class ServiceReplacement : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(sc::Scheduler::Open(sc::testing::FixtureSchedulerOptions("hgx8", dir_.path()), &vm_,
                                    &sink_, &sched_)
                    .ok());
    resources_ = std::make_unique<SchedulerResources>(sched_.get());
    engine_ = std::make_unique<negotiation::NegotiationEngine>(negotiation::NegotiationOptions{},
                                                               resources_.get(), &sink_);
  }
  TempDir dir_;
  NoVm vm_;
  RecordingSink sink_;
  std::unique_ptr<sc::Scheduler> sched_;
  std::unique_ptr<SchedulerResources> resources_;
  std::unique_ptr<negotiation::NegotiationEngine> engine_;
};

TEST_F(ServiceReplacement, PoolsAndCapacityAreTheSchedulersReservableDevices) {
  std::vector<negotiation::Pool> pools = resources_->Pools();
  ASSERT_EQ(pools.size(), 6u);  // 2 GPU islands and 4 NIC switches
  uint32_t gpus = 0;
  for (const negotiation::Pool& p : pools) {
    if (p.kind == HZ_DEV_GPU) gpus += resources_->Capacity(p.id, 0);
  }
  EXPECT_EQ(gpus, 8u);
  std::vector<negotiation::PoolCount> detached;
  EXPECT_EQ(resources_->Detach(TenantId("acme"), 77, 1, &detached).code(), StatusCode::kState);
}

TEST_F(ServiceReplacement, FailureOpensAReplacementOffer) {
  ASSERT_TRUE(sched_->BindTenant(TenantId("acme"), "vm-acme").ok());
  uint64_t id = 0;
  ASSERT_TRUE(sched_->Allocate(TenantId("acme"), {2, 0, HZ_LOC_SAME_GROUP}, &id).ok());
  std::string victim;
  for (const auto& a : sched_->Allocations()) victim = a["devices"][0].get<std::string>();
  const uint64_t now = 1'700'000'000;
  StatusOr<sc::DeviceLoss> loss = sched_->MarkFailed(victim, 1);
  ASSERT_TRUE(loss.ok());
  ASSERT_TRUE(loss->replaceable);
  uint64_t negotiation = 0;
  ASSERT_TRUE(
      engine_->OfferReplacement(loss->tenant, ReplacementRequest(*loss, now), now, &negotiation)
          .ok());
  std::vector<negotiation::Decision> decisions = engine_->Decide(now);
  ASSERT_EQ(decisions.size(), 1u);
  EXPECT_EQ(decisions[0].tenant, TenantId("acme"));
  EXPECT_EQ(decisions[0].result.negotiation_id, negotiation);
  EXPECT_TRUE(decisions[0].provider_initiated);
  ASSERT_FALSE(decisions[0].offers.empty());
  EXPECT_EQ(decisions[0].offers[0].count, 1);
  // The engine tells the tenant about the offer.
  bool offer_event = false;
  for (const auto& e : sink_.events) {
    offer_event |= e.tenant == TenantId("acme") && e.spec.topic == HZ_TOPIC_NEGOTIATION &&
                   e.spec.kind == ev::kNegotiationOfferMade;
  }
  EXPECT_TRUE(offer_event);
  // Accepting it attaches a healthy replacement when the reservation starts.
  uint64_t reservation = 0;
  ASSERT_TRUE(
      engine_->Accept(TenantId("acme"), decisions[0].offers[0].offer_id, now, &reservation).ok());
  engine_->Tick(decisions[0].offers[0].start_s);
  EXPECT_EQ(sched_->DevicesHeld(TenantId("acme"), HZ_DEV_GPU), 2u);
  for (const auto& d : sched_->Inventory()) {
    if (d["bdf"] == victim) {
      EXPECT_EQ(d["state"], "failed");
    }
  }
}

TEST_F(ServiceReplacement, ReplacementRequestAsksForOneDeviceAsSoonAsPossible) {
  sc::DeviceLoss loss;
  loss.tenant = TenantId("acme");
  loss.kind = sc::DeviceKind::kNic;
  loss.locality = HZ_LOC_SAME_HOST;
  hz_neg_request r = ReplacementRequest(loss, 1000, 60);
  EXPECT_EQ(r.kind, HZ_DEV_NIC);
  EXPECT_EQ(r.count, 1u);
  EXPECT_EQ(r.locality, HZ_LOC_SAME_HOST);
  EXPECT_EQ(r.earliest_start_s, 1000u);
  EXPECT_EQ(r.latest_start_s, 1000u + ev::kTimeGranularityS);
  EXPECT_EQ(r.duration_s, 60u);
}

}  // namespace
}  // namespace hz::service
