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

TEST(NoticeBus, SimulatedTimeCountsFromTheSecondItFallsIn) {
  EXPECT_EQ(SimSeconds(10.0), 10u);
  EXPECT_EQ(SimSeconds(10.2), 11u);
}

}  // namespace
}  // namespace hz::experiment
