// A negotiated reservation's devices leaving a VM whose guest takes its
// time: the engine, which runs under the provider's lock, never waits for
// the guest (SchedulerResources lets the devices leave on a thread of its
// own), the devices are the tenant's no longer and nobody else's yet, and a
// reservation that needs them starts once they left.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <set>
#include <string>

#include "hz/negotiation/negotiation.h"
#include "hz/scheduler/scheduler.h"
#include "hz/service/scheduler_resources.h"
#include "slow_guest_attacher.h"
#include "test_util.h"

namespace hz::service {
namespace {

namespace neg = hz::negotiation;
namespace sc = hz::scheduler;
using sc::testing::kBound;
using sc::testing::LetGoAtEnd;
using sc::testing::RecordingSink;
using sc::testing::SlowGuestAttacher;
using sc::testing::TempDir;

constexpr uint64_t kNow = 1'700'000'000;

class ReservationDetach : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(sc::Scheduler::Open(sc::testing::FixtureSchedulerOptions("hgx8", dir_.path()), &vm_,
                                    &sink_, &sched_)
                    .ok());
    ASSERT_TRUE(sched_->BindTenant(TenantId("slow"), SlowGuestAttacher::kSlowVm).ok());
    ASSERT_TRUE(sched_->BindTenant(TenantId("quick"), "vm-quick").ok());
    resources_ = std::make_unique<SchedulerResources>(sched_.get());
    neg::NegotiationOptions no;
    no.window_s = 10;
    engine_ = std::make_unique<neg::NegotiationEngine>(no, resources_.get(), &sink_);
  }
  void TearDown() override {
    vm_.LetGo(Status::TimedOut("the test ended"));
    if (resources_ != nullptr) resources_->WaitForDetaches();
  }

  // Negotiates `gpus` GPUs on one host for the tenant from `now` on, accepts
  // the first offer and lets the engine start it; returns the reservation.
  uint64_t Reserve(const std::string& tenant, uint32_t gpus, uint64_t now) {
    hz_neg_request r{};
    r.kind = HZ_DEV_GPU;
    r.count = gpus;
    r.locality = HZ_LOC_SAME_HOST;
    r.earliest_start_s = now;
    r.latest_start_s = now + 60;
    r.duration_s = 600;
    uint64_t negotiation = 0;
    EXPECT_TRUE(engine_->Submit(TenantId(tenant), r, now, &negotiation).ok());
    std::vector<neg::Decision> decisions = engine_->Decide(now);
    EXPECT_EQ(decisions.size(), 1u);
    if (decisions.empty() || decisions[0].offers.empty()) return 0;
    const hz_neg_offer& offer = decisions[0].offers[0];
    uint64_t reservation = 0;
    EXPECT_TRUE(engine_->Accept(TenantId(tenant), offer.offer_id, now, &reservation).ok());
    engine_->Tick(offer.start_s);
    return reservation;
  }
  uint32_t Gpus(const std::string& tenant) {
    return sched_->DevicesHeld(TenantId(tenant), HZ_DEV_GPU);
  }
  // The devices leaving a VM, as the operator sees them.
  std::set<std::string> Releasing() {
    std::set<std::string> out;
    for (const auto& a : sched_->Allocations()) {
      for (const auto& bdf : a.value("releasing", nlohmann::json::array())) out.insert(bdf);
    }
    return out;
  }
  std::set<std::string> DevicesOf(const std::string& tenant) {
    std::set<std::string> out;
    for (const auto& d : sched_->Inventory()) {
      if (d.value("tenant", std::string()) == tenant) out.insert(d["bdf"]);
    }
    return out;
  }

  TempDir dir_;
  SlowGuestAttacher vm_;
  RecordingSink sink_;
  std::unique_ptr<sc::Scheduler> sched_;
  std::unique_ptr<SchedulerResources> resources_;
  std::unique_ptr<neg::NegotiationEngine> engine_;
};

TEST_F(ReservationDetach, AReleaseAnswersBeforeTheGuestLetsGoAndTheDevicesGoNextToWhoWaits) {
  const uint64_t slow = Reserve("slow", 8, kNow);
  ASSERT_NE(slow, 0u);
  ASSERT_EQ(Gpus("slow"), 8u);

  // The engine's caller holds the provider's lock: the release must not wait.
  auto released = std::async(std::launch::async,
                             [&] { return engine_->Release(TenantId("slow"), slow, 2, kNow); });
  LetGoAtEnd let_go(&vm_);
  ASSERT_EQ(released.wait_for(kBound), std::future_status::ready) << "the release waited";
  ASSERT_TRUE(released.get().ok());
  ASSERT_TRUE(vm_.WaitForSlowDetach());
  EXPECT_EQ(Gpus("slow"), 6u);
  const std::set<std::string> leaving = Releasing();
  EXPECT_EQ(leaving.size(), 2u);

  // Another tenant is offered the capacity at once; its start waits for
  // the devices to leave instead of failing.
  const uint64_t quick = Reserve("quick", 2, kNow);
  ASSERT_NE(quick, 0u);
  EXPECT_EQ(Gpus("quick"), 0u);
  vm_.LetGo(Status::Ok());
  resources_->WaitForDetaches();
  EXPECT_TRUE(Releasing().empty());
  engine_->Tick(kNow + 10);
  EXPECT_EQ(Gpus("quick"), 2u);
  EXPECT_EQ(DevicesOf("quick"), leaving);  // the only free ones, once they left
  EXPECT_EQ(Gpus("slow"), 6u);
}

TEST_F(ReservationDetach, DevicesTheGuestKeepsAreNobodysToReserve) {
  const uint64_t slow = Reserve("slow", 8, kNow);
  ASSERT_NE(slow, 0u);
  ASSERT_TRUE(engine_->Release(TenantId("slow"), slow, 2, kNow).ok());
  ASSERT_TRUE(vm_.WaitForSlowDetach());
  const uint64_t quick = Reserve("quick", 2, kNow);
  ASSERT_NE(quick, 0u);

  // The guest never lets go: the devices stay, in an allocation of their
  // own that says why, out of the reservations' capacity.
  vm_.LetGo(Status::TimedOut("the guest has not released it"));
  resources_->WaitForDetaches();
  uint32_t kept = 0;
  for (const auto& a : sched_->Allocations()) {
    if (!a.contains("detach_error")) continue;
    EXPECT_EQ(a["tenant"], "slow");
    EXPECT_FALSE(a.contains("reservation")) << a.dump();
    kept += a["devices"].size();
  }
  EXPECT_EQ(kept, 2u);
  uint32_t reservable = 0;
  for (const neg::Pool& p : resources_->Pools()) {
    if (p.kind == HZ_DEV_GPU) reservable += resources_->Capacity(p.id, 0);
  }
  EXPECT_EQ(reservable, 6u);
  // So the reservation that counted on them cannot start, and says so.
  engine_->Tick(kNow + 10);
  EXPECT_EQ(Gpus("quick"), 0u);
  bool revoked = false;
  for (const auto& e : sink_.events) {
    revoked |= e.tenant == TenantId("quick") && e.spec.topic == HZ_TOPIC_NEGOTIATION &&
               e.spec.kind == hz::events::kNegotiationReservationRevoked;
  }
  EXPECT_TRUE(revoked);
}

// The service stops while a guest takes its time: the stop does not wait
// for it (up to detach_wait for each detach under way); the devices stay
// with the VM, recorded, as when a guest does not let go.
TEST_F(ReservationDetach, AStopDoesNotWaitForAGuestThatHasNotLetGo) {
  const uint64_t slow = Reserve("slow", 8, kNow);
  ASSERT_NE(slow, 0u);
  ASSERT_TRUE(engine_->Release(TenantId("slow"), slow, 2, kNow).ok());
  ASSERT_TRUE(vm_.WaitForSlowDetach());
  LetGoAtEnd let_go(&vm_);

  engine_.reset();
  resources_.reset();  // as the service stops
  // Each of the two devices' detaches ended at the stop, not by the guest.
  EXPECT_EQ(vm_.stopped_detaches(), 2) << "the stop waited for the guest";
  uint32_t kept = 0;
  for (const auto& a : sched_->Allocations()) {
    if (!a.contains("detach_error")) continue;
    EXPECT_EQ(a["tenant"], "slow");
    kept += a["devices"].size();
  }
  EXPECT_EQ(kept, 2u);
}

}  // namespace
}  // namespace hz::service
