// Removing a tenant and creating one of the same name: the new tenant starts
// with nothing of the old one's (checkpoints, events, device allocations,
// reservations, topology permutation seed).
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "harmonaize/hz.h"
#include "provider_host.h"
#include "service_harness.h"

namespace {

using hz::testing::kWaitMs;
using hz::testing::ServiceProcess;
using json = nlohmann::json;

// Runs hzctl against the service; returns its exit code and output.
int Hzctl(const ServiceProcess& svc, const std::string& args, std::string* out) {
  return svc.Hzctl(HZ_HZCTL_PATH, args, out);
}

// Saves one checkpoint (stream 1, step 5) from the VM at sock and waits until
// it is durable.
void SaveOne(const std::string& sock) {
  hz_device_t* dev = nullptr;
  ASSERT_EQ(hz_open(("vhost-user:" + sock).c_str(), &dev), HZ_OK);
  hz_ckpt_policy p{0, 2, HZ_TIER_LOCAL_DISK, 1000, 0};
  ASSERT_EQ(hz_ckpt_set_policy(dev, 1, &p), HZ_OK);
  void* mem = nullptr;
  ASSERT_EQ(hz_mem_alloc(dev, 4096, &mem), HZ_OK);
  std::memset(mem, 0x5a, 4096);
  hz_buf slice{mem, 4096};
  hz_ckpt_info ci{};
  ASSERT_EQ(hz_ckpt_save(dev, 1, 5, &slice, 1, nullptr, 0, &ci), HZ_OK);
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  hz_ckpt_info e{};
  size_t n = 0;
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_EQ(hz_ckpt_list(dev, 1, &e, 1, &n), HZ_OK);
    if (n == 1 && e.state == HZ_CKPT_DURABLE) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(e.state, HZ_CKPT_DURABLE);
  hz_close(dev);
}

// How many checkpoints stream 1 lists for the VM at sock.
size_t Listed(const std::string& sock) {
  // A loaded service may be slow to answer a fresh connection: retry until
  // the hang deadline rather than count a slow open as a listing.
  hz_device_t* dev = nullptr;
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kWaitMs);
  while (hz_open(("vhost-user:" + sock).c_str(), &dev) != HZ_OK) {
    if (std::chrono::steady_clock::now() >= until) return 1000;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  hz_ckpt_info e[4]{};
  size_t n = 0;
  int rc = hz_ckpt_list(dev, 1, e, 4, &n);
  hz_close(dev);
  return rc == HZ_OK ? n : 0;
}

TEST(ServiceTenantRemove, ANameCreatedAgainInheritsNothingAndDataNeedsPurge) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  std::vector<std::string> socks = svc.TenantWithVms("t", 1);
  ASSERT_EQ(socks.size(), 1u);
  SaveOne(socks[0]);
  json r =
      svc.Control({{"cmd", "event.inject"},
                   {"tenant", "t"},
                   {"event", {{"topic", "maintenance"}, {"kind", "scheduled"}, {"in_s", 600}}}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  ASSERT_TRUE(svc.Control({{"cmd", "vm.unbind"}, {"socket", socks[0]}}).value("ok", false));

  // Without --purge the tenant's data stays, and so does the tenant.
  std::string out;
  EXPECT_EQ(Hzctl(svc, "tenant remove t", &out), 1) << out;
  EXPECT_NE(out.find("--purge"), std::string::npos) << out;
  r = svc.Control({{"cmd", "tenant.list"}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  EXPECT_EQ(r["result"].size(), 1u) << r.dump();

  EXPECT_EQ(Hzctl(svc, "tenant remove t --purge", &out), 0) << out;
  socks = svc.TenantWithVms("t", 1);
  ASSERT_EQ(socks.size(), 1u);
  EXPECT_EQ(Listed(socks[0]), 0u);
  r = svc.Control({{"cmd", "event.status"}, {"tenant", "t"}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  EXPECT_EQ(r["result"]["next_seq"], 1) << r.dump();

  // Nor after a restart.
  ASSERT_EQ(svc.Terminate(), 0);
  ASSERT_TRUE(svc.Start());
  EXPECT_EQ(Listed(socks[0]), 0u);
}

// The scheduler's permutation seed of `tenant` (0: it has none).
uint64_t SeedOf(hz::testing::ProviderHost& host, const std::string& tenant) {
  std::ifstream in(host.svc().dir() + "/scheduler.json");
  json state = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!state.is_object() || !state.contains("tenants")) return 0;
  const json& tenants = state["tenants"];
  if (!tenants.contains(tenant)) return 0;
  return tenants[tenant].value("seed", uint64_t{0});
}

// Whether anything in `list` (a JSON array of objects) belongs to `tenant`.
bool AnyOf(const json& list, const std::string& tenant) {
  for (const json& e : list) {
    if (e.value("tenant", std::string()) == tenant) return true;
  }
  return false;
}

TEST(ServiceTenantRemove, DevicesAndReservationsNeedPurgeAndANewTenantGetsAFreshSeed) {
  hz::testing::ProviderHost host;
  ASSERT_TRUE(host.Start());
  std::vector<std::string> socks = host.svc().TenantWithVms("t", 1);
  ASSERT_EQ(socks.size(), 1u);
  json r = host.Control({{"cmd", "alloc"}, {"tenant", "t"}, {"gpus", 2}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  const uint64_t old_seed = SeedOf(host, "t");
  ASSERT_NE(old_seed, 0u);
  // A reservation of one more GPU, starting in ten minutes.
  hz_device_t* dev = hz::testing::OpenVm(socks[0]);
  ASSERT_NE(dev, nullptr);
  hz_neg_request req{};
  req.kind = HZ_DEV_GPU;
  req.count = 1;
  req.locality = HZ_LOC_ANY;
  req.earliest_start_s = hz::testing::UnixNow() + 600;
  req.latest_start_s = req.earliest_start_s + 60;
  req.duration_s = 60;
  hz_negotiation n{};
  ASSERT_EQ(hz_neg_start(dev, &req, &n), HZ_OK);
  ASSERT_GE(n.num_offers, 1u);
  uint64_t reservation = 0;
  ASSERT_EQ(hz_neg_accept(dev, n.offers[0].offer_id, &reservation), HZ_OK);
  hz_close(dev);
  ASSERT_TRUE(host.Control({{"cmd", "vm.unbind"}, {"socket", socks[0]}}).value("ok", false));

  // Without --purge the tenant keeps its devices and its reservation.
  std::string out;
  EXPECT_EQ(host.svc().Hzctl(HZ_HZCTL_PATH, "tenant remove t", &out), 1) << out;
  EXPECT_NE(out.find("1 device allocation"), std::string::npos) << out;
  EXPECT_NE(out.find("1 reservation"), std::string::npos) << out;
  EXPECT_NE(out.find("--purge"), std::string::npos) << out;
  EXPECT_FALSE(host.DevicesOf("t").empty());

  // With it, both are released and the seed is forgotten.
  EXPECT_EQ(host.svc().Hzctl(HZ_HZCTL_PATH, "tenant remove t --purge", &out), 0) << out;
  EXPECT_TRUE(host.DevicesOf("t").empty());
  r = host.Control({{"cmd", "negotiation.list"}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  EXPECT_FALSE(AnyOf(r["result"]["reservations"], "t")) << r.dump();
  EXPECT_FALSE(AnyOf(r["result"]["offers"], "t")) << r.dump();
  EXPECT_EQ(SeedOf(host, "t"), 0u);

  // A new tenant of the name draws a seed of its own.
  ASSERT_EQ(host.svc().TenantWithVms("t", 1).size(), 1u);
  r = host.Control({{"cmd", "alloc"}, {"tenant", "t"}, {"gpus", 2}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  EXPECT_NE(SeedOf(host, "t"), 0u);
  EXPECT_NE(SeedOf(host, "t"), old_seed);
}

}  // namespace
