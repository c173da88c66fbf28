#include "hz/experiment/stats.h"

#include <gtest/gtest.h>

namespace hz::experiment {
namespace {

TEST(MeanCi95, IsStudentsIntervalOfTheMean) {
  // mean 5, sample standard deviation sqrt(2.5), n 5: half-width
  // t(0.975, 4) * sqrt(2.5) / sqrt(5) = 2.776 * 0.7071 = 1.963.
  const Interval ci = MeanCi95({3, 4, 5, 6, 7});
  EXPECT_DOUBLE_EQ(ci.mean, 5);
  EXPECT_NEAR(ci.high - ci.mean, 1.963, 0.001);
  EXPECT_NEAR(ci.mean - ci.low, 1.963, 0.001);
  EXPECT_EQ(ci.n, 5u);
}

TEST(MeanCi95, OneSampleIsAPointAndNoneIsEmpty) {
  const Interval one = MeanCi95({4});
  EXPECT_EQ(one.low, 4);
  EXPECT_EQ(one.high, 4);
  EXPECT_EQ(MeanCi95({}).n, 0u);
}

TEST(StudentT975, FollowsTheTableAndTendsToTheNormal) {
  EXPECT_DOUBLE_EQ(StudentT975(1), 12.706);
  EXPECT_DOUBLE_EQ(StudentT975(9), 2.262);
  EXPECT_DOUBLE_EQ(StudentT975(1000), 1.96);
}

}  // namespace
}  // namespace hz::experiment
