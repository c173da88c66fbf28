// The event bus in the emulator's loop (src/notice_bus.h): what a tenant
// reads is what harmonaized's bus stored for it, on simulated time.
#include "notice_bus.h"

#include <gtest/gtest.h>

#include "hz/events/event_spec.h"

namespace hz::experiment {
namespace {

TEST(NoticeBus, ATenantReadsItsOwnNoticesOnceWithTheDeadlineRoundedDown) {
  uint64_t now = 100;
  std::unique_ptr<NoticeBus> bus;
  ASSERT_TRUE(NoticeBus::Open([&now] { return now; }, &bus).ok());
  const events::EventSpec notice = events::MakeMaintenance(
      events::kMaintenanceScheduled, 1234, 7200, events::kAllDevices, /*approvable=*/false);
  ASSERT_TRUE(bus->Publish(TenantOf(3), notice, nullptr).ok());
  now = 125;
  const std::vector<hz_event> read = bus->Read(TenantOf(3));
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].topic, HZ_TOPIC_MAINTENANCE);
  EXPECT_EQ(read[0].kind, events::kMaintenanceScheduled);
  EXPECT_EQ(read[0].deadline_s, 1230u);
  EXPECT_EQ(read[0].time_s, 100u);  // published then, on simulated time
  EXPECT_TRUE(bus->Read(TenantOf(3)).empty());
  EXPECT_TRUE(bus->Read(TenantOf(4)).empty());
}

TEST(NoticeBus, AnApprovalReachesTheProviderBeforeItReturnsAndOnlyBeforeTheDeadline) {
  uint64_t now = 100;
  std::unique_ptr<NoticeBus> bus;
  ASSERT_TRUE(NoticeBus::Open([&now] { return now; }, &bus).ok());
  std::vector<std::pair<std::string, uint64_t>> approved;
  bus->SetApprovalCallback([&approved](const TenantId& tenant, const hz_event& ev) {
    approved.push_back({tenant.name(), ev.seq});
  });
  const events::EventSpec notice = events::MakeMaintenance(
      events::kMaintenanceScheduled, 200, 7200, events::kAllDevices, /*approvable=*/true);
  uint64_t first = 0, second = 0;
  ASSERT_TRUE(bus->Publish(TenantOf(1), notice, &first).ok());
  ASSERT_TRUE(bus->Publish(TenantOf(2), notice, &second).ok());
  // Only what the tenant has read can be approved.
  EXPECT_FALSE(bus->Approve(TenantOf(1), first).ok());
  ASSERT_EQ(bus->Read(TenantOf(1)).size(), 1u);
  ASSERT_TRUE(bus->Approve(TenantOf(1), first).ok());
  ASSERT_EQ(approved.size(), 1u);
  EXPECT_EQ(approved[0], std::make_pair(TenantOf(1).name(), first));
  // The other tenant answers after the deadline: refused, nobody told.
  ASSERT_EQ(bus->Read(TenantOf(2)).size(), 1u);
  now = 200;
  EXPECT_EQ(bus->Approve(TenantOf(2), second).code(), StatusCode::kState);
  EXPECT_EQ(approved.size(), 1u);
}

TEST(NoticeBus, AForgottenTenantLeavesNothingForTheNextOfItsName) {
  std::unique_ptr<NoticeBus> bus;
  ASSERT_TRUE(NoticeBus::Open([] { return uint64_t{100}; }, &bus).ok());
  const events::EventSpec notice = events::MakeMaintenance(
      events::kMaintenanceScheduled, 1234, 7200, events::kAllDevices, /*approvable=*/false);
  ASSERT_TRUE(bus->Publish(TenantOf(5), notice, nullptr).ok());
  bus->Forget(TenantOf(5));
  EXPECT_TRUE(bus->Read(TenantOf(5)).empty());
  bus->Forget(TenantOf(6));  // never told anything: nothing to do
  uint64_t seq = 0;
  ASSERT_TRUE(bus->Publish(TenantOf(5), notice, &seq).ok());
  EXPECT_EQ(seq, 1u);  // a new log
}

TEST(NoticeBus, SimulatedTimeCountsFromTheSecondItFallsIn) {
  EXPECT_EQ(SimSeconds(10.0), 10u);
  EXPECT_EQ(SimSeconds(10.2), 11u);
}

}  // namespace
}  // namespace hz::experiment
