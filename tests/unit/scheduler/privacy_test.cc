// Privacy of everything a tenant sees: topology summaries and events carry no
// physical identifier and nothing about other tenants.
//
// Two checks: (1) every tenant-visible byte string is scanned for every
// identifier found in the fixture trees (PCI addresses of devices and
// switches, in text and binary encodings; serials; MAC addresses; host names;
// vendor:device ids); (2) the same workload on two isomorphic machines whose
// identifiers all differ (hgx8 and hgx8-relabeled) must give byte-identical
// transcripts, so no identifier can influence a tenant-visible byte.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <regex>
#include <set>

#include "hz/scheduler/scheduler.h"
#include "test_util.h"

namespace hz::scheduler {
namespace {

namespace fs = std::filesystem;
using testing::Fixture;
using testing::FixtureSysfs;
using testing::FixtureToml;
using testing::ReadText;
using testing::RecordingSink;
using testing::TempDir;

using Bytes = std::vector<uint8_t>;

class NullAttacher : public DomainAttacher {
 public:
  Status Attach(const std::string&, const std::string&) override { return Status::Ok(); }
  Status Detach(const std::string&, const std::string&) override { return Status::Ok(); }
};

void AddLe(std::set<Bytes>* out, uint64_t v, int bytes) {
  Bytes b;
  for (int i = 0; i < bytes; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  out->insert(b);
}

void AddText(std::set<Bytes>* out, const std::string& s) {
  out->insert(Bytes(s.begin(), s.end()));
}

// Every identifier of a fixture, as the byte strings that would reveal it.
std::set<Bytes> Identifiers(const std::string& fixture) {
  std::set<Bytes> ids;
  const std::string root = FixtureSysfs(fixture);
  for (const auto& e : fs::directory_iterator(root + "/bus/pci/devices")) {
    const std::string bdf = e.path().filename().string();
    // The host's own platform devices (buses below 0x10: chipset, BMC,
    // management NIC) are outside every tenant's reach; their two-byte
    // encodings would collide with small counts.
    if (std::stoul(bdf.substr(5, 2), nullptr, 16) < 0x10) continue;
    AddText(&ids, bdf);
    AddText(&ids, bdf.substr(5));  // "bb:dd.f"
    const uint32_t bus = std::stoul(bdf.substr(5, 2), nullptr, 16);
    const uint32_t dev = std::stoul(bdf.substr(8, 2), nullptr, 16);
    const uint32_t fn = std::stoul(bdf.substr(11, 1), nullptr, 16);
    const uint32_t rid = bus << 8 | dev << 3 | fn;  // PCIe requester id
    AddLe(&ids, rid, 2);
    AddLe(&ids, rid, 4);
    const std::string vendor = ReadText(e.path().string() + "/vendor").substr(2, 4);
    const std::string device = ReadText(e.path().string() + "/device").substr(2, 4);
    AddText(&ids, vendor + ":" + device);
    const fs::path net = fs::path(e.path()) / "net";
    if (fs::exists(net)) {
      for (const auto& n : fs::directory_iterator(net)) {
        std::string mac = ReadText((n.path() / "address").string());
        mac.erase(mac.find_last_not_of('\n') + 1);
        AddText(&ids, mac);
        AddText(&ids, n.path().filename().string());
        Bytes raw;  // the MAC as 6 raw bytes
        for (size_t i = 0; i < mac.size(); i += 3) {
          raw.push_back(static_cast<uint8_t>(std::stoul(mac.substr(i, 2), nullptr, 16)));
        }
        ids.insert(raw);
      }
    }
  }
  // Serials and the host name from the provider file.
  const std::string toml = ReadText(FixtureToml(fixture));
  std::regex quoted("\"([^\"]+)\"");
  for (auto it = std::sregex_iterator(toml.begin(), toml.end(), quoted);
       it != std::sregex_iterator(); ++it) {
    const std::string v = (*it)[1];
    AddText(&ids, v);
    if (!v.empty() && std::all_of(v.begin(), v.end(), ::isdigit)) AddLe(&ids, std::stoull(v), 8);
  }
  return ids;
}

bool Contains(const Bytes& hay, const Bytes& needle) {
  return !needle.empty() &&
         std::search(hay.begin(), hay.end(), needle.begin(), needle.end()) != hay.end();
}

// Runs a random workload of allocations, releases, failures and repairs and
// returns every tenant-visible output in order.
std::vector<Bytes> Transcript(const std::string& fixture, uint64_t workload_seed) {
  TempDir dir;
  SchedulerOptions o;
  o.sysfs_root = FixtureSysfs(fixture);
  o.provider_file = FixtureToml(fixture);
  o.state_path = dir.path() + "/state.json";
  o.bind_vfio = false;
  o.sync = false;
  // Fixed per-tenant seeds, so runs on two machines can be compared.
  o.tenant_seed = [workload_seed](const TenantId& tenant) {
    return std::hash<std::string>()(tenant.name()) ^ (workload_seed * 0x9e3779b97f4a7c15ull);
  };
  NullAttacher attacher;
  RecordingSink sink;
  std::unique_ptr<Scheduler> s;
  EXPECT_TRUE(Scheduler::Open(o, &attacher, &sink, &s).ok());
  const int tenants = 4;
  for (int t = 0; t < tenants; ++t) {
    EXPECT_TRUE(
        s->BindTenant(TenantId("tenant" + std::to_string(t)), "vm" + std::to_string(t)).ok());
  }
  std::mt19937_64 rng(workload_seed);
  std::vector<std::pair<uint64_t, TenantId>> live;
  std::vector<Bytes> out;
  for (int step = 0; step < 60; ++step) {
    const TenantId tenant("tenant" + std::to_string(rng() % tenants));
    const int op = static_cast<int>(rng() % 10);
    if (op < 5) {
      Request r{static_cast<uint32_t>(rng() % 5), static_cast<uint32_t>(rng() % 3),
                static_cast<hz_locality>(rng() % 3)};
      if (r.gpus + r.nics == 0) r.gpus = 1;
      uint64_t id = 0;
      Status st = s->Allocate(tenant, r, &id);
      out.push_back(Bytes{static_cast<uint8_t>(st.code())});
      if (st.ok()) live.push_back({id, tenant});
    } else if (op < 7 && !live.empty()) {
      const size_t k = rng() % live.size();
      // An allocation whose devices all failed is gone already.
      Status st = s->Release(live[k].first);
      EXPECT_TRUE(st.ok() || st.code() == StatusCode::kNotFound) << st.ToString();
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (op < 9) {
      // Fail the tenant's device at a random tenant-visible index.
      TopologySummary sum;
      EXPECT_TRUE(s->Summary(tenant, &sum).ok());
      if (!sum.devices.empty()) {
        const DeviceRef d = sum.devices[rng() % sum.devices.size()];
        Status st = s->MarkFailed(s->cluster().device(d).bdf, rng() % 8).status();
        EXPECT_TRUE(st.ok()) << st.ToString();
      }
    } else {
      for (const auto& d : s->Inventory()) {
        if (d["state"] == "failed") {
          EXPECT_TRUE(s->Repair(d["bdf"].get<std::string>()).ok());
        }
      }
    }
    for (int t = 0; t < tenants; ++t) {
      TopologySummary sum;
      EXPECT_TRUE(s->Summary(TenantId("tenant" + std::to_string(t)), &sum).ok());
      out.push_back(sum.bytes);
    }
  }
  for (const auto& e : sink.events) {
    Bytes b{static_cast<uint8_t>(e.spec.topic), static_cast<uint8_t>(e.spec.kind),
            static_cast<uint8_t>(e.tenant.name().back() - '0')};
    b.insert(b.end(), e.spec.payload.begin(), e.spec.payload.end());
    out.push_back(b);
  }
  return out;
}

TEST(SchedulerPrivacy, NoIdentifierInAnyTenantVisibleOutput) {
  size_t scanned = 0;
  for (const std::string fixture : {"hgx8", "hgx8-relabeled", "ws4"}) {
    const std::set<Bytes> ids = Identifiers(fixture);
    ASSERT_GT(ids.size(), 50u) << fixture;
    for (uint64_t seed = 1; seed <= 12; ++seed) {
      for (const Bytes& out : Transcript(fixture, seed)) {
        for (const Bytes& id : ids) {
          // Two-byte binary patterns are short; still, summaries and events
          // of these fixtures must not contain them.
          ASSERT_FALSE(Contains(out, id))
              << fixture << " seed " << seed << ": output reveals an identifier of " << id.size()
              << " bytes";
        }
        ++scanned;
      }
    }
  }
  EXPECT_GT(scanned, 3000u);
}

TEST(SchedulerPrivacy, IsomorphicMachinesGiveIdenticalTranscripts) {
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    std::vector<Bytes> a = Transcript("hgx8", seed);
    std::vector<Bytes> b = Transcript("hgx8-relabeled", seed);
    ASSERT_EQ(a.size(), b.size()) << "seed " << seed;
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(a[i], b[i]) << "seed " << seed << " output " << i;
  }
}

TEST(SchedulerPrivacy, OtherTenantsDoNotChangeASummary) {
  TempDir dir;
  SchedulerOptions o;
  o.sysfs_root = FixtureSysfs("hgx8");
  o.provider_file = FixtureToml("hgx8");
  o.state_path = dir.path() + "/state.json";
  o.bind_vfio = false;
  o.sync = false;
  NullAttacher attacher;
  std::unique_ptr<Scheduler> s;
  ASSERT_TRUE(Scheduler::Open(o, &attacher, nullptr, &s).ok());
  ASSERT_TRUE(s->BindTenant(TenantId("a"), "vm-a").ok());
  ASSERT_TRUE(s->BindTenant(TenantId("b"), "vm-b").ok());
  uint64_t ida = 0, idb = 0;
  ASSERT_TRUE(s->Allocate(TenantId("a"), {2, 1, HZ_LOC_SAME_GROUP}, &ida).ok());
  TopologySummary before, after, b_sum;
  ASSERT_TRUE(s->Summary(TenantId("a"), &before).ok());
  ASSERT_TRUE(s->Allocate(TenantId("b"), {6, 7, HZ_LOC_ANY}, &idb).ok());
  ASSERT_TRUE(s->Summary(TenantId("a"), &after).ok());
  EXPECT_EQ(before.bytes, after.bytes);
  EXPECT_EQ(before.devices, after.devices);
  ASSERT_TRUE(s->Summary(TenantId("b"), &b_sum).ok());
  SummaryView v;
  ASSERT_TRUE(ParseTopologySummary(b_sum.bytes, &v).ok());
  EXPECT_EQ(v.header.num_devices, 13);  // only b's own devices
  ASSERT_TRUE(s->Release(idb).ok());
  ASSERT_TRUE(s->Summary(TenantId("a"), &after).ok());
  EXPECT_EQ(before.bytes, after.bytes);
  // A tenant with nothing sees an empty summary, not anyone else's.
  TopologySummary none;
  ASSERT_TRUE(s->Summary(TenantId("c"), &none).ok());
  EXPECT_EQ(none.bytes.size(), 16u);
}

}  // namespace
}  // namespace hz::scheduler
