// vfio-pci binding on fixture trees whose attribute files record writes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "hz/scheduler/vfio.h"
#include "test_util.h"

namespace hz::scheduler {
namespace {

namespace fs = std::filesystem;
using testing::CopyFixtureSysfs;
using testing::ReadText;
using testing::TempDir;

class SchedulerVfio : public ::testing::Test {
 protected:
  std::string Use(const std::string& fixture) {
    root_ = CopyFixtureSysfs(fixture, dir_.path());
    return root_;
  }
  std::string Dev(const std::string& bdf) { return root_ + "/bus/pci/devices/" + bdf; }
  // Rebinds a device in the fixture (what the kernel would do after a probe).
  void SetDriver(const std::string& bdf, const std::string& driver) {
    const std::string d = root_ + "/bus/pci/drivers/" + driver;
    fs::create_directories(d);
    for (const char* f : {"bind", "unbind"}) {
      if (!fs::exists(d + "/" + f)) std::ofstream(d + "/" + f).close();
    }
    fs::remove(Dev(bdf) + "/driver");
    fs::create_symlink(fs::relative(fs::canonical(d), fs::canonical(Dev(bdf))),
                       fs::canonical(Dev(bdf)) / "driver");
  }
  TempDir dir_;
  std::string root_;
};

TEST_F(SchedulerVfio, BindWritesOverrideUnbindProbeInOrder) {
  Use("hgx8");
  VfioBinder b(root_);
  ASSERT_TRUE(b.Bind({"0000:1a:00.0", "0000:1c:00.0"}, false).ok());
  std::vector<SysfsWrite> want{
      {"bus/pci/devices/0000:1a:00.0/driver_override", "vfio-pci"},
      {"bus/pci/devices/0000:1a:00.0/driver/unbind", "0000:1a:00.0"},
      {"bus/pci/drivers_probe", "0000:1a:00.0"},
      {"bus/pci/devices/0000:1c:00.0/driver_override", "vfio-pci"},
      {"bus/pci/devices/0000:1c:00.0/driver/unbind", "0000:1c:00.0"},
      {"bus/pci/drivers_probe", "0000:1c:00.0"},
  };
  ASSERT_EQ(b.journal().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(b.journal()[i].path, want[i].path) << i;
    EXPECT_EQ(b.journal()[i].value, want[i].value) << i;
  }
  // The files themselves: the override was appended after the kernel's
  // "(null)", the unbind went to each device's own driver, the probes in order.
  EXPECT_EQ(ReadText(Dev("0000:1a:00.0") + "/driver_override"), "(null)\nvfio-pci\n");
  EXPECT_EQ(ReadText(root_ + "/bus/pci/drivers/nvidia/unbind"), "0000:1a:00.0\n");
  EXPECT_EQ(ReadText(root_ + "/bus/pci/drivers/mlx5_core/unbind"), "0000:1c:00.0\n");
  EXPECT_EQ(ReadText(root_ + "/bus/pci/drivers_probe"), "0000:1a:00.0\n0000:1c:00.0\n");
}

TEST_F(SchedulerVfio, AlreadyOnVfioIsLeftAlone) {
  Use("hgx8");
  SetDriver("0000:1a:00.0", "vfio-pci");
  VfioBinder b(root_);
  ASSERT_TRUE(b.Bind({"0000:1a:00.0"}, false).ok());
  EXPECT_TRUE(b.journal().empty());
}

TEST_F(SchedulerVfio, NonViableGroupFailsBeforeAnyWrite) {
  Use("ws4");
  VfioBinder b(root_);
  Status s = b.Bind({"0000:4a:00.0", "0000:17:00.0"}, false);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kState);
  EXPECT_NE(s.message().find("0000:4a:00.1"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("snd_hda_intel"), std::string::npos) << s.ToString();
  EXPECT_TRUE(b.journal().empty());
  EXPECT_EQ(ReadText(root_ + "/bus/pci/drivers_probe"), "");
  EXPECT_EQ(ReadText(Dev("0000:4a:00.0") + "/driver_override"), "(null)\n");
}

TEST_F(SchedulerVfio, WholeGroupBindsTheAudioFunctionToo) {
  Use("ws4");
  VfioBinder b(root_);
  ASSERT_TRUE(b.Bind({"0000:17:00.0"}, true).ok());
  EXPECT_EQ(ReadText(root_ + "/bus/pci/drivers_probe"), "0000:17:00.0\n0000:17:00.1\n");
  EXPECT_EQ(ReadText(root_ + "/bus/pci/drivers/snd_hda_intel/unbind"), "0000:17:00.1\n");
  EXPECT_EQ(ReadText(Dev("0000:17:00.1") + "/driver_override"), "(null)\nvfio-pci\n");
}

// Release gives the audio function back as well: left on vfio-pci, the host
// would have lost it for good.
TEST_F(SchedulerVfio, UnbindGivesBackWhatTheWholeGroupBindTook) {
  Use("ws4");
  VfioBinder b(root_);
  ASSERT_TRUE(b.Bind({"0000:17:00.0"}, true).ok());
  SetDriver("0000:17:00.0", "vfio-pci");
  SetDriver("0000:17:00.1", "vfio-pci");
  ASSERT_TRUE(b.Unbind({"0000:17:00.0"}).ok());
  EXPECT_EQ(ReadText(Dev("0000:17:00.1") + "/driver_override"), "(null)\nvfio-pci\n\n");
  EXPECT_EQ(ReadText(root_ + "/bus/pci/drivers/vfio-pci/unbind"), "0000:17:00.0\n0000:17:00.1\n");
  EXPECT_EQ(ReadText(root_ + "/bus/pci/drivers_probe"),
            "0000:17:00.0\n0000:17:00.1\n0000:17:00.0\n0000:17:00.1\n");
}

// A function of the group the operator put on vfio-pci without an override
// stays there.
TEST_F(SchedulerVfio, UnbindLeavesWhatTheOperatorBound) {
  Use("ws4");
  VfioBinder other(root_);
  SetDriver("0000:17:00.0", "vfio-pci");
  SetDriver("0000:17:00.1", "vfio-pci");
  ASSERT_TRUE(other.Unbind({"0000:17:00.0"}).ok());
  EXPECT_EQ(ReadText(Dev("0000:17:00.1") + "/driver_override"), "(null)\n");
  EXPECT_EQ(ReadText(root_ + "/bus/pci/drivers/vfio-pci/unbind"), "0000:17:00.0\n");
}

TEST_F(SchedulerVfio, ViabilityAcceptsVfioStubUnboundAndBridges) {
  Use("ws4");
  VfioBinder b(root_);
  SetDriver("0000:17:00.1", "vfio-pci");
  Status v = b.CheckViable("0000:17:00.0");
  EXPECT_TRUE(v.ok()) << v.ToString();
  SetDriver("0000:17:00.1", "pci-stub");
  EXPECT_TRUE(b.CheckViable("0000:17:00.0").ok());
  fs::remove(Dev("0000:17:00.1") + "/driver");  // unbound
  EXPECT_TRUE(b.CheckViable("0000:17:00.0").ok());
  // A bridge in the group (no ACS above it) is not a blocker...
  const std::string group = fs::canonical(Dev("0000:17:00.0") + "/iommu_group").string();
  fs::create_symlink(fs::canonical(Dev("0000:16:01.0")), group + "/devices/0000:16:01.0");
  EXPECT_TRUE(b.CheckViable("0000:17:00.0").ok());
  // ...but an endpoint bound to a host driver is.
  fs::create_symlink(fs::canonical(Dev("0000:b3:00.0")), group + "/devices/0000:b3:00.0");
  Status s = b.CheckViable("0000:17:00.0");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("0000:b3:00.0 is bound to i40e"), std::string::npos);
  std::vector<GroupMember> members;
  ASSERT_TRUE(b.GroupMembers("0000:17:00.0", &members).ok());
  EXPECT_EQ(members.size(), 4u);
}

TEST_F(SchedulerVfio, NoIommuGroupIsAClearError) {
  Use("hgx8");
  fs::remove(Dev("0000:9a:00.0") + "/iommu_group");
  VfioBinder b(root_);
  Status s = b.Bind({"0000:9a:00.0"}, true);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("0000:9a:00.0/iommu_group"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("IOMMU"), std::string::npos);
  EXPECT_TRUE(b.journal().empty());
}

TEST_F(SchedulerVfio, MissingAttributeNamesThePath) {
  Use("hgx8");
  fs::remove(Dev("0000:9b:00.0") + "/driver_override");
  VfioBinder b(root_);
  Status s = b.Bind({"0000:9b:00.0"}, false);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("0000:9b:00.0/driver_override"), std::string::npos);
  EXPECT_FALSE(b.Bind({"0000:ee:00.0"}, false).ok());
  EXPECT_FALSE(b.Bind({"../../x"}, false).ok());
}

TEST_F(SchedulerVfio, UnbindHandsBackToTheHostDriver) {
  Use("hgx8");
  SetDriver("0000:3b:00.0", "vfio-pci");
  VfioBinder b(root_);
  ASSERT_TRUE(b.Unbind({"0000:3b:00.0"}).ok());
  EXPECT_EQ(ReadText(Dev("0000:3b:00.0") + "/driver_override"), "(null)\n\n");
  EXPECT_EQ(ReadText(root_ + "/bus/pci/drivers/vfio-pci/unbind"), "0000:3b:00.0\n");
  EXPECT_EQ(ReadText(root_ + "/bus/pci/drivers_probe"), "0000:3b:00.0\n");
  ASSERT_EQ(b.journal().size(), 3u);
  EXPECT_EQ(b.journal()[1].path, "bus/pci/devices/0000:3b:00.0/driver/unbind");
}

}  // namespace
}  // namespace hz::scheduler
