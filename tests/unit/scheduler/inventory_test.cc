// Discovery from sysfs fixture trees and the provider inventory file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "hz/scheduler/inventory.h"
#include "test_util.h"

namespace hz::scheduler {
namespace {

namespace fs = std::filesystem;
using testing::CopyFixtureSysfs;
using testing::FixtureSysfs;
using testing::FixtureToml;
using testing::LoadFixture;
using testing::TempDir;

TEST(SchedulerInventory, Hgx8SysfsAloneFindsEveryGpuAndNic) {
  HostInventory inv;
  Status s = DiscoverPci(FixtureSysfs("hgx8"), &inv);
  ASSERT_TRUE(s.ok()) << s.ToString();
  // 8 H100 (3D controllers), 8 InfiniBand NICs and the management Ethernet
  // NIC; the BMC's VGA (ASPEED) and the NVMe drive are not candidates.
  EXPECT_EQ(inv.Count(DeviceKind::kGpu), 8u);
  EXPECT_EQ(inv.Count(DeviceKind::kNic), 9u);
  EXPECT_EQ(inv.Find("0000:02:00.0"), -1);
  EXPECT_GE(inv.Find("0000:03:00.0"), 0);
  EXPECT_TRUE(std::is_sorted(inv.devices.begin(), inv.devices.end(),
                             [](const Device& a, const Device& b) { return a.bdf < b.bdf; }));
}

TEST(SchedulerInventory, Hgx8Topology) {
  HostInventory inv = LoadFixture("hgx8");
  EXPECT_EQ(inv.name, "hgx-a17-r04");
  ASSERT_EQ(inv.Count(DeviceKind::kGpu), 8u);
  ASSERT_EQ(inv.Count(DeviceKind::kNic), 8u);             // management NIC excluded
  std::map<std::string, std::pair<int, int>> per_switch;  // gpus, nics
  std::map<int, std::set<std::string>> switches_per_node;
  std::set<int> groups;
  for (const Device& d : inv.devices) {
    ASSERT_FALSE(d.switch_bdf.empty()) << d.bdf;
    ASSERT_EQ(d.pcie_path.size(), 3u) << d.bdf;  // root port, switch up, switch down
    EXPECT_EQ(d.pcie_path[1], d.switch_bdf);
    EXPECT_DOUBLE_EQ(d.link_gts, 32.0);
    EXPECT_EQ(d.link_width, 16u);
    EXPECT_GE(d.iommu_group, 0);
    EXPECT_TRUE(groups.insert(d.iommu_group).second) << "shared IOMMU group " << d.bdf;
    EXPECT_GE(d.rail, 0);
    EXPECT_FALSE(d.serial.empty());
    if (d.kind == DeviceKind::kGpu) {
      EXPECT_EQ(d.vendor, 0x10de);
      EXPECT_EQ(d.pci_class >> 8, 0x0302u);
      EXPECT_EQ(d.driver, "nvidia");
      EXPECT_GE(d.island, 0);
      per_switch[d.switch_bdf].first++;
    } else {
      EXPECT_EQ(d.pci_class >> 8, 0x0207u);
      EXPECT_EQ(d.driver, "mlx5_core");
      EXPECT_EQ(d.island, -1);
      per_switch[d.switch_bdf].second++;
    }
    switches_per_node[d.numa_node].insert(d.switch_bdf);
  }
  ASSERT_EQ(per_switch.size(), 4u);
  for (const auto& [sw, counts] : per_switch) {
    EXPECT_EQ(counts.first, 2) << sw;
    EXPECT_EQ(counts.second, 2) << sw;
  }
  ASSERT_EQ(switches_per_node.size(), 2u);
  EXPECT_EQ(switches_per_node[0].size(), 2u);
  EXPECT_EQ(switches_per_node[1].size(), 2u);
  ASSERT_EQ(inv.islands.size(), 2u);
  for (const auto& island : inv.islands) {
    EXPECT_EQ(island.size(), 4u);
    // An island spans the two switches of one NUMA node.
    std::set<std::string> sws;
    std::set<int> nodes;
    for (int i : island) {
      sws.insert(inv.devices[i].switch_bdf);
      nodes.insert(inv.devices[i].numa_node);
    }
    EXPECT_EQ(sws.size(), 2u);
    EXPECT_EQ(nodes.size(), 1u);
  }
  // The rail-aligned NIC of each GPU sits under the GPU's switch.
  for (const Device& g : inv.devices) {
    if (g.kind != DeviceKind::kGpu) continue;
    int matches = 0;
    for (const Device& n : inv.devices) {
      if (n.kind == DeviceKind::kNic && n.rail == g.rail) {
        ++matches;
        EXPECT_EQ(n.switch_bdf, g.switch_bdf);
      }
    }
    EXPECT_EQ(matches, 1) << g.bdf;
  }
}

TEST(SchedulerInventory, Ws4Topology) {
  HostInventory inv = LoadFixture("ws4");
  EXPECT_EQ(inv.Count(DeviceKind::kGpu), 4u);
  EXPECT_EQ(inv.Count(DeviceKind::kNic), 2u);
  ASSERT_EQ(inv.islands.size(), 2u);
  for (const Device& d : inv.devices) {
    EXPECT_TRUE(d.switch_bdf.empty()) << d.bdf;  // straight on root ports
    EXPECT_EQ(d.pcie_path.size(), 1u);
    EXPECT_EQ(d.numa_node, -1);
    if (d.kind == DeviceKind::kGpu) {
      EXPECT_EQ(d.pci_class >> 8, 0x0300u);  // VGA controllers
      EXPECT_DOUBLE_EQ(d.link_gts, 16.0);
    }
  }
  // The two NIC ports share one IOMMU group; the GPUs' audio functions are
  // not passthrough candidates themselves.
  EXPECT_EQ(inv.devices[inv.Find("0000:b3:00.0")].iommu_group,
            inv.devices[inv.Find("0000:b3:00.1")].iommu_group);
  EXPECT_EQ(inv.Find("0000:17:00.1"), -1);
}

TEST(SchedulerInventory, ClassifiesVendorsAndClasses) {
  EXPECT_TRUE(IsGpu(0x10de, 0x030200));
  EXPECT_TRUE(IsGpu(0x1002, 0x030000));
  EXPECT_TRUE(IsGpu(0x10de, 0x030000));
  EXPECT_FALSE(IsGpu(0x1a03, 0x030000));  // BMC VGA
  EXPECT_FALSE(IsGpu(0x10de, 0x040300));  // HDMI audio
  EXPECT_TRUE(IsNic(0x020000));
  EXPECT_TRUE(IsNic(0x020700));
  EXPECT_FALSE(IsNic(0x010802));
  EXPECT_TRUE(IsBdf("0000:1a:00.0"));
  EXPECT_FALSE(IsBdf("0000:1A:00.0"));
  EXPECT_FALSE(IsBdf("0000:1a:20.0"));
  EXPECT_FALSE(IsBdf("0000:1a:00.8"));
  EXPECT_FALSE(IsBdf("../../etc"));
}

// Each malformed tree fails with a message naming the broken path.
class SchedulerInventoryMalformed : public ::testing::Test {
 protected:
  void SetUp() override { root_ = CopyFixtureSysfs("hgx8", dir_.path()); }
  std::string Dev(const std::string& bdf) { return root_ + "/bus/pci/devices/" + bdf; }
  void Write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
  }
  void ExpectErrorNaming(const std::string& what) {
    HostInventory inv;
    Status s = DiscoverPci(root_, &inv);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find(what), std::string::npos) << s.ToString();
  }
  TempDir dir_;
  std::string root_;
};

TEST_F(SchedulerInventoryMalformed, GarbageClass) {
  Write(Dev("0000:1a:00.0") + "/class", "banana\n");
  ExpectErrorNaming("0000:1a:00.0/class");
}

TEST_F(SchedulerInventoryMalformed, OversizedClass) {
  Write(Dev("0000:1a:00.0") + "/class", "0x1030200\n");
  ExpectErrorNaming("0000:1a:00.0/class");
}

TEST_F(SchedulerInventoryMalformed, MissingClass) {
  fs::remove(Dev("0000:3b:00.0") + "/class");
  ExpectErrorNaming("0000:3b:00.0/class");
}

TEST_F(SchedulerInventoryMalformed, MissingVendor) {
  fs::remove(Dev("0000:3b:00.0") + "/vendor");
  ExpectErrorNaming("0000:3b:00.0/vendor");
}

TEST_F(SchedulerInventoryMalformed, DanglingDriverLink) {
  fs::remove_all(root_ + "/bus/pci/drivers/mlx5_core");
  ExpectErrorNaming("/driver");
}

TEST_F(SchedulerInventoryMalformed, DanglingIommuGroup) {
  std::string real = fs::canonical(Dev("0000:9a:00.0") + "/iommu_group").string();
  fs::remove_all(real);
  ExpectErrorNaming("0000:9a:00.0/iommu_group");
}

TEST_F(SchedulerInventoryMalformed, DanglingDeviceLink) {
  fs::remove_all(fs::canonical(Dev("0000:bb:00.0")));
  ExpectErrorNaming("0000:bb:00.0");
}

TEST_F(SchedulerInventoryMalformed, GarbageNumaNode) {
  Write(Dev("0000:1b:00.0") + "/numa_node", "zero\n");
  ExpectErrorNaming("0000:1b:00.0/numa_node");
}

TEST_F(SchedulerInventoryMalformed, GarbageLinkSpeed) {
  Write(Dev("0000:1b:00.0") + "/current_link_speed", "fast\n");
  ExpectErrorNaming("0000:1b:00.0/current_link_speed");
}

TEST_F(SchedulerInventoryMalformed, UnknownLinkSpeedIsAccepted) {
  Write(Dev("0000:1b:00.0") + "/current_link_speed", "Unknown\n");
  HostInventory inv;
  ASSERT_TRUE(DiscoverPci(root_, &inv).ok());
  EXPECT_EQ(inv.devices[inv.Find("0000:1b:00.0")].link_gts, 0);
}

TEST_F(SchedulerInventoryMalformed, MissingIommuGroupMeansNoIommu) {
  fs::remove(Dev("0000:1b:00.0") + "/iommu_group");
  HostInventory inv;
  ASSERT_TRUE(DiscoverPci(root_, &inv).ok());
  EXPECT_EQ(inv.devices[inv.Find("0000:1b:00.0")].iommu_group, -1);
}

TEST_F(SchedulerInventoryMalformed, StrayEntry) {
  Write(root_ + "/bus/pci/devices/README", "x");
  ExpectErrorNaming("README");
}

TEST(SchedulerInventory, MissingRoot) {
  HostInventory inv;
  Status s = DiscoverPci("/nonexistent/sysfs", &inv);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent/sysfs/bus/pci/devices"), std::string::npos);
}

TEST(SchedulerInventory, ProviderFileErrors) {
  HostInventory base;
  ASSERT_TRUE(DiscoverPci(FixtureSysfs("hgx8"), &base).ok());
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"host = ", "inv.toml"},
      {"nvlink_islands = [[\"0000:1a:00.0\", \"0000:77:00.0\"]]", "0000:77:00.0"},
      {"nvlink_islands = [[\"0000:1a:00.0\", \"0000:1c:00.0\"]]", "not a GPU"},
      {"nvlink_islands = [[\"0000:1a:00.0\", \"0000:1b:00.0\"], [\"0000:1a:00.0\", "
       "\"0000:3b:00.0\"]]",
       "two NVLink islands"},
      {"nvlink_islands = [[\"0000:1a:00.0\"]]", "two or more"},
      {"nvlink_islands = \"x\"", "list of lists"},
      {"[rails]\n\"0000:1c:00.0\" = -3", "0..1023"},
      {"[rails]\n\"0000:1c:00.0\" = \"a\"", "0..1023"},
      {"exclude = [\"0000:ff:00.0\"]", "0000:ff:00.0"},
      {"[serials]\n\"0000:1a:00.0\" = 5", "serial"},
      {"[kinds]\n\"1234:11E8\" = \"gpu\"", "vvvv:dddd"},
      {"[kinds]\n\"12:34\" = \"gpu\"", "vvvv:dddd"},
      {"[kinds]\n\"1234:11e8\" = \"tpu\"", "\"gpu\" or \"nic\""},
      {"kinds = 3", "kinds must be a table"},
  };
  for (const Case& c : cases) {
    HostInventory inv = base;
    Status s = ApplyProviderText(c.text, "inv.toml", &inv);
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << c.text << " -> " << s.ToString();
    EXPECT_EQ(inv.devices.size(), base.devices.size()) << "failed apply changed the inventory";
  }
  HostInventory inv = base;
  Status s = ApplyProviderFile("/nonexistent/inventory.toml", &inv);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent/inventory.toml"), std::string::npos);
}

// A host that is itself a VM: its virtio NIC is its own network, never a
// device for a tenant.
TEST_F(SchedulerInventoryMalformed, VirtioFunctionsAreNeverCandidates) {
  HostInventory before;
  ASSERT_TRUE(DiscoverPci(root_, &before).ok());
  Write(Dev("0000:1c:00.0") + "/vendor", "0x1af4\n");
  HostInventory after;
  Status s = DiscoverPci(root_, &after);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(after.devices.size() + 1, before.devices.size());
  for (const Device& d : after.devices) EXPECT_NE(d.bdf, "0000:1c:00.0");
}

// [kinds] names functions the class-code rules do not take: here the NVMe
// drive and the BMC's VGA of the hgx8 tree.
TEST(SchedulerInventory, ProviderKindsNameDevicesByPciId) {
  TempDir dir;
  const std::string toml = dir.path() + "/inventory.toml";
  std::ofstream(toml) << "[kinds]\n\"144d:a824\" = \"gpu\"\n\"1a03:2000\" = \"nic\"\n";
  HostInventory inv;
  ASSERT_TRUE(LoadHostInventory(FixtureSysfs("hgx8"), toml, &inv).ok());
  int nvme = inv.Find("0000:1e:00.0");
  int vga = inv.Find("0000:02:00.0");
  ASSERT_GE(nvme, 0);
  ASSERT_GE(vga, 0);
  EXPECT_EQ(inv.devices[nvme].kind, DeviceKind::kGpu);
  EXPECT_EQ(inv.devices[vga].kind, DeviceKind::kNic);
  EXPECT_EQ(inv.Count(DeviceKind::kGpu), 9u);
  EXPECT_EQ(inv.Count(DeviceKind::kNic), 10u);
}

// Config space with a PCIe capability of the given port type (4 root port,
// 5 upstream, 6 downstream, 7 PCIe-to-PCI bridge), as root reads it.
void WriteConfig(const std::string& dev, int port_type) {
  std::string cfg(256, '\0');
  cfg[0x06] = 0x10;  // capability list
  cfg[0x34] = 0x40;
  cfg[0x40] = 0x10;  // PCI Express
  cfg[0x42] = static_cast<char>(port_type << 4);
  std::ofstream(dev + "/config", std::ios::binary) << cfg;
}

// The switch is the deepest upstream port when the bridges' port types can
// be read; a PCIe-to-PCI bridge below it is not one.
TEST(SchedulerInventory, SwitchFromPortTypes) {
  TempDir dir;
  std::string root = CopyFixtureSysfs("hgx8", dir.path());
  auto dev = [&](const std::string& bdf) { return root + "/bus/pci/devices/" + bdf; };
  HostInventory inv;
  ASSERT_TRUE(DiscoverPci(root, &inv).ok());
  const Device& before = inv.devices[inv.Find("0000:1a:00.0")];
  ASSERT_EQ(before.pcie_path,
            (std::vector<std::string>{"0000:17:01.0", "0000:18:00.0", "0000:19:00.0"}));
  EXPECT_EQ(before.switch_bdf, "0000:18:00.0");  // the fixture's types: root, up, down
  // Without config space the two-levels rule finds the same switch.
  for (const char* bridge : {"0000:17:01.0", "0000:18:00.0", "0000:19:00.0"}) {
    ASSERT_TRUE(std::filesystem::remove(dev(bridge) + "/config"));
  }
  ASSERT_TRUE(DiscoverPci(root, &inv).ok());
  EXPECT_EQ(inv.devices[inv.Find("0000:1a:00.0")].switch_bdf, "0000:18:00.0");
  WriteConfig(dev("0000:17:01.0"), 5);
  WriteConfig(dev("0000:18:00.0"), 6);
  WriteConfig(dev("0000:19:00.0"), 7);
  ASSERT_TRUE(DiscoverPci(root, &inv).ok());
  EXPECT_EQ(inv.devices[inv.Find("0000:1a:00.0")].switch_bdf, "0000:17:01.0");
  WriteConfig(dev("0000:17:01.0"), 4);
  ASSERT_TRUE(DiscoverPci(root, &inv).ok());
  EXPECT_EQ(inv.devices[inv.Find("0000:1a:00.0")].switch_bdf, "") << "no upstream port, no switch";
  // A config file cut at 64 bytes (what others than root read): its
  // capability list points past the end, so the rule again.
  std::string head(64, '\0');
  head[0x06] = 0x10;
  head[0x34] = 0x40;
  std::ofstream(dev("0000:18:00.0") + "/config", std::ios::binary | std::ios::trunc) << head;
  ASSERT_TRUE(DiscoverPci(root, &inv).ok());
  EXPECT_EQ(inv.devices[inv.Find("0000:1a:00.0")].switch_bdf, "0000:18:00.0");
}

}  // namespace
}  // namespace hz::scheduler
