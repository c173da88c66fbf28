// Shared helpers of the scheduler tests: fixture paths, scratch copies of
// fixture trees (so tests can write to them) and a recording event sink.
#ifndef HZ_TESTS_SCHEDULER_TEST_UTIL_H_
#define HZ_TESTS_SCHEDULER_TEST_UTIL_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "hz/events/event_spec.h"
#include "hz/scheduler/inventory.h"
#include "hz/scheduler/scheduler.h"

namespace hz::scheduler::testing {

// <fixtures>/<name> (hgx8, hgx8-relabeled, ws4).
std::string Fixture(const std::string& name);
std::string FixtureSysfs(const std::string& name);
std::string FixtureToml(const std::string& name);

// Loads a fixture host with its provider file; fails the test on error.
HostInventory LoadFixture(const std::string& name);

// A fresh directory, removed at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Copies a fixture's sysfs tree (symlinks kept as symlinks) into dir/sysfs
// and returns that path.
std::string CopyFixtureSysfs(const std::string& name, const std::string& dir);

// A scheduler on a scratch copy of fixture `name` in `dir`, its state in
// dir/scheduler.json, without fsync.
SchedulerOptions FixtureSchedulerOptions(const std::string& name, const std::string& dir);

std::string ReadText(const std::string& path);

// The addresses of allocation `id`'s devices, as Allocations() lists them.
std::set<std::string> AllocationBdfs(const Scheduler& scheduler, uint64_t id);

struct Published {
  TenantId tenant;
  hz::events::EventSpec spec;
};

class RecordingSink : public hz::events::EventSink {
 public:
  hz::Status Publish(const TenantId& tenant, const hz::events::EventSpec& spec,
                     uint64_t* seq) override {
    events.push_back({tenant, spec});
    if (seq) *seq = events.size();
    return hz::Status::Ok();
  }
  std::vector<Published> events;
};

}  // namespace hz::scheduler::testing

#endif  // HZ_TESTS_SCHEDULER_TEST_UTIL_H_
