// The scheduler in harmonaized, end to end: the operator allocates through
// hzctl and the control API, the tenant reads its private topology summary
// with hz_topology_get, and device failures (operator or health monitor)
// reach the tenant as FAILURE events naming only a tenant-visible index,
// followed by a replacement offer it can accept.
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harmonaize/hz.h"
#include "provider_host.h"

namespace {

using hz::testing::NextEventOf;
using hz::testing::OpenVm;
using hz::testing::PayloadAt;
using json = nlohmann::json;

class ServiceEngineTopology : public hz::testing::TwoTenantHostTest {
 protected:
  // The summary's bytes exactly as the device returned them.
  static std::vector<uint8_t> Bytes(const hz_topology* t) {
    const size_t n = sizeof(hz_topo_header) + t->header.num_groups * sizeof(hz_topo_group) +
                     t->header.num_devices * sizeof(hz_topo_device);
    std::vector<uint8_t> out(n);
    std::memcpy(out.data(), &t->header, sizeof(hz_topo_header));
    std::memcpy(out.data() + sizeof(hz_topo_header), t->groups,
                t->header.num_groups * sizeof(hz_topo_group));
    std::memcpy(out.data() + sizeof(hz_topo_header) + t->header.num_groups * sizeof(hz_topo_group),
                t->devices, t->header.num_devices * sizeof(hz_topo_device));
    return out;
  }
};

TEST_F(ServiceEngineTopology, HelloGrantsTheProviderFeatures) {
  hz_device_t* d = OpenVm(socks_a_[0]);
  ASSERT_NE(d, nullptr);
  hz_device_info info;
  ASSERT_EQ(hz_device_get_info(d, &info), HZ_OK);
  EXPECT_TRUE(info.features & (1ull << HZ_F_TOPOLOGY));
  EXPECT_TRUE(info.features & (1ull << HZ_F_NEGOTIATION));
  EXPECT_TRUE(info.features & (1ull << HZ_F_HINTS));
  hz_close(d);
}

TEST_F(ServiceEngineTopology, InventoryShowsTheFixtureHost) {
  int rc = -1;
  json inv = host_.Hzctl("inventory", &rc);
  ASSERT_EQ(rc, 0);
  ASSERT_TRUE(inv.value("ok", false)) << inv.dump();
  int gpus = 0, nics = 0;
  for (const json& d : inv["result"]) {
    EXPECT_EQ(d.value("state", std::string()), "free") << d.dump();
    gpus += d.value("kind", std::string()) == "gpu";
    nics += d.value("kind", std::string()) == "nic";
  }
  EXPECT_EQ(gpus, 8);
  EXPECT_EQ(nics, 8);  // the management NIC is excluded by the provider file
}

TEST_F(ServiceEngineTopology, SummaryOfAnAllocationMadeThroughHzctl) {
  hz_device_t* a = OpenVm(socks_a_[0]);
  ASSERT_NE(a, nullptr);
  hz_topology* t = nullptr;
  ASSERT_EQ(hz_topology_get(a, &t), HZ_OK);
  EXPECT_EQ(t->header.version, 1u);
  EXPECT_EQ(t->header.num_devices, 0u);  // nothing allocated yet
  hz_topology_free(t);

  int rc = -1;
  json r = host_.Hzctl("alloc --tenant ta --gpus 4 --nics 4 --locality group", &rc);
  ASSERT_EQ(rc, 0) << r.dump();
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  EXPECT_EQ(r["result"]["devices"].size(), 8u);
  // A second tenant's allocation through the control API.
  r = host_.Control({{"cmd", "alloc"}, {"tenant", "tb"}, {"gpus", 2}, {"nics", 0}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();

  ASSERT_EQ(hz_topology_get(a, &t), HZ_OK);
  ASSERT_EQ(t->header.num_devices, 8u);
  EXPECT_EQ(t->header.num_hosts, 1u);
  EXPECT_EQ(t->header.reserved, 0u);
  uint32_t gpus = 0, nics = 0;
  for (uint16_t g = 0; g < t->header.num_groups; ++g) {
    EXPECT_EQ(t->groups[g].group, g);
    EXPECT_EQ(t->groups[g].host, 0u);
    gpus += t->groups[g].gpus;
    nics += t->groups[g].nics;
  }
  EXPECT_EQ(gpus, 4u);
  EXPECT_EQ(nics, 4u);
  // One locality group was asked for: every device shares it.
  EXPECT_EQ(t->header.num_groups, 1u);
  // Indices are positions; within a group GPUs come before NICs.
  for (uint16_t i = 0; i < t->header.num_devices; ++i) {
    EXPECT_EQ(t->devices[i].index, i);
    EXPECT_EQ(t->devices[i].kind, i < 4 ? HZ_DEV_GPU : HZ_DEV_NIC);
    EXPECT_EQ(t->devices[i].reserved, 0u);
    EXPECT_EQ(t->devices[i].reserved2, 0u);
    EXPECT_LT(t->devices[i].group, t->header.num_groups);
  }

  // No identifier of the fixture host reaches the tenant: every PCI address,
  // serial and the host name, as text and (PCI addresses) as binary.
  const std::vector<uint8_t> bytes = Bytes(t);
  const std::string text(bytes.begin(), bytes.end());
  std::ifstream toml(host_.inventory_toml());
  std::stringstream ss;
  ss << toml.rdbuf();
  std::set<std::string> ids;
  const std::string tomltext = ss.str();
  std::regex quoted("\"([^\"]{4,})\"");
  for (auto it = std::sregex_iterator(tomltext.begin(), tomltext.end(), quoted);
       it != std::sregex_iterator(); ++it) {
    ids.insert((*it)[1]);
  }
  json inv = host_.Control({{"cmd", "inventory"}});
  for (const json& d : inv["result"]) ids.insert(d.value("bdf", std::string()));
  ASSERT_GT(ids.size(), 16u);
  EXPECT_TRUE(ids.count("hgx-a17-r04"));
  for (const std::string& id : ids) {
    EXPECT_EQ(text.find(id), std::string::npos) << id;
    unsigned dom, bus, dev, fn;
    if (std::sscanf(id.c_str(), "%x:%x:%x.%x", &dom, &bus, &dev, &fn) == 4) {
      const uint8_t bin[2] = {static_cast<uint8_t>(bus), static_cast<uint8_t>((dev << 3) | fn)};
      // Bus numbers of the fixture are >= 0x1a, so a two-byte match would
      // be a leak of the routing id, not a small count.
      if (bus >= 0x10) {
        EXPECT_EQ(text.find(std::string(reinterpret_cast<const char*>(bin), 2)), std::string::npos)
            << id;
      }
    }
  }
  hz_topology_free(t);

  // The other tenant sees only its own two GPUs.
  hz_device_t* b = OpenVm(socks_b_[0]);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(hz_topology_get(b, &t), HZ_OK);
  EXPECT_EQ(t->header.num_devices, 2u);
  hz_topology_free(t);

  // The operator view names the owners; released devices are free again.
  json allocs = host_.Hzctl("allocations", &rc);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(allocs["result"].size(), 2u);
  uint64_t ta_id = 0;
  for (const json& al : allocs["result"]) {
    if (al["tenant"] == "ta") ta_id = al["id"].get<uint64_t>();
  }
  ASSERT_NE(ta_id, 0u);
  r = host_.Hzctl("release " + std::to_string(ta_id), &rc);
  ASSERT_EQ(rc, 0) << r.dump();
  ASSERT_EQ(hz_topology_get(a, &t), HZ_OK);
  EXPECT_EQ(t->header.num_devices, 0u);
  hz_topology_free(t);
  hz_close(a);
  hz_close(b);
}

TEST_F(ServiceEngineTopology, OperatorRejectsBadAllocations) {
  int rc = -1;
  json r = host_.Hzctl("alloc --tenant nobody --gpus 1", &rc);
  EXPECT_EQ(rc, 1);
  EXPECT_FALSE(r.value("ok", true));
  r = host_.Control({{"cmd", "alloc"}, {"tenant", "ta"}, {"gpus", 9}});
  EXPECT_FALSE(r.value("ok", true)) << "only 8 GPUs exist";
  r = host_.Control({{"cmd", "alloc"}, {"tenant", "ta"}, {"gpus", 0}, {"nics", 0}});
  EXPECT_FALSE(r.value("ok", true));
  r = host_.Control({{"cmd", "alloc"}, {"tenant", "ta"}, {"gpus", -1}});
  EXPECT_FALSE(r.value("ok", true));
  r = host_.Control({{"cmd", "alloc"}, {"tenant", "ta"}, {"gpus", 1}, {"locality", "moon"}});
  EXPECT_FALSE(r.value("ok", true));
  r = host_.Control({{"cmd", "alloc"}, {"tenant", "ta"}, {"gpus", 1}, {"bogus", 1}});
  EXPECT_FALSE(r.value("ok", true));
  r = host_.Control({{"cmd", "release"}, {"allocation", 12345}});
  EXPECT_FALSE(r.value("ok", true));
  r = host_.Control({{"cmd", "device.fail"}, {"bdf", "not-a-bdf"}});
  EXPECT_FALSE(r.value("ok", true));
  r = host_.Control({{"cmd", "device.repair"}, {"bdf", "0000:ff:1f.7"}});
  EXPECT_FALSE(r.value("ok", true));
  // The failed attempts left nothing behind.
  EXPECT_TRUE(host_.Control({{"cmd", "allocation.list"}})["result"].empty());
  // A tenant bound to a libvirt domain keeps it (no libvirt: nothing attached).
  r = host_.Hzctl("tenant domain ta --domain vm-ta", &rc);
  EXPECT_EQ(rc, 0) << r.dump();
  r = host_.Hzctl("tenant domain nobody --domain vm-x", &rc);
  EXPECT_EQ(rc, 1);
}

TEST_F(ServiceEngineTopology, FailedDeviceIsReportedByIndexAndDetached) {
  hz_device_t* a = OpenVm(socks_a_[0]);
  hz_device_t* b = OpenVm(socks_b_[0]);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(hz_event_subscribe(a, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  ASSERT_EQ(hz_event_subscribe(b, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  json r = host_.Control({{"cmd", "alloc"}, {"tenant", "ta"}, {"gpus", 4}, {"nics", 0}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  const std::string lost = r["result"]["devices"][0].get<std::string>();

  int rc = -1;
  r = host_.Hzctl("device fail " + lost, &rc);
  ASSERT_EQ(rc, 0) << r.dump();
  hz_event ev{};
  ASSERT_TRUE(NextEventOf(a, HZ_TOPIC_FAILURE, 0 /* DEVICE_FAILED */, &ev));
  EXPECT_LT(PayloadAt<uint32_t>(ev, 0), 4u);  // a tenant-visible index
  const std::string payload(reinterpret_cast<const char*>(ev.payload), sizeof(ev.payload));
  EXPECT_EQ(payload.find(lost), std::string::npos);
  hz_topology* t = nullptr;
  ASSERT_EQ(hz_topology_get(a, &t), HZ_OK);
  EXPECT_EQ(t->header.num_devices, 3u);
  hz_topology_free(t);
  // The tenant never saw anything of this on b.
  EXPECT_EQ(hz_event_next(b, &ev, 200), HZ_ETIMEDOUT);
  json inv = host_.Control({{"cmd", "inventory"}});
  bool failed = false;
  for (const json& d : inv["result"]) {
    if (d["bdf"] == lost) failed = d["state"] == "failed";
  }
  EXPECT_TRUE(failed);
  r = host_.Hzctl("device repair " + lost, &rc);
  EXPECT_EQ(rc, 0) << r.dump();
  inv = host_.Control({{"cmd", "inventory"}});
  for (const json& d : inv["result"]) {
    if (d["bdf"] == lost) {
      EXPECT_EQ(d["state"], "free");
    }
  }
  hz_close(a);
  hz_close(b);
}

// Known gap: the replacement offer (NEGOTIATION/OFFER_MADE) for a device of
// an operator allocation does not reach the tenant yet.
TEST_F(ServiceEngineTopology, FailedDeviceGetsAReplacementOffer) {
  hz_device_t* a = OpenVm(socks_a_[0]);
  hz_device_t* b = OpenVm(socks_b_[0]);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(hz_event_subscribe(a, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  ASSERT_EQ(hz_event_subscribe(b, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  json r = host_.Control({{"cmd", "alloc"}, {"tenant", "ta"}, {"gpus", 4}, {"nics", 0}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  const std::string lost = r["result"]["devices"][0].get<std::string>();
  int rc = -1;
  r = host_.Hzctl("device fail " + lost, &rc);
  ASSERT_EQ(rc, 0) << r.dump();
  hz_event ev{};
  // The replacement offer, on the tenant's behalf.
  ASSERT_TRUE(NextEventOf(a, HZ_TOPIC_NEGOTIATION, 3 /* OFFER_MADE */, &ev));
  const uint64_t offer = PayloadAt<uint64_t>(ev, 16);
  EXPECT_EQ(PayloadAt<uint16_t>(ev, 56), 1u);
  EXPECT_EQ(PayloadAt<uint8_t>(ev, 59), HZ_DEV_GPU);
  hz_topology* t = nullptr;
  ASSERT_EQ(hz_topology_get(a, &t), HZ_OK);
  EXPECT_EQ(t->header.num_devices, 3u);
  hz_topology_free(t);
  // The other tenant cannot take it, the owner can.
  uint64_t rid = 0;
  EXPECT_EQ(hz_neg_accept(b, offer, &rid), HZ_EPERM);
  ASSERT_EQ(hz_neg_accept(a, offer, &rid), HZ_OK);
  ASSERT_TRUE(NextEventOf(a, HZ_TOPIC_CAPACITY, 1 /* RESERVATION_STARTED */, &ev));
  EXPECT_EQ(PayloadAt<uint64_t>(ev, 0), rid);
  ASSERT_EQ(hz_topology_get(a, &t), HZ_OK);
  EXPECT_EQ(t->header.num_devices, 4u);
  hz_topology_free(t);
  // The tenant never saw anything of this on b.
  EXPECT_EQ(hz_event_next(b, &ev, 200), HZ_ETIMEDOUT);

  json inv = host_.Control({{"cmd", "inventory"}});
  bool failed = false;
  for (const json& d : inv["result"]) {
    if (d["bdf"] == lost) failed = d["state"] == "failed";
  }
  EXPECT_TRUE(failed);
  r = host_.Hzctl("device repair " + lost, &rc);
  EXPECT_EQ(rc, 0) << r.dump();
  inv = host_.Control({{"cmd", "inventory"}});
  for (const json& d : inv["result"]) {
    if (d["bdf"] == lost) {
      EXPECT_EQ(d["state"], "free");
    }
  }
  hz_close(a);
  hz_close(b);
}

TEST_F(ServiceEngineTopology, HealthMonitorReportsFatalAerErrors) {
  host_.ZeroAllAer();
  hz_device_t* a = OpenVm(socks_a_[0]);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(hz_event_subscribe(a, HZ_TOPIC_ALL, HZ_SEQ_CURSOR), HZ_OK);
  json r = host_.Control({{"cmd", "alloc"}, {"tenant", "ta"}, {"gpus", 2}, {"nics", 0}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  const std::string bad = r["result"]["devices"][1].get<std::string>();
  // The monitor takes its baseline when the device is assigned (at the next
  // poll); wait until the service says it watches both devices.
  for (int i = 0; i < 1000; ++i) {
    json c = host_.Control({{"cmd", "counters"}});
    if (c["result"]["provider"].value("assigned_devices", 0) == 2 &&
        c["result"]["provider"].value("health_polls", 0) > 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  host_.SetFatalErrors(bad, 3);
  hz_event ev{};
  ASSERT_TRUE(NextEventOf(a, HZ_TOPIC_FAILURE, 0 /* DEVICE_FAILED */, &ev));
  EXPECT_LT(PayloadAt<uint32_t>(ev, 0), 2u);
  // The scheduler took the device away.
  ASSERT_TRUE(host_.WaitUntilDevicesOf("ta", 1));
  std::vector<std::string> left = host_.DevicesOf("ta");
  ASSERT_EQ(left.size(), 1u);
  EXPECT_NE(left[0], bad);
  hz_close(a);
}

}  // namespace
