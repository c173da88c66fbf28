#include "hz/events/coarse.h"

#include <gtest/gtest.h>

#include "hz/events/event_spec.h"
#include "test_util.h"

namespace hz::events {
namespace {

TEST(EventsCoarse, TimesRoundDownToTenSeconds) {
  EXPECT_EQ(RoundDownTime(0), 0u);
  EXPECT_EQ(RoundDownTime(9), 0u);
  EXPECT_EQ(RoundDownTime(10), 10u);
  EXPECT_EQ(RoundDownTime(1700000009), 1700000000u);
  EXPECT_EQ(RoundDownTime(UINT64_MAX), UINT64_MAX - UINT64_MAX % 10);
}

TEST(EventsCoarse, CongestionLevelsFollowUtilisationThresholds) {
  EXPECT_EQ(CongestionFromUtilisation(0, 100), kCongestionNone);
  EXPECT_EQ(CongestionFromUtilisation(49, 100), kCongestionNone);
  EXPECT_EQ(CongestionFromUtilisation(50, 100), kCongestionLight);
  EXPECT_EQ(CongestionFromUtilisation(79, 100), kCongestionLight);
  EXPECT_EQ(CongestionFromUtilisation(80, 100), kCongestionModerate);
  EXPECT_EQ(CongestionFromUtilisation(94, 100), kCongestionModerate);
  EXPECT_EQ(CongestionFromUtilisation(95, 100), kCongestionSevere);
  EXPECT_EQ(CongestionFromUtilisation(200, 100), kCongestionSevere);
  EXPECT_EQ(CongestionFromUtilisation(0, 0), kCongestionSevere);
  // No overflow with huge counters.
  EXPECT_EQ(CongestionFromUtilisation(UINT64_MAX / 4 * 3, UINT64_MAX), kCongestionLight);
  EXPECT_EQ(CongestionFromUtilisation(UINT64_MAX / 2, UINT64_MAX),
            kCongestionNone);  // just below 50 %
}

TEST(EventsCoarse, CapacityIsPowerOfTwoLowerBound) {
  const uint64_t cases[][2] = {{0, 0},
                               {1, 1},
                               {2, 2},
                               {3, 2},
                               {4, 4},
                               {7, 4},
                               {8, 8},
                               {15, 8},
                               {16, 16},
                               {1000, 512},
                               {UINT64_MAX, 1ull << 63}};
  for (const auto& c : cases) EXPECT_EQ(CapacityBucket(c[0]), c[1]) << c[0];
}

TEST(EventsCoarse, EnergyHasThreeLevels) {
  EXPECT_EQ(EnergyFromDraw(79, 100), kEnergyNormal);
  EXPECT_EQ(EnergyFromDraw(80, 100), kEnergyConstrained);
  EXPECT_EQ(EnergyFromDraw(94, 100), kEnergyConstrained);
  EXPECT_EQ(EnergyFromDraw(95, 100), kEnergyCritical);
  EXPECT_EQ(EnergyFromDraw(1, 0), kEnergyCritical);
}

TEST(EventsCoarse, BuildersApplyCoarseRules) {
  EventSpec m = MakeMaintenance(kMaintenanceScheduled, 1234567, 905, 3, true);
  EXPECT_EQ(m.deadline_s, 1234560u);
  EXPECT_EQ(m.flags, HZ_EVENT_F_APPROVABLE);
  auto mp = testing::PayloadAs<MaintenancePayload>(m.payload.data());
  EXPECT_EQ(mp.duration_s, 900u);
  EXPECT_EQ(mp.device_index, 3u);

  EventSpec c = MakeCapacityAvailable(HZ_DEV_GPU, 13);
  EXPECT_EQ(testing::PayloadAs<CapacityPayload>(c.payload.data()).count, 8u);

  EventSpec f = MakeFailure(kFailureDeviceFailed, 2, 5);
  auto fp = testing::PayloadAs<FailurePayload>(f.payload.data());
  EXPECT_EQ(fp.device_index, 2u);
  EXPECT_EQ(fp.errors, 4u);

  EventSpec p = MakePreemption(kPreemptionScheduled, 1000009, 6, 2, false);
  EXPECT_EQ(p.deadline_s, 1000000u);
  auto pp = testing::PayloadAs<PreemptionPayload>(p.payload.data());
  EXPECT_EQ(pp.devices, 6u);  // the tenant's own devices are exact
  EXPECT_EQ(pp.device_index, kAllDevices);
  pp = testing::PayloadAs<PreemptionPayload>(
      MakePreemption(kPreemptionScheduled, 0, 1, 2, false).payload.data());
  EXPECT_EQ(pp.device_index, 2u);
  // Only SCHEDULED carries a deadline and can be approvable.
  EventSpec started = MakeMaintenance(kMaintenanceStarted, 1234567, 0, 0, true);
  EXPECT_EQ(started.deadline_s, 0u);
  EXPECT_EQ(started.flags, 0u);
  EXPECT_EQ(testing::PayloadAs<FailurePayload>(MakeFailure(kFailureHostFailed, 3, 0).payload.data())
                .device_index,
            kAllDevices);
  auto e = testing::PayloadAs<EnergyPayload>(MakeEnergy(kEnergyCritical, 0xff).payload.data());
  EXPECT_EQ(e.level, kEnergyCritical);
  EXPECT_EQ(e.sources, kEnergySourcePowerBudget | kEnergySourcePrice | kEnergySourceCarbon);
}

TEST(EventsCoarse, SpecValidation) {
  EventSpec s;
  s.topic = HZ_TOPIC_LOST;
  EXPECT_EQ(ValidateSpec(s).code(), StatusCode::kInvalidArgument);
  s.topic = 9;
  EXPECT_EQ(ValidateSpec(s).code(), StatusCode::kInvalidArgument);
  s.topic = HZ_TOPIC_CAPACITY;
  s.flags = HZ_EVENT_F_APPROVABLE;
  EXPECT_EQ(ValidateSpec(s).code(), StatusCode::kInvalidArgument);
  s.flags = HZ_EVENT_F_REPLAY;
  EXPECT_EQ(ValidateSpec(s).code(), StatusCode::kInvalidArgument);
  s.flags = 0;
  EXPECT_TRUE(ValidateSpec(s).ok());
  s.topic = HZ_TOPIC_PREEMPTION;
  s.flags = HZ_EVENT_F_APPROVABLE;
  EXPECT_TRUE(ValidateSpec(s).ok());
  s.kind = kPreemptionStarted;
  EXPECT_EQ(ValidateSpec(s).code(), StatusCode::kInvalidArgument);
}

TEST(EventsCoarse, NamesAreRestricted) {
  EXPECT_TRUE(ValidName("tenant-1"));
  EXPECT_TRUE(ValidName("a.b_c"));
  EXPECT_FALSE(ValidName(""));
  EXPECT_FALSE(ValidName("."));
  EXPECT_FALSE(ValidName(".."));
  EXPECT_FALSE(ValidName("a/b"));
  EXPECT_FALSE(ValidName(std::string(65, 'a')));
  EXPECT_FALSE(ValidName(std::string("a\0b", 3)));
}

TEST(EventsCoarse, ChangeFilterLimitsRateAndFlapping) {
  ChangeFilter f(60);
  EXPECT_TRUE(f.Update("t1/gpu", 8, 1000));   // first value
  EXPECT_FALSE(f.Update("t1/gpu", 8, 1100));  // unchanged
  EXPECT_TRUE(f.Update("t1/gpu", 4, 1100));   // changed after the interval
  EXPECT_FALSE(f.Update("t1/gpu", 8, 1120));  // changed too soon: held back
  EXPECT_FALSE(f.Update("t1/gpu", 8, 1159));
  EXPECT_TRUE(f.Update("t1/gpu", 8, 1160));  // published once the interval passed
  EXPECT_TRUE(f.Update("t1/nic", 2, 1160));  // keys are independent
  EXPECT_TRUE(f.Update("t2/gpu", 8, 1160));
}

}  // namespace
}  // namespace hz::events
