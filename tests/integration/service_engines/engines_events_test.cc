// Events end to end: the operator injects through the control API, the
// tenant's process receives the record in its event queue buffer.
#include <chrono>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "harmonaize/hz.h"
#include "service_harness.h"

namespace {

using hz::testing::kWaitMs;
using hz::testing::ServiceProcess;
using json = nlohmann::json;

class ServiceEngineEvents : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(svc_.Start());
    socks_a_ = svc_.TenantWithVms("ta", 1);
    socks_b_ = svc_.TenantWithVms("tb", 1);
    ASSERT_EQ(socks_a_.size(), 1u);
    ASSERT_EQ(socks_b_.size(), 1u);
  }

  // A socket serves one front-end at a time: right after a close the
  // service may still be letting go of the old connection, so retry (bounded).
  hz_device_t* Open(const std::string& sock) {
    hz_device_t* d = nullptr;
    int rc = HZ_ENODEV;
    for (int i = 0; i < 500 && rc == HZ_ENODEV; ++i) {
      rc = hz_open(("vhost-user:" + sock).c_str(), &d);
      if (rc == HZ_ENODEV) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(rc, HZ_OK);
    return rc == HZ_OK ? d : nullptr;
  }

  // Injects a scheduled maintenance in `in_s` seconds; returns its seq (0 on failure).
  uint64_t InjectMaintenance(const std::string& tenant, uint64_t in_s, bool approvable = false) {
    json r = svc_.Control({{"cmd", "event.inject"},
                           {"tenant", tenant},
                           {"event",
                            {{"topic", "maintenance"},
                             {"kind", "scheduled"},
                             {"in_s", in_s},
                             {"duration_s", 600},
                             {"approvable", approvable}}}});
    EXPECT_TRUE(r.value("ok", false)) << r.dump();
    return r.value("ok", false) ? r["result"].value("seq", uint64_t{0}) : 0;
  }

  ServiceProcess svc_;
  std::vector<std::string> socks_a_, socks_b_;
};

TEST_F(ServiceEngineEvents, HelloGrantsEvents) {
  hz_device_t* d = Open(socks_a_[0]);
  ASSERT_NE(d, nullptr);
  hz_device_info info;
  ASSERT_EQ(hz_device_get_info(d, &info), HZ_OK);
  EXPECT_TRUE(info.features & (1ull << HZ_F_EVENTS));
  hz_close(d);
}

TEST_F(ServiceEngineEvents, InjectedMaintenanceArrivesWithRoundedDeadline) {
  hz_device_t* d = Open(socks_a_[0]);
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(hz_event_subscribe(d, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  const uint64_t before = static_cast<uint64_t>(std::time(nullptr));
  const uint64_t seq = InjectMaintenance("ta", 900);
  const uint64_t after = static_cast<uint64_t>(std::time(nullptr));
  ASSERT_NE(seq, 0u);
  hz_event ev{};
  ASSERT_EQ(hz_event_next(d, &ev, kWaitMs), HZ_OK);
  EXPECT_EQ(ev.seq, seq);
  EXPECT_EQ(ev.topic, HZ_TOPIC_MAINTENANCE);
  EXPECT_EQ(ev.flags & HZ_EVENT_F_REPLAY, 0u);
  EXPECT_EQ(ev.deadline_s % 10, 0u);  // SPEC: rounded down to 10 s
  EXPECT_LE(ev.deadline_s, after + 900);
  EXPECT_GT(ev.deadline_s, before + 900 - 10);
  EXPECT_EQ(ev.time_s % 10, 0u);
  EXPECT_EQ(hz_event_ack(d, ev.seq, 0), HZ_OK);
  // Nothing else is waiting.
  EXPECT_EQ(hz_event_next(d, &ev, 200), HZ_ETIMEDOUT);
  json c = svc_.Control({{"cmd", "counters"}});
  ASSERT_TRUE(c.value("ok", false));
  EXPECT_GE(c["result"]["events"]["published"].get<uint64_t>(), 1u);
  EXPECT_GE(c["result"]["events"]["delivered"].get<uint64_t>(), 1u);
  hz_close(d);
}

TEST_F(ServiceEngineEvents, EventsPublishedBeforeSubscribingAreDelivered) {
  const uint64_t s1 = InjectMaintenance("ta", 600);
  const uint64_t s2 = InjectMaintenance("ta", 1200);
  ASSERT_LT(s1, s2);
  hz_device_t* d = Open(socks_a_[0]);
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(hz_event_subscribe(d, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  hz_event ev{};
  ASSERT_EQ(hz_event_next(d, &ev, kWaitMs), HZ_OK);
  EXPECT_EQ(ev.seq, s1);
  ASSERT_EQ(hz_event_next(d, &ev, kWaitMs), HZ_OK);
  EXPECT_EQ(ev.seq, s2);
  hz_close(d);
}

// A timeout of 0 polls: an event already delivered is returned, not
// HZ_ETIMEDOUT before the queue was looked at.
TEST_F(ServiceEngineEvents, AZeroTimeoutReturnsAnEventThatHasArrived) {
  hz_device_t* d = Open(socks_a_[0]);
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(hz_event_subscribe(d, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  const uint64_t seq = InjectMaintenance("ta", 600);
  hz_event ev{};
  int rc = HZ_ETIMEDOUT;
  for (int waited_ms = 0; rc == HZ_ETIMEDOUT && waited_ms < kWaitMs; waited_ms += 10) {
    rc = hz_event_next(d, &ev, 0);
    if (rc == HZ_ETIMEDOUT) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(rc, HZ_OK);
  EXPECT_EQ(ev.seq, seq);
  EXPECT_EQ(hz_event_next(d, &ev, 0), HZ_ETIMEDOUT);  // nothing more: at once
  hz_close(d);
}

TEST_F(ServiceEngineEvents, ReconnectReplaysFromTheCursor) {
  hz_device_t* d = Open(socks_a_[0]);
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(hz_event_subscribe(d, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  const uint64_t s1 = InjectMaintenance("ta", 600);
  const uint64_t s2 = InjectMaintenance("ta", 1200);
  hz_event ev{};
  ASSERT_EQ(hz_event_next(d, &ev, kWaitMs), HZ_OK);
  ASSERT_EQ(ev.seq, s1);
  ASSERT_EQ(hz_event_next(d, &ev, kWaitMs), HZ_OK);
  ASSERT_EQ(ev.seq, s2);
  EXPECT_EQ(hz_event_ack(d, s1, 0), HZ_OK);  // s2 was seen but not acknowledged
  hz_close(d);

  d = Open(socks_a_[0]);
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(hz_event_subscribe(d, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  ASSERT_EQ(hz_event_next(d, &ev, kWaitMs), HZ_OK);
  EXPECT_EQ(ev.seq, s2);
  EXPECT_NE(ev.flags & HZ_EVENT_F_REPLAY, 0u);
  EXPECT_EQ(hz_event_ack(d, s2, 0), HZ_OK);
  EXPECT_EQ(hz_event_next(d, &ev, 200), HZ_ETIMEDOUT);
  hz_close(d);
}

TEST_F(ServiceEngineEvents, TenantsSeeOnlyTheirOwnEvents) {
  hz_device_t* a = Open(socks_a_[0]);
  hz_device_t* b = Open(socks_b_[0]);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(hz_event_subscribe(a, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  ASSERT_EQ(hz_event_subscribe(b, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  const uint64_t sa = InjectMaintenance("ta", 600);
  hz_event ev{};
  ASSERT_EQ(hz_event_next(a, &ev, kWaitMs), HZ_OK);
  EXPECT_EQ(ev.seq, sa);
  EXPECT_EQ(hz_event_next(b, &ev, 300), HZ_ETIMEDOUT);
  const uint64_t sb = InjectMaintenance("tb", 300);
  ASSERT_EQ(hz_event_next(b, &ev, kWaitMs), HZ_OK);
  EXPECT_EQ(ev.seq, sb);
  EXPECT_EQ(hz_event_next(a, &ev, 300), HZ_ETIMEDOUT);
  hz_close(a);
  hz_close(b);
}

TEST_F(ServiceEngineEvents, ApproveOnlyApprovableEvents) {
  hz_device_t* d = Open(socks_a_[0]);
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(hz_event_subscribe(d, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  const uint64_t plain = InjectMaintenance("ta", 600, /*approvable=*/false);
  const uint64_t appr = InjectMaintenance("ta", 900, /*approvable=*/true);
  hz_event ev{};
  ASSERT_EQ(hz_event_next(d, &ev, kWaitMs), HZ_OK);
  ASSERT_EQ(ev.seq, plain);
  EXPECT_EQ(ev.flags & HZ_EVENT_F_APPROVABLE, 0u);
  EXPECT_NE(hz_event_ack(d, plain, HZ_ACK_F_APPROVE), HZ_OK);
  ASSERT_EQ(hz_event_next(d, &ev, kWaitMs), HZ_OK);
  ASSERT_EQ(ev.seq, appr);
  EXPECT_NE(ev.flags & HZ_EVENT_F_APPROVABLE, 0u);
  EXPECT_EQ(hz_event_ack(d, appr, HZ_ACK_F_APPROVE), HZ_OK);
  hz_close(d);
}

TEST_F(ServiceEngineEvents, InjectionRejectsBadRequests) {
  json r = svc_.Control({{"cmd", "event.inject"},
                         {"tenant", "nobody"},
                         {"event", {{"topic", "maintenance"}, {"kind", "unplanned"}}}});
  EXPECT_FALSE(r.value("ok", true));
  r = svc_.Control(
      {{"cmd", "event.inject"}, {"tenant", "ta"}, {"event", {{"topic", "no-such-topic"}}}});
  EXPECT_FALSE(r.value("ok", true));
  r = svc_.Control({{"cmd", "event.inject"},
                    {"tenant", "ta"},
                    {"event", {{"topic", "maintenance"}, {"kind", "scheduled"}}}});
  EXPECT_FALSE(r.value("ok", true)) << "a scheduled event needs a deadline";
}

}  // namespace
