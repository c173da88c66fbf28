// harmonaized's state directory across restarts: one daemon at a time, and
// state files that cannot be read stop the start-up, named, and are kept.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "service_harness.h"

namespace hz::testing {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A second daemon on the same state directory would take the control socket
// and recover (delete) the first one's checkpoints in progress.
TEST(ServiceStateTest, ASecondDaemonOnTheSameStateDirectoryRefusesToStart) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  ASSERT_EQ(svc.TenantWithVms("first", 1).size(), 1u);
  std::string out;
  EXPECT_EQ(svc.RunToExit({}, &out), 1) << out;
  EXPECT_NE(out.find(svc.dir()), std::string::npos) << out;
  EXPECT_NE(out.find("harmonaized.lock"), std::string::npos) << out;
  // The first daemon still has its control socket and its tenant.
  auto r = svc.Control({{"cmd", "vm.list"}});
  ASSERT_TRUE(r.value("ok", false)) << r.dump();
  EXPECT_EQ(r["result"].size(), 1u);
  ASSERT_EQ(svc.Terminate(), 0);
  // Once it has gone, the next one starts.
  ASSERT_TRUE(svc.Start());
}

// Starting without the tenants and bindings, and saving that on the next
// change, would lose them all: an unreadable state.json stops the start-up.
TEST(ServiceStateTest, AnUnreadableStateFileStopsTheStartAndIsKept) {
  ServiceProcess svc;
  ASSERT_TRUE(svc.Start());
  ASSERT_EQ(svc.TenantWithVms("kept", 1).size(), 1u);
  ASSERT_EQ(svc.Terminate(), 0);
  const std::string path = svc.dir() + "/state.json";
  for (const std::string& bad : {std::string("{\"tenants\": [{\"name\": \"kept\""),
                                 std::string("{\"tenants\": [{\"name\": \"kept\"}]}")}) {
    std::ofstream(path, std::ios::trunc) << bad;
    std::string out;
    EXPECT_EQ(svc.RunToExit({}, &out), 1) << out;
    EXPECT_NE(out.find(path), std::string::npos) << out;
    EXPECT_EQ(Slurp(path), bad);
  }
}

// The checkpoint engine's tenant table is the only link from a tenant's name
// to its checkpoints' directory; without it another tenant could be given
// that directory, or the tenant lose its checkpoints.
TEST(ServiceStateTest, AnUnreadableCheckpointTenantTableStopsTheStartAndIsKept) {
  ServiceProcess svc;
  const std::string table = svc.dir() + "/checkpoints/tenants.json";
  fs::create_directories(svc.dir() + "/checkpoints/1/1");
  std::ofstream(table).flush();  // empty, as a power loss could leave a new file
  std::string out;
  EXPECT_EQ(svc.RunToExit({}, &out), 1) << out;
  EXPECT_NE(out.find(table), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(table));
  EXPECT_EQ(fs::file_size(table), 0u);
}

}  // namespace
}  // namespace hz::testing
