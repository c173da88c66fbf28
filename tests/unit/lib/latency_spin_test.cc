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
  EXPECT_EQ(LatencySpin("100001", std::nullopt), microseconds(0));
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

// The operator granted the latency class no effect: the device does not
// poll, and a spin would only hold the CPU its thread needs.
TEST(LatencySpin, ADeviceThatDoesNotPollLeavesNoSpin) {
  EXPECT_EQ(LatencySpin("50", 0), microseconds(0));
  EXPECT_EQ(LatencySpin("100000", 0), microseconds(0));
}

// A device that predates the window does not say: the spin is the rank's
// alone to choose, up to the library's limit.
TEST(LatencySpin, WithoutAWindowTheRankDecides) {
  EXPECT_EQ(LatencySpin("1000", std::nullopt), microseconds(1000));
  EXPECT_EQ(LatencySpin("100000", std::nullopt), microseconds(kMaxLatencySpinUs));
}

hz_config ConfigWith(uint32_t status, uint32_t window_us) {
  hz_config c{};
  c.status = status;
  c.latency_poll_us = window_us;
  return c;
}

// The window counts only where the status bit says the device reports it,
// whatever else the status says (SPEC §5.2).
TEST(DeviceWindow, IsReadOnlyWhereTheDeviceSaysItReportsIt) {
  EXPECT_EQ(DeviceWindow(ConfigWith(HZ_CFG_S_READY | HZ_CFG_S_LATENCY_WINDOW, 120)), 120u);
  EXPECT_EQ(DeviceWindow(ConfigWith(HZ_CFG_S_READY | HZ_CFG_S_LATENCY_WINDOW, 0)), 0u);
  EXPECT_EQ(DeviceWindow(ConfigWith(HZ_CFG_S_DRAINING | HZ_CFG_S_LATENCY_WINDOW, 0)), 0u);
  EXPECT_EQ(DeviceWindow(ConfigWith(HZ_CFG_S_READY, 0)), std::nullopt);
  EXPECT_EQ(DeviceWindow(ConfigWith(0, 0)), std::nullopt);
}

}  // namespace
}  // namespace hz::lib
