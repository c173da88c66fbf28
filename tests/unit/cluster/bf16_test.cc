// The bfloat16 conversions (hz/common/half.h) as the inter-host leg uses
// them, the wire format of ALLOW_LOSSY: fp32 rounded to nearest even.
#include <cmath>
#include <cstring>
#include <limits>

#include <gtest/gtest.h>

#include "hz/common/half.h"

namespace hz {
namespace {

TEST(Bf16Test, ValuesBf16HoldsRoundTripExactly) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 256.0f, 0x1.fep127f, 0x1p-126f, 0x1p-133f,
                  std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(Bf16ToFloat(FloatToBf16(f)), f) << f;
  }
}

TEST(Bf16Test, OtherValuesRoundToNearestEven) {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even one (1).
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 0x1p-8f)), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  // Just above halfway rounds up; just below, down.
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.0f + 0x1p-8f - 0x1p-20f)), 1.0f);
  // The relative error is at most 2^-8 (the unit roundoff SPEC §7.3.8 uses).
  for (float f = 1.0f; f < 2.0f; f += 0x1p-20f) {
    ASSERT_LE(std::fabs(Bf16ToFloat(FloatToBf16(f)) - f), 0x1p-8f * f) << f;
  }
}

TEST(Bf16Test, NaNStaysNaNAndOverflowGoesToInfinity) {
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low half must not become infinity.
  uint32_t bits = 0x7f800001u;
  float low_nan;
  std::memcpy(&low_nan, &bits, sizeof(low_nan));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(low_nan))));
  EXPECT_TRUE(std::isinf(Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::max()))));
}

}  // namespace
}  // namespace hz
