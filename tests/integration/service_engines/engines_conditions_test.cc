// The host's conditions end to end: an operator's energy schedule reaches the
// tenants as ENERGY events, a real collective load as CONGESTION/HOST_MEMORY,
// and ENERGY_SLACK answers as SPEC §7.10 says. Tenants use only
// libharmonaize; the operator the control API.
#include <atomic>
#include <chrono>
#include <ctime>
#include <fstream>
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

class ServiceConditions : public ::testing::Test {
 protected:
  void SetUp() override {
    // One collective worker, so that two tenants' large all-reduces contend
    // for it; the conditions are looked at every 200 ms.
    const std::string config =
        svc_.WriteConfig("[collectives]\nworker_threads = 1\n[conditions]\npoll_ms = 200\n");
    ASSERT_TRUE(svc_.Start({"--config", config}));
    socks_a_ = svc_.TenantWithVms("ta", 1);
    socks_b_ = svc_.TenantWithVms("tb", 1);
    ASSERT_EQ(socks_a_.size(), 1u);
    ASSERT_EQ(socks_b_.size(), 1u);
  }

  hz_device_t* Open(const std::string& sock) {
    hz_device_t* d = nullptr;
    EXPECT_EQ(hz_open(("vhost-user:" + sock).c_str(), &d), HZ_OK);
    return d;
  }

  // The next event of `topic`, skipping others; false on a timeout.
  static bool NextOf(hz_device_t* d, uint16_t topic, hz_event* ev, int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      if (hz_event_next(d, ev, 500) != HZ_OK) continue;
      EXPECT_EQ(hz_event_ack(d, ev->seq, 0), HZ_OK);
      if (ev->topic == topic) return true;
    }
    return false;
  }

  ServiceProcess svc_;
  std::vector<std::string> socks_a_, socks_b_;
};

// Payload bytes a kind does not define are zero (SPEC §8.3).
void ExpectZeroFrom(const hz_event& ev, size_t first) {
  for (size_t i = first; i < HZ_EVENT_PAYLOAD_BYTES; ++i) EXPECT_EQ(ev.payload[i], 0) << i;
}

TEST_F(ServiceConditions, AnEnergyScheduleReachesEveryTenantOnTheHost) {
  hz_device_t* a = Open(socks_a_[0]);
  hz_device_t* b = Open(socks_b_[0]);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  for (hz_device_t* d : {a, b}) {
    ASSERT_EQ(hz_event_subscribe(d, HZ_TOPIC_MASK(HZ_TOPIC_ENERGY), HZ_SEQ_CURSOR), HZ_OK);
  }
  const uint64_t now = static_cast<uint64_t>(std::time(nullptr));
  json r = svc_.Control({{"cmd", "energy.schedule"},
                         {"windows", json::array({{{"start_s", now - 10},
                                                   {"end_s", now + 3600},
                                                   {"level", "constrained"},
                                                   {"sources", {"price", "carbon"}}}})}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  EXPECT_EQ(r["result"]["level"], "constrained");
  for (hz_device_t* d : {a, b}) {
    hz_event ev{};
    ASSERT_TRUE(NextOf(d, HZ_TOPIC_ENERGY, &ev, kWaitMs));
    EXPECT_EQ(ev.kind, 0);  // LEVEL_CHANGED
    EXPECT_EQ(ev.payload[0], 1);
    EXPECT_EQ(ev.payload[1], (1 << 1) | (1 << 2));  // price, carbon
    EXPECT_EQ(ev.time_s % 10, 0u);
    ExpectZeroFrom(ev, 2);
  }
  // Cleared: back to normal, told once more.
  r = svc_.Control({{"cmd", "energy.schedule"}, {"windows", json::array()}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  hz_event ev{};
  ASSERT_TRUE(NextOf(a, HZ_TOPIC_ENERGY, &ev, kWaitMs));
  EXPECT_EQ(ev.payload[0], 0);
  EXPECT_EQ(ev.payload[1], 0);
  // A bad window is refused and the schedule kept.
  r = svc_.Control({{"cmd", "energy.schedule"},
                    {"windows", json::array({{{"start_s", 5}, {"end_s", 1}, {"level", 1}}})}});
  EXPECT_FALSE(r.value("ok", true));
  hz_close(a);
  hz_close(b);
}

TEST_F(ServiceConditions, EnergySlackAnswersAsTheSpecSays) {
  hz_device_t* a = Open(socks_a_[0]);
  ASSERT_NE(a, nullptr);
  hz_device_info info;
  ASSERT_EQ(hz_device_get_info(a, &info), HZ_OK);
  EXPECT_TRUE(info.features & (1ull << HZ_F_ENERGY));
  uint64_t expires = 1;
  EXPECT_EQ(hz_energy_slack(a, HZ_ENERGY_SLACK_MAX_PCT + 1, 60, &expires), HZ_EINVAL);
  EXPECT_EQ(hz_energy_slack(a, 30, 0, &expires), HZ_EINVAL);
  EXPECT_EQ(hz_energy_slack(a, 30, HZ_ENERGY_SLACK_MAX_S + 1, &expires), HZ_EINVAL);
  EXPECT_EQ(hz_energy_slack(a, 0, 60, &expires), HZ_EINVAL);
  const uint64_t before = static_cast<uint64_t>(std::time(nullptr));
  ASSERT_EQ(hz_energy_slack(a, 30, 600, &expires), HZ_OK);
  EXPECT_GE(expires, before + 600);
  EXPECT_LE(expires, static_cast<uint64_t>(std::time(nullptr)) + 600);
  json st = svc_.Control({{"cmd", "energy.status"}});
  ASSERT_TRUE(st.value("ok", false)) << st.dump();
  ASSERT_EQ(st["result"]["slack"].size(), 1u);
  EXPECT_EQ(st["result"]["slack"][0]["tenant"], "ta");
  EXPECT_EQ(st["result"]["slack"][0]["slowdown_pct"], 30);
  EXPECT_EQ(st["result"]["slack"][0]["share_pct"], 100);  // normal: not slowed
  ASSERT_EQ(hz_energy_slack(a, 0, 0, &expires), HZ_OK);
  EXPECT_EQ(expires, 0u);
  hz_close(a);
}

// Two tenants' 16 MiB all-reduces on one worker: one always waits for the
// other, which the tenants hear of as host memory congestion.
TEST_F(ServiceConditions, ACollectiveLoadIsToldAsHostMemoryCongestion) {
  hz_device_t* devs[2] = {Open(socks_a_[0]), Open(socks_b_[0])};
  ASSERT_NE(devs[0], nullptr);
  ASSERT_NE(devs[1], nullptr);
  ASSERT_EQ(hz_event_subscribe(devs[0], HZ_TOPIC_MASK(HZ_TOPIC_CONGESTION), HZ_SEQ_CURSOR), HZ_OK);
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> load;
  for (hz_device_t* d : devs) {
    load.emplace_back([d, &stop, &failures] {
      hz_uid_t uid;
      hz_comm_t* comm = nullptr;
      void* p = nullptr;
      constexpr size_t kCount = 4u << 20;  // 16 MiB of floats
      if (hz_comm_get_uid(d, &uid) != HZ_OK ||
          hz_comm_init(d, &uid, 1, 0, nullptr, &comm) != HZ_OK ||
          hz_mem_alloc(d, kCount * 2 * sizeof(float), &p) != HZ_OK) {
        failures++;
        return;
      }
      float* s = static_cast<float*>(p);
      while (!stop.load()) {
        if (hz_allreduce(comm, s, s + kCount, kCount, HZ_FP32, HZ_SUM) != HZ_OK) failures++;
      }
      hz_mem_free(d, p);
      hz_comm_destroy(comm);
    });
  }
  hz_event ev{};
  // The window is 10 s: the level shows once the load has filled it.
  const bool told = NextOf(devs[0], HZ_TOPIC_CONGESTION, &ev, 60000);
  stop = true;
  for (std::thread& t : load) t.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_TRUE(told) << svc_.Control({{"cmd", "energy.status"}}).dump();
  EXPECT_EQ(ev.kind, 1);  // HOST_MEMORY
  EXPECT_GE(ev.payload[0], 1);
  EXPECT_LE(ev.payload[0], 3);
  EXPECT_EQ(ev.time_s % 10, 0u);
  ExpectZeroFrom(ev, 1);
  for (hz_device_t* d : devs) hz_close(d);
}

}  // namespace
