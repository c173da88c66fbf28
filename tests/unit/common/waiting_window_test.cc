// The waiting window behind CONGESTION (SPEC.md §8.3.5), on an injected clock.
#include "hz/common/waiting_window.h"

#include <gtest/gtest.h>

namespace hz {
namespace {

constexpr uint64_t kS = 1'000'000'000;  // one second in ns

TEST(WaitingWindow, NothingWaitedIsZero) {
  WaitingWindow w(10 * kS, 10, 100 * kS);
  WaitingTime t = w.Measure(150 * kS);
  EXPECT_EQ(t.waiting_ns, 0u);
  EXPECT_GE(t.window_ns, 10 * kS);
  EXPECT_LT(t.window_ns, 11 * kS);
}

TEST(WaitingWindow, CountsTheWaitingPartOfTheWindow) {
  WaitingWindow w(10 * kS, 10, 0);
  w.SetWaiting(true, 100 * kS);
  w.SetWaiting(false, 106 * kS);
  WaitingTime t = w.Measure(110 * kS);  // a window of exactly 10 slots
  EXPECT_EQ(t.window_ns, 10 * kS);
  EXPECT_EQ(t.waiting_ns, 6 * kS);
}

TEST(WaitingWindow, AWaitStillGoingCountsUpToNow) {
  WaitingWindow w(10 * kS, 10, 0);
  w.SetWaiting(true, 105 * kS);
  WaitingTime t = w.Measure(110 * kS);
  EXPECT_EQ(t.waiting_ns, 5 * kS);
  t = w.Measure(130 * kS);  // waiting all along: the whole window
  EXPECT_EQ(t.waiting_ns, t.window_ns);
}

TEST(WaitingWindow, OldWaitsLeaveTheWindow) {
  WaitingWindow w(10 * kS, 10, 0);
  w.SetWaiting(true, 100 * kS);
  w.SetWaiting(false, 105 * kS);
  EXPECT_EQ(w.Measure(110 * kS).waiting_ns, 5 * kS);
  EXPECT_EQ(w.Measure(113 * kS).waiting_ns, 2 * kS);  // [103, 105) remain
  EXPECT_EQ(w.Measure(116 * kS).waiting_ns, 0u);
  // After a long idle gap (more than the window at once) too.
  w.SetWaiting(true, 1000 * kS);
  w.SetWaiting(false, 1001 * kS);
  EXPECT_EQ(w.Measure(1010 * kS).waiting_ns, 1 * kS);
  EXPECT_EQ(w.Measure(100000 * kS).waiting_ns, 0u);
}

TEST(WaitingWindow, ManyShortWaitsAddUp) {
  WaitingWindow w(10 * kS, 10, 0);
  // 20 000 waits of 250 us every 500 us: half the time, split across slots.
  for (uint64_t i = 0; i < 20000; ++i) {
    const uint64_t t0 = 100 * kS + i * 500'000;
    w.SetWaiting(true, t0);
    w.SetWaiting(false, t0 + 250'000);
  }
  WaitingTime t = w.Measure(110 * kS);
  EXPECT_EQ(t.window_ns, 10 * kS);
  EXPECT_EQ(t.waiting_ns, 5 * kS);
}

TEST(WaitingWindow, AClockThatStandsStillOrGoesBackAddsNothing) {
  WaitingWindow w(10 * kS, 10, 0);
  w.SetWaiting(true, 100 * kS);
  w.SetWaiting(false, 102 * kS);
  w.SetWaiting(true, 101 * kS);  // earlier than already seen
  w.SetWaiting(false, 101 * kS);
  EXPECT_EQ(w.Measure(105 * kS).waiting_ns, 2 * kS);
}

TEST(WaitingWindow, WaitsKnownAfterTheFactCountAndLeaveLikeOthers) {
  WaitingWindow w(10 * kS, 10, 0);
  w.AddWaiting(2 * kS, 100 * kS);  // a leg that took 2 s more than its link allows
  w.AddWaiting(3 * kS, 104 * kS);
  EXPECT_EQ(w.Measure(105 * kS).waiting_ns, 5 * kS);
  EXPECT_EQ(w.Measure(113 * kS).waiting_ns, 3 * kS);  // the first left the window
  EXPECT_EQ(w.Measure(130 * kS).waiting_ns, 0u);
  // Overlapping waits (several communicators at once) never exceed the window.
  for (int i = 0; i < 30; ++i) w.AddWaiting(kS, 131 * kS);
  WaitingTime t = w.Measure(131 * kS);
  EXPECT_EQ(t.waiting_ns, t.window_ns);
}

}  // namespace
}  // namespace hz
