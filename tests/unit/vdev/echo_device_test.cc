#include "vdev/echo_device.h"

#include <cstring>

#include "gtest/gtest.h"

namespace vdev {
namespace {

TEST(VdevEchoDevice, CopiesAcrossUnevenSegments) {
  uint8_t src1[3] = {1, 2, 3}, src2[5] = {4, 5, 6, 7, 8};
  uint8_t dst1[2] = {}, dst2[0 + 1] = {}, dst3[4] = {};
  Chain c(0, {{src1, 3}, {nullptr, 0}, {src2, 5}}, {{dst1, 2}, {dst2, 0}, {dst3, 4}}, nullptr);
  EXPECT_EQ(EchoChain(c), 6u);
  EXPECT_EQ(dst1[0], 1);
  EXPECT_EQ(dst1[1], 2);
  EXPECT_EQ(dst3[0], 3);
  EXPECT_EQ(dst3[3], 6);
}

TEST(VdevEchoDevice, OneBufferEachWayCopiesTheShorterLength) {
  uint8_t src[5] = {1, 2, 3, 4, 5}, dst[8] = {};
  EXPECT_EQ(EchoChain(Chain(0, {{src, 5}}, {{dst, 8}}, nullptr)), 5u);
  EXPECT_EQ(dst[4], 5);
  EXPECT_EQ(dst[5], 0);
  uint8_t small[2] = {};
  EXPECT_EQ(EchoChain(Chain(0, {{src, 5}}, {{small, 2}}, nullptr)), 2u);
  EXPECT_EQ(small[1], 2);
  // A guest may make the two buffers overlap: the copy behaves like memmove.
  uint8_t both[6] = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(EchoChain(Chain(0, {{both, 4}}, {{both + 2, 4}}, nullptr)), 4u);
  const uint8_t want[6] = {1, 2, 1, 2, 3, 4};
  EXPECT_EQ(std::memcmp(both, want, 6), 0);
}

TEST(VdevEchoDevice, EmptySidesCopyNothing) {
  uint8_t b[4] = {};
  EXPECT_EQ(EchoChain(Chain(0, {}, {{b, 4}}, nullptr)), 0u);
  EXPECT_EQ(EchoChain(Chain(0, {{b, 4}}, {}, nullptr)), 0u);
}

TEST(VdevEchoDevice, ConfigSpaceLayout) {
  EchoDevice d({.queues = 3, .config_size = 300});
  auto cfg = d.ConfigSpace();
  ASSERT_EQ(cfg.size(), vu::kMaxConfigSize);  // clamped
  EXPECT_EQ(std::string(cfg.begin(), cfg.begin() + 4), "ECHO");
  EXPECT_EQ(cfg[4], 3);
  EXPECT_EQ(cfg[200], 200);
  uint8_t v = 9;
  EXPECT_FALSE(d.SetConfig(0, {&v, 1}));
  EXPECT_TRUE(d.SetConfig(8, {&v, 1}));
  EXPECT_EQ(d.ConfigSpace()[8], 9);
}

}  // namespace
}  // namespace vdev
