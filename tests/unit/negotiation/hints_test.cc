#include "hz/negotiation/hints.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace hz::negotiation {
namespace {

TEST(NegotiationHints, SuggestionRule) {
  // Full allocation: the largest step value within max.
  EXPECT_EQ(SuggestBatch(32, 256, 32, 8, 8), 256u);
  EXPECT_EQ(SuggestBatch(30, 250, 32, 8, 8), 222u);
  // Half the devices: max * 4 / 8 = 128.
  EXPECT_EQ(SuggestBatch(32, 256, 32, 4, 8), 128u);
  // 3 of 8: 96.
  EXPECT_EQ(SuggestBatch(32, 256, 32, 3, 8), 96u);
  // Never below min.
  EXPECT_EQ(SuggestBatch(64, 256, 32, 1, 8), 64u);
  EXPECT_EQ(SuggestBatch(64, 256, 32, 0, 8), 64u);
  EXPECT_EQ(SuggestBatch(64, 256, 32, 0, 0), 64u);
  // Huge values do not overflow.
  EXPECT_EQ(SuggestBatch(1, UINT32_MAX, 1, UINT32_MAX, UINT32_MAX), UINT32_MAX);
}

TEST(NegotiationHints, DeclareValidates) {
  events::testing::RecordingSink sink;
  HintEngine h(&sink);
  hz_hint_declare_result r{};
  EXPECT_EQ(h.Declare(TenantId("t"), {10, 5, 1, 0}, &r).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(h.Declare(TenantId("t"), {1, 5, 0, 0}, &r).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(h.Declare(TenantId("t"), {1, 5, 1, 1}, &r).code(), StatusCode::kInvalidArgument);
  events::HintPayload p;
  EXPECT_EQ(h.Current(TenantId("t"), &p).code(), StatusCode::kNotFound);
  EXPECT_TRUE(h.Declare(TenantId("t"), {5, 5, 1, 0}, &r).ok());
  EXPECT_EQ(r.suggested, 5u);
}

TEST(NegotiationHints, AllocationChangesPublishHints) {
  events::testing::RecordingSink sink;
  HintEngine h(&sink);
  h.SetDevices(TenantId("t"), 8);  // before any declaration: nothing published
  EXPECT_TRUE(sink.entries().empty());
  hz_hint_declare_result r{};
  ASSERT_TRUE(h.Declare(TenantId("t"), {32, 256, 32, 0}, &r).ok());
  EXPECT_EQ(r.suggested, 256u);
  h.SetDevices(TenantId("t"), 4);
  h.SetDevices(TenantId("t"), 4);   // unchanged: no event
  h.SetDevices(TenantId("t"), 16);  // new peak
  h.SetDevices(TenantId("t"), 12);
  auto e = sink.entries();
  ASSERT_EQ(e.size(), 3u);
  auto p0 = events::testing::PayloadAs<events::HintPayload>(e[0].spec.payload.data());
  EXPECT_EQ(e[0].spec.topic, HZ_TOPIC_HINT);
  EXPECT_EQ(p0.suggested, 128u);
  EXPECT_EQ(p0.devices_now, 4u);
  EXPECT_EQ(p0.devices_peak, 8u);
  EXPECT_EQ(events::testing::PayloadAs<events::HintPayload>(e[1].spec.payload.data()).suggested,
            256u);
  auto p2 = events::testing::PayloadAs<events::HintPayload>(e[2].spec.payload.data());
  EXPECT_EQ(p2.suggested, 192u);  // 256 * 12 / 16
  EXPECT_EQ(p2.devices_peak, 16u);
  // Another tenant is unaffected.
  events::HintPayload p;
  EXPECT_EQ(h.Current(TenantId("other"), &p).code(), StatusCode::kNotFound);
  // A new declaration restarts the peak at the devices held now.
  ASSERT_TRUE(h.Declare(TenantId("t"), {32, 256, 32, 0}, &r).ok());
  EXPECT_EQ(r.suggested, 256u);
}

}  // namespace
}  // namespace hz::negotiation
