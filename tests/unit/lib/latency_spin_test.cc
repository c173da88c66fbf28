// HZ_LATENCY_POLL_US as the library reads it, and the device's window that
// bounds it (SPEC §5.1, §7.3.2).
#include <gtest/gtest.h>

#include "latency_spin.h"

namespace hz::lib {
namespace {

using std::chrono::microseconds;

TEST(LatencySpin, UnsetEmptyOrMalformedMeansNoSpin) {
  EXPECT_EQ(LatencySpin(nullptr, 200), microseconds(0));
  EXPECT_EQ(LatencySpin("", 200), microseconds(0));
  EXPECT_EQ(LatencySpin("fifty", 200), microseconds(0));
  EXPECT_EQ(LatencySpin("50us", 200), microseconds(0));
  EXPECT_EQ(LatencySpin("-1", 200), microseconds(0));
  EXPECT_EQ(LatencySpin("100001", 0), microseconds(0));
}

TEST(LatencySpin, ASpinWithinTheDevicesWindowIsKept) {
  EXPECT_EQ(LatencySpin("50", 200), microseconds(50));
  EXPECT_EQ(LatencySpin("200", 200), microseconds(200));
  EXPECT_EQ(LatencySpin("0", 200), microseconds(0));
}

// Past the window the device sleeps until the rank kicks, and a spin that
// outlasts it only holds a CPU another rank of the operation may need.
TEST(LatencySpin, ALongerSpinStopsAtTheDevicesWindow) {
  EXPECT_EQ(LatencySpin("1000", 200), microseconds(200));
  EXPECT_EQ(LatencySpin("100000", 1), microseconds(1));
}

// A device that does not poll, or predates the field, reports 0: the spin
// is the rank's alone to choose, up to the library's limit.
TEST(LatencySpin, WithoutAWindowTheRankDecides) {
  EXPECT_EQ(LatencySpin("1000", 0), microseconds(1000));
  EXPECT_EQ(LatencySpin("100000", 0), microseconds(kMaxLatencySpinUs));
}

}  // namespace
}  // namespace hz::lib
