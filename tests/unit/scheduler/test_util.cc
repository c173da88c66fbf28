#include "test_util.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace hz::scheduler::testing {

namespace fs = std::filesystem;

std::string Fixture(const std::string& name) {
  return std::string(HZ_SCHED_FIXTURES) + "/" + name;
}
std::string FixtureSysfs(const std::string& name) {
  return Fixture(name) + "/sysfs";
}
std::string FixtureToml(const std::string& name) {
  return Fixture(name) + "/inventory.toml";
}

HostInventory LoadFixture(const std::string& name) {
  HostInventory inv;
  Status s = LoadHostInventory(FixtureSysfs(name), FixtureToml(name), &inv);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return inv;
}

TempDir::TempDir() {
  // Fixture copies are hundreds of small files: prefer memory (/dev/shm)
  // unless TMPDIR says otherwise.
  fs::path base = fs::temp_directory_path();
  if (!::getenv("TMPDIR") && fs::is_directory("/dev/shm")) base = "/dev/shm";
  std::string tmpl = (base / "hz-sched-XXXXXX").string();
  char* p = ::mkdtemp(tmpl.data());
  if (p) path_ = p;
  EXPECT_FALSE(path_.empty());
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) fs::remove_all(path_, ec);
}

std::string CopyFixtureSysfs(const std::string& name, const std::string& dir) {
  const std::string dst = dir + "/sysfs";
  fs::copy(FixtureSysfs(name), dst, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  return dst;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::set<std::string> AllocationBdfs(const Scheduler& scheduler, uint64_t id) {
  std::set<std::string> out;
  for (const auto& a : scheduler.Allocations()) {
    if (a["id"] == id) {
      for (const auto& d : a["devices"]) out.insert(d.get<std::string>());
    }
  }
  return out;
}

SchedulerOptions FixtureSchedulerOptions(const std::string& name, const std::string& dir) {
  SchedulerOptions o;
  o.sysfs_root = CopyFixtureSysfs(name, dir);
  o.provider_file = FixtureToml(name);
  o.state_path = dir + "/scheduler.json";
  o.sync = false;
  return o;
}

}  // namespace hz::scheduler::testing
