#include "hz/events/health_monitor.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "test_util.h"

namespace hz::events {
namespace {

namespace fs = std::filesystem;

const std::string kFixtures = HZ_EVENTS_FIXTURES;

class EventsHealth : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_.path() + "/sys";
    fs::copy(kFixtures + "/sysfs-healthy", root_, fs::copy_options::recursive);
  }

  // Sets counter `name` of `file` to `value`, keeping TOTAL_ERR_* the sum,
  // the way the kernel updates the files.
  void SetCounter(const std::string& bdf, const std::string& file, const std::string& name,
                  uint64_t value) {
    std::string path = root_ + "/bus/pci/devices/" + bdf + "/" + file;
    std::ifstream in(path);
    std::string line, out;
    uint64_t total = 0;
    std::string total_name;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string n;
      uint64_t v;
      ls >> n >> v;
      if (n.rfind("TOTAL_ERR_", 0) == 0) {
        total_name = n;
        continue;
      }
      if (n == name) v = value;
      total += v;
      out += n + " " + std::to_string(v) + "\n";
    }
    out += total_name + " " + std::to_string(total) + "\n";
    std::ofstream(path, std::ios::trunc) << out;
  }

  testing::TempDir dir_;
  std::string root_;
  testing::RecordingSink sink_;
};

TEST_F(EventsHealth, ParsesKernelFormat) {
  AerCounters c;
  ASSERT_TRUE(ParseAerCounters("RxErr 3\nBadTLP 1\nTOTAL_ERR_COR 4\n", "f", &c).ok());
  EXPECT_EQ(c.total, 4u);
  EXPECT_EQ(c.counters.at("RxErr"), 3u);
  // Without a TOTAL line the total is the sum.
  ASSERT_TRUE(ParseAerCounters("A 2\nB 5", "f", &c).ok());
  EXPECT_EQ(c.total, 7u);
}

TEST_F(EventsHealth, MalformedTextIsAClearError) {
  AerCounters c;
  const char* bad[] = {"",       "RxErr\n",    "RxErr x\n",  "RxErr -1\n",
                       " 5\n",   "Rx/Err 1\n", "A 1\nA 2\n", "A 99999999999999999999\n",
                       "A 1 2\n"};
  for (const char* text : bad) {
    Status s = ParseAerCounters(text, "aer_dev_fatal", &c);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << text;
    EXPECT_NE(s.message().find("aer_dev_fatal"), std::string::npos) << s.message();
  }
  Status s = ParseAerCounters("A 1\nB oops\n", "aer_dev_fatal", &c);
  EXPECT_NE(s.message().find("line 2"), std::string::npos) << s.message();
}

TEST_F(EventsHealth, ValidatesPciAddresses) {
  EXPECT_TRUE(ValidBdf("0000:3b:00.0"));
  EXPECT_FALSE(ValidBdf("0000:3B:00.0"));
  EXPECT_FALSE(ValidBdf("../../../etc"));
  EXPECT_FALSE(ValidBdf("0000:3b:00.8"));
  EXPECT_FALSE(ValidBdf("0000:3b:00"));
  DeviceHealth h;
  EXPECT_EQ(ReadDeviceHealth(root_, "0000:3b/../00.0", &h).code(), StatusCode::kInvalidArgument);
}

TEST_F(EventsHealth, ReadsFixtureTree) {
  DeviceHealth h;
  ASSERT_TRUE(ReadDeviceHealth(root_, "0000:3b:00.0", &h).ok());
  EXPECT_EQ(h.correctable, 4u);
  EXPECT_EQ(h.nonfatal, 0u);
  EXPECT_EQ(h.fatal, 0u);
  EXPECT_EQ(ReadDeviceHealth(root_, "0000:99:00.0", &h).code(), StatusCode::kNotFound);
}

TEST_F(EventsHealth, QuietDevicesPublishNothing) {
  HealthMonitor m(root_, &sink_);
  ASSERT_TRUE(m.Assign(TenantId("t1"), "0000:3b:00.0", 0).ok());
  ASSERT_TRUE(m.Poll().ok());
  SetCounter("0000:3b:00.0", "aer_dev_correctable", "BadDLLP", 7);  // correctable only
  ASSERT_TRUE(m.Poll().ok());
  EXPECT_TRUE(sink_.entries().empty());
}

TEST_F(EventsHealth, NonFatalAndFatalIncreasesPublishFailures) {
  HealthMonitor m(root_, &sink_);
  std::vector<std::pair<std::string, uint32_t>> told;
  m.SetFailureListener(
      [&](const TenantId& t, uint32_t i, FailureKind) { told.emplace_back(t.name(), i); });
  ASSERT_TRUE(m.Assign(TenantId("t1"), "0000:3b:00.0", 1).ok());
  ASSERT_TRUE(m.Assign(TenantId("t1"), "0000:5e:00.0", 0).ok());
  ASSERT_TRUE(m.Assign(TenantId("t2"), "0000:86:00.0", 0).ok());
  EXPECT_EQ(m.Assign(TenantId("t3"), "0000:86:00.0", 1).code(), StatusCode::kState);

  SetCounter("0000:3b:00.0", "aer_dev_nonfatal", "CmpltTO", 3);
  ASSERT_TRUE(m.Poll().ok());
  auto e = sink_.entries();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].tenant, TenantId("t1"));
  EXPECT_EQ(e[0].spec.topic, HZ_TOPIC_FAILURE);
  EXPECT_EQ(e[0].spec.kind, kFailureDeviceDegraded);
  auto p = testing::PayloadAs<FailurePayload>(e[0].spec.payload.data());
  EXPECT_EQ(p.device_index, 1u);  // the tenant-visible index, never the PCI address
  EXPECT_EQ(p.errors, 2u);        // 3 errors, bucketed

  // No change, no new event.
  ASSERT_TRUE(m.Poll().ok());
  EXPECT_EQ(sink_.entries().size(), 1u);

  SetCounter("0000:86:00.0", "aer_dev_fatal", "MalfTLP", 1);
  SetCounter("0000:86:00.0", "aer_dev_nonfatal", "ECRC", 1);
  ASSERT_TRUE(m.Poll().ok());
  e = sink_.entries();
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1].tenant, TenantId("t2"));
  EXPECT_EQ(e[1].spec.kind, kFailureDeviceFailed);
  ASSERT_EQ(told.size(), 2u);
  EXPECT_EQ(told[1], std::make_pair(std::string("t2"), 0u));
  // The payload holds nothing that looks like a PCI address.
  std::string bytes(reinterpret_cast<const char*>(e[1].spec.payload.data()),
                    HZ_EVENT_PAYLOAD_BYTES);
  EXPECT_EQ(bytes.find("0000:"), std::string::npos);
}

TEST_F(EventsHealth, ErrorsBeforeAssignmentAreBaseline) {
  SetCounter("0000:5e:00.0", "aer_dev_fatal", "DLP", 5);
  HealthMonitor m(root_, &sink_);
  ASSERT_TRUE(m.Assign(TenantId("t1"), "0000:5e:00.0", 0).ok());
  ASSERT_TRUE(m.Poll().ok());
  EXPECT_TRUE(sink_.entries().empty());
}

TEST_F(EventsHealth, UnreadableDeviceIsReportedOthersStillChecked) {
  HealthMonitor m(root_, &sink_);
  ASSERT_TRUE(m.Assign(TenantId("t1"), "0000:3b:00.0", 0).ok());
  ASSERT_TRUE(m.Assign(TenantId("t1"), "0000:5e:00.0", 1).ok());
  std::ofstream(root_ + "/bus/pci/devices/0000:3b:00.0/aer_dev_fatal", std::ios::trunc) << "junk\n";
  SetCounter("0000:5e:00.0", "aer_dev_fatal", "DLP", 1);
  Status s = m.Poll();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("0000:3b:00.0/aer_dev_fatal"), std::string::npos) << s.message();
  ASSERT_EQ(sink_.entries().size(), 1u);
  EXPECT_EQ(testing::PayloadAs<FailurePayload>(sink_.entries()[0].spec.payload.data()).device_index,
            1u);
}

TEST_F(EventsHealth, MalformedFixtureTree) {
  const std::string root = kFixtures + "/sysfs-malformed";
  DeviceHealth h;
  Status s = ReadDeviceHealth(root, "0000:3b:00.0", &h);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("line 2"), std::string::npos) << s.message();
  EXPECT_EQ(ReadDeviceHealth(root, "0000:5e:00.0", &h).code(), StatusCode::kNotFound);
  s = ReadDeviceHealth(root, "0000:86:00.0", &h);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("overflow"), std::string::npos) << s.message();
  EXPECT_EQ(ReadDeviceHealth(root, "0000:87:00.0", &h).code(), StatusCode::kCorruption);
  HealthMonitor m(root, &sink_);
  EXPECT_FALSE(m.Assign(TenantId("t1"), "0000:3b:00.0", 0).ok());
  EXPECT_EQ(m.Unassign("0000:3b:00.0").code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace hz::events
