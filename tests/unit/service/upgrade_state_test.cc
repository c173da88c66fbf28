// The service's own part of a live upgrade's snapshot (src/upgrade_state.h):
// it round-trips, an earlier release's empty state reads as nothing, and
// anything malformed is refused with a reason instead of being half-used.
#include "upgrade_state.h"

#include <gtest/gtest.h>

namespace hz::service {
namespace {

TEST(UpgradeStateTest, TheClusterInstanceRoundTrips) {
  StatusOr<UpgradeState> s = ParseUpgradeState(EncodeUpgradeState({"0123456789abcdef"}));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->cluster_instance, "0123456789abcdef");
}

TEST(UpgradeStateTest, AnEmptyStateIsWhatAnEarlierReleaseWrote) {
  EXPECT_EQ(EncodeUpgradeState({}), "");
  for (const std::string text : {"", "{}", R"({"later_key": [1, 2]})"}) {
    StatusOr<UpgradeState> s = ParseUpgradeState(text);
    ASSERT_TRUE(s.ok()) << text << ": " << s.status().ToString();
    EXPECT_EQ(s->cluster_instance, "") << text;
  }
}

TEST(UpgradeStateTest, AMalformedStateIsRefused) {
  for (const std::string text :
       {"not json", "[]", "\"0123456789abcdef\"", R"({"cluster_instance": 7})",
        R"({"cluster_instance": "0123456789ABCDEF"})", R"({"cluster_instance": "0123"})",
        R"({"cluster_instance": "../../etc/passwd"})", R"({"cluster_instance": ""})"}) {
    StatusOr<UpgradeState> s = ParseUpgradeState(text);
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << text;
  }
}

}  // namespace
}  // namespace hz::service
