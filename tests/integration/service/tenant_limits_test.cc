// The operator's per-tenant checkpoint caps (hzctl tenant create
// --disk-bytes/--staging-bytes): validated, kept across restarts, and what
// the checkpoint engine holds the tenant to; and the operator's other
// settings that keep one tenant from another's way.
#include <gtest/gtest.h>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "allreduce_loop.h"
#include "hz_client.h"
#include "hz_test/busy_cpus.h"
#include "service_harness.h"

namespace hz::testing {
namespace {

constexpr uint64_t kSmallDisk = 1ull << 20;
constexpr uint64_t kSaveBytes = 2ull << 20;

nlohmann::json TenantEntry(ServiceProcess& svc, const std::string& name) {
  nlohmann::json r = svc.Control({{"cmd", "tenant.list"}});
  for (const nlohmann::json& t : r.value("result", nlohmann::json::array())) {
    if (t.value("name", "") == name) return t;
  }
  return {};
}

// A save of kSaveBytes to the local-disk tier from a fresh VM of the tenant
// bound at `socket`; its status.
uint32_t SaveToDisk(const std::string& socket) {
  HzClient c;
  if (!c.Connect(socket)) return 0xfffffffe;
  if (c.Hello(1ull << HZ_F_CHECKPOINT) != HZ_S_OK) return 0xfffffffd;
  GuestBuffer b;
  if (c.Register(kSaveBytes, 1, HZ_REGION_F_READ, &b) != HZ_S_OK) return 0xfffffffc;
  hz_ckpt_policy_args p{};
  p.stream = 1;
  p.retention = 1;
  p.tier = HZ_TIER_LOCAL_DISK;
  p.stall_budget_ms = 1000;
  if (c.Call(HZ_VQ_CONTROL, HZ_OP_CKPT_POLICY, p).status != HZ_S_OK) return 0xfffffffb;
  hz_ckpt_save_args a{};
  a.stream = 1;
  a.num_slices = 1;
  a.step = 1;
  hz_slice s = SliceOf(b, 0, kSaveBytes);
  return c.Call(HZ_VQ_REQUEST_BASE, HZ_OP_CKPT_SAVE, &a, sizeof(a), &s, sizeof(s), 64).status;
}

TEST(ServiceTenantLimitsTest, ATenantsOwnDiskCapIsValidatedEnforcedAndKept) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  std::string out;
  EXPECT_NE(svc.Hzctl(HZ_HZCTL_PATH, "tenant create zero --disk-bytes 0", &out), 0);
  EXPECT_NE(out.find("disk_bytes"), std::string::npos) << out;
  EXPECT_NE(svc.Hzctl(HZ_HZCTL_PATH, "tenant create huge --disk-bytes 9000000000000000000", &out),
            0);
  EXPECT_NE(out.find("disk space of all checkpoints"), std::string::npos) << out;
  EXPECT_NE(svc.Hzctl(HZ_HZCTL_PATH, "tenant create huge --staging-bytes 9000000000000", &out), 0);
  EXPECT_NE(out.find("staging pool"), std::string::npos) << out;
  EXPECT_TRUE(TenantEntry(svc, "zero").is_null());
  EXPECT_TRUE(TenantEntry(svc, "huge").is_null());

  ASSERT_EQ(svc.Hzctl(HZ_HZCTL_PATH,
                      "tenant create small --disk-bytes " + std::to_string(kSmallDisk), &out),
            0)
      << out;
  std::vector<std::string> small = svc.TenantWithVms("small", 1);
  std::vector<std::string> big = svc.TenantWithVms("big", 1);
  ASSERT_EQ(small.size(), 1u);
  ASSERT_EQ(big.size(), 1u);
  EXPECT_EQ(TenantEntry(svc, "small").value("disk_bytes", 0ull), kSmallDisk);
  EXPECT_EQ(TenantEntry(svc, "big").value("disk_bytes", 1ull), 0u);  // the default
  ASSERT_EQ(svc.Hzctl(HZ_HZCTL_PATH, "tenant list", &out), 0);
  EXPECT_NE(out.find("DISK"), std::string::npos) << out;

  EXPECT_EQ(SaveToDisk(small[0]), HZ_S_ELIMIT);
  EXPECT_EQ(SaveToDisk(big[0]), HZ_S_OK);

  // The cap is the tenant's, not the process's: it is back after a restart.
  ASSERT_EQ(svc.Terminate(), 0);
  ASSERT_TRUE(svc.Start());
  EXPECT_EQ(TenantEntry(svc, "small").value("disk_bytes", 0ull), kSmallDisk);
  EXPECT_EQ(SaveToDisk(small[0]), HZ_S_ELIMIT);
}

// The weight the operator gives a tenant is the one the collective engine
// schedules its communicators with, after a restart too.
TEST(ServiceTenantLimitsTest, TheOperatorsWeightReachesTheCollectiveEngine) {
  ServiceProcess svc;
  // Starts the daemon with a metrics endpoint; its port.
  auto start = [&] {
    int port = FreeTcpPort();
    EXPECT_TRUE(svc.Start({"--metrics-port", std::to_string(port)}));
    return static_cast<uint16_t>(port);
  };
  auto weight = [](const std::string& tenant, int w) {
    return "hz_coll_tenant_weight{tenant=\"" + tenant + "\"} " + std::to_string(w) + "\n";
  };
  uint16_t port = start();
  std::string out;
  ASSERT_EQ(svc.Hzctl(HZ_HZCTL_PATH, "tenant create heavy --weight 7", &out), 0) << out;
  ASSERT_EQ(svc.Hzctl(HZ_HZCTL_PATH, "tenant create plain", &out), 0) << out;
  std::string text = HttpGet(port, "/metrics");
  EXPECT_NE(text.find(weight("heavy", 7)), std::string::npos) << text;
  EXPECT_NE(text.find(weight("plain", 1)), std::string::npos) << text;

  // Tenants loaded from state.json at start-up are given their weights too.
  ASSERT_EQ(svc.Terminate(), 0);
  port = start();
  text = HttpGet(port, "/metrics");
  EXPECT_NE(text.find(weight("heavy", 7)), std::string::npos) << text;
  EXPECT_NE(text.find(weight("plain", 1)), std::string::npos) << text;
}

// Region registrations are prepared on a thread at region_thread_nice, so
// that one VM registering without end takes only the CPU that the threads
// serving every VM's requests leave.
TEST(ServiceTenantLimitsTest, RegionsArePreparedAtTheConfiguredNice) {
  ServiceProcess svc;
  const std::string cfg = svc.WriteConfig("region_thread_nice = 13\nbulk_idle_class = false\n");
  ASSERT_TRUE(svc.Start({"--config", cfg}));
  auto vms = svc.TenantWithVms("t1", 1);
  ASSERT_EQ(vms.size(), 1u);
  HzClient c;
  ASSERT_TRUE(c.Connect(vms[0]));
  ASSERT_EQ(c.Hello(), HZ_S_OK);
  GuestBuffer region;
  // Prepared on that thread: once it is answered, the thread has run.
  ASSERT_EQ(c.Register(1 << 20, 64, HZ_REGION_F_READ | HZ_REGION_F_WRITE, &region), HZ_S_OK);
  const auto threads = DaemonThreads(svc.pid());
  ASSERT_EQ(threads.count("hz-regions"), 1u) << ::testing::PrintToString(threads);
  EXPECT_EQ(threads.find("hz-regions")->second, 13);
}

// An operator looking at the daemon's threads (top -H, ps -L, perf) finds
// each by what it does, at the priority its configuration gives it: the
// connection threads that serve every VM's requests at nice 0, the bulk
// work (collectives, checkpoint requests) at the nice values set.
TEST(ServiceTenantLimitsTest, ThreadsAreNamedByTheirWorkAndRunAtTheirConfiguredNice) {
  ServiceProcess svc;
  const std::string cfg = svc.WriteConfig(
      "worker_threads = 3\nbulk_idle_class = false\n[collectives]\nworker_threads = 2\n"
      "worker_nice = 11\n"
      "[checkpoint]\nrequest_threads = 4\nthread_nice = 7\n");
  ASSERT_TRUE(svc.Start({"--config", cfg}));
  const auto threads = WaitForThreads(svc.pid(), kStatNice, [](const auto& t) {
    return PoolValues(t, "hz-conn-").size() == 3 && PoolValues(t, "hz-coll-").size() == 2 &&
           PoolValues(t, "hz-ckpt-req-").size() == 4;
  });
  const std::string all = ::testing::PrintToString(threads);
  EXPECT_EQ(PoolValues(threads, "hz-conn-"), std::vector<int>(3, 0)) << all;
  EXPECT_EQ(PoolValues(threads, "hz-coll-"), std::vector<int>(2, 11)) << all;
  EXPECT_EQ(PoolValues(threads, "hz-ckpt-req-"), std::vector<int>(4, 7)) << all;
  EXPECT_EQ(threads.count("hz-ckpt-io"), 1u) << all;
  EXPECT_EQ(threads.count("hz-ckpt-commit"), 1u) << all;
}

// Whether the scheduling policies of a daemon started with two collective
// workers and two checkpoint request threads (DaemonThreads, kStatPolicy)
// show those and the region thread in the kernel's idle class.
bool BulkThreadsIdle(const std::multimap<std::string, int>& policies) {
  const auto region = policies.find("hz-regions");
  return PoolValues(policies, "hz-coll-") == std::vector<int>(2, SCHED_IDLE) &&
         PoolValues(policies, "hz-ckpt-req-") == std::vector<int>(2, SCHED_IDLE) &&
         region != policies.end() && region->second == SCHED_IDLE;
}

// An operator who puts every tenant's requests before bulk work runs the
// bulk threads in the kernel's idle class; the threads serving requests stay
// where they were.
TEST(ServiceTenantLimitsTest, BulkThreadsRunInTheIdleClassWhenConfigured) {
  ServiceProcess svc;
  const std::string cfg = svc.WriteConfig(
      "region_thread_nice = \"idle\"\n[collectives]\nworker_threads = 2\nworker_nice = \"idle\"\n"
      "[checkpoint]\nrequest_threads = 2\nthread_nice = \"idle\"\n");
  ASSERT_TRUE(svc.Start({"--config", cfg}));
  const auto policies = WaitForThreads(svc.pid(), kStatPolicy, BulkThreadsIdle);
  const std::string all = ::testing::PrintToString(policies);
  EXPECT_TRUE(BulkThreadsIdle(policies)) << all;
  ASSERT_EQ(policies.count("hz-ckpt-io"), 1u) << all;
  EXPECT_EQ(policies.find("hz-ckpt-io")->second, SCHED_IDLE) << all;
  const std::vector<int> serving = PoolValues(policies, "hz-conn-");
  EXPECT_FALSE(serving.empty()) << all;
  EXPECT_EQ(serving, std::vector<int>(serving.size(), SCHED_OTHER)) << all;
}

// By default bulk threads wait in the kernel's idle class, so that any
// thread serving a request takes the CPU from them at once; where other work
// keeps every core busy they would get almost none of one, and the service
// puts a starved one at its nice value for a while. /metrics counts that.
TEST(ServiceTenantLimitsTest, BulkThreadsWaitInTheIdleClassUntilTheyStarve) {
  ServiceProcess svc;
  const int port = FreeTcpPort();
  const std::string cfg =
      svc.WriteConfig("[collectives]\nworker_threads = 2\n[checkpoint]\nrequest_threads = 2\n");
  ASSERT_TRUE(svc.Start({"--config", cfg, "--metrics-port", std::to_string(port)}));
  // Once they sleep (a thread busy while the service starts may have been
  // lifted for a while), all wait in the idle class.
  const auto policies = WaitForThreads(svc.pid(), kStatPolicy, BulkThreadsIdle);
  const std::string all = ::testing::PrintToString(policies);
  EXPECT_TRUE(BulkThreadsIdle(policies)) << all;
  ASSERT_EQ(policies.count("hz-idle-guard"), 1u) << all;
  EXPECT_EQ(policies.find("hz-idle-guard")->second, SCHED_OTHER) << all;
  auto lifts = [&] {
    const std::string text = HttpGet(static_cast<uint16_t>(port), "/metrics");
    const std::string name = "\nhz_bulk_thread_lifts_total ";
    const size_t at = text.find(name);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + name.size()));
  };
  const double lifts_before = lifts();
  ASSERT_GE(lifts_before, 0.0) << "no hz_bulk_thread_lifts_total on /metrics";

  // 4 MiB all-reduces run on the collective workers, which starve behind
  // the busy CPUs until the guard lifts one (a minute: a hang guard).
  std::vector<std::string> vms = svc.TenantWithVms("t1", 2);
  ASSERT_EQ(vms.size(), 2u);
  BusyCpus busy;
  AllReduceLoop loop(2, 1u << 20);
  LoopRanks ranks(loop, vms);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (lifts() <= lifts_before && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double lifted = lifts();
  EXPECT_GT(lifted, lifts_before) << "no bulk thread was lifted; the daemon's threads:\n"
                                  << DescribeThreads(svc.pid());
  // hzctl counters shows the same count (it only grows).
  auto counters = svc.Control({{"cmd", "counters"}});
  EXPECT_GE(counters["result"].value("bulk_thread_lifts", -1.0), lifted) << counters.dump();
  ASSERT_TRUE(loop.ProgressTo(loop.Slowest() + 3))
      << "the all-reduces stalled; the daemon's threads:\n"
      << DescribeThreads(svc.pid());
  EXPECT_EQ(ranks.Finish(), (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace hz::testing
