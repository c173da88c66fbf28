#include "hz/events/injection.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace hz::events {
namespace {

constexpr uint64_t kNow = 1700000003;

TEST(EventsInjection, EveryTopicCanBeInjected) {
  const char* cases[] = {
      R"({"topic":"failure","kind":"device_failed","device_index":3,"errors":5})",
      R"({"topic":"maintenance","kind":"scheduled","in_s":900,"duration_s":605,"approvable":true})",
      R"({"topic":"preemption","kind":"scheduled","deadline_s":1700000125,"devices":2})",
      R"({"topic":"capacity","kind":"available","device_kind":"nic","count":13})",
      R"({"topic":"congestion","kind":"storage","used":90,"capacity":100})",
      R"({"topic":"checkpoint","kind":"durable","stream":4,"tier":1,"step":1000})",
      R"({"topic":"negotiation","kind":"reservation_revoked","reservation_id":9,"reason":3})",
      R"({"topic":"hint","suggested":64,"min_batch":32,"max_batch":256,"step":32,"n_now":2,"n_peak":8})",
      R"({"topic":"energy","level":2,"sources":["power","carbon"]})",
  };
  uint16_t topic = 0;
  for (const char* text : cases) {
    EventSpec spec;
    Status s = SpecFromJson(text, kNow, &spec);
    ASSERT_TRUE(s.ok()) << text << ": " << s.ToString();
    EXPECT_EQ(spec.topic, topic++) << text;
    EXPECT_TRUE(ValidateSpec(spec).ok()) << text;
  }
}

TEST(EventsInjection, ValuesFollowTheCoarseRules) {
  EventSpec spec;
  ASSERT_TRUE(
      SpecFromJson(
          R"({"topic":"maintenance","kind":"scheduled","in_s":900,"duration_s":605,"device_index":1,"approvable":true})",
          kNow, &spec)
          .ok());
  EXPECT_EQ(spec.kind, kMaintenanceScheduled);
  EXPECT_EQ(spec.deadline_s, 1700000900u);
  EXPECT_EQ(spec.flags, HZ_EVENT_F_APPROVABLE);
  auto m = testing::PayloadAs<MaintenancePayload>(spec.payload.data());
  EXPECT_EQ(m.duration_s, 600u);
  EXPECT_EQ(m.device_index, 1u);

  ASSERT_TRUE(
      SpecFromJson(R"({"topic":"capacity","kind":"available","count":13})", kNow, &spec).ok());
  EXPECT_EQ(testing::PayloadAs<CapacityPayload>(spec.payload.data()).count, 8u);
  ASSERT_TRUE(SpecFromJson(R"({"topic":"congestion","kind":"fabric","used":90,"capacity":100})",
                           kNow, &spec)
                  .ok());
  EXPECT_EQ(testing::PayloadAs<CongestionPayload>(spec.payload.data()).level, kCongestionModerate);
  ASSERT_TRUE(SpecFromJson(R"({"topic":"energy","draw":81,"budget":100})", kNow, &spec).ok());
  EXPECT_EQ(testing::PayloadAs<EnergyPayload>(spec.payload.data()).level, kEnergyConstrained);
  ASSERT_TRUE(
      SpecFromJson(R"({"topic":"failure","kind":"host_failed","device_index":3})", kNow, &spec)
          .ok());
  EXPECT_EQ(testing::PayloadAs<FailurePayload>(spec.payload.data()).device_index, kAllDevices);
}

TEST(EventsInjection, BadDescriptionsSayWhatIsWrong) {
  struct Case {
    const char* text;
    const char* says;
  } cases[] = {
      {"not json", "JSON"},
      {"[1,2]", "JSON object"},
      {R"({"kind":"x"})", "topic"},
      {R"({"topic":"weather"})", "unknown topic"},
      {R"({"topic":"failure"})", "'kind' is required"},
      {R"({"topic":"failure","kind":"exploded"})", "unknown kind"},
      {R"({"topic":"failure","kind":"device_failed","pci":"0000:3b:00.0"})", "unknown key 'pci'"},
      {R"({"topic":"maintenance","kind":"scheduled"})", "deadline"},
      {R"({"topic":"maintenance","kind":"scheduled","deadline_s":5})", "past"},
      {R"({"topic":"maintenance","kind":"scheduled","in_s":60,"deadline_s":1800000000})",
       "not both"},
      {R"({"topic":"maintenance","kind":"started","approvable":true})", "SCHEDULED"},
      {R"({"topic":"preemption","kind":"scheduled","in_s":-5})", "in_s"},
      {R"({"topic":"congestion","kind":"fabric","level":4})", "level"},
      {R"({"topic":"congestion","kind":"fabric"})", "'level', or"},
      {R"({"topic":"capacity","kind":"available","device_kind":"tpu"})", "device_kind"},
      {R"({"topic":"energy","level":1,"sources":["wind"]})", "sources"},
      {R"({"topic":"failure","kind":"device_failed","device_index":4294967296})", "device_index"},
  };
  for (const Case& c : cases) {
    EventSpec spec;
    Status s = SpecFromJson(c.text, kNow, &spec);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << c.text << " -> " << s.message();
  }
}

}  // namespace
}  // namespace hz::events
