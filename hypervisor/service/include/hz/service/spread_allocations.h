// Allocations spread over several hosts of a cluster (SPEC.md has nothing of
// this: tenants see their devices on every host in their topology summary,
// however they were placed).
//
// When this host cannot hold an operator's allocation, the plan
// (hz/scheduler/cluster_placement.h) is made from this host's placement
// record and the other hosts' (as their membership records last carried
// them), and each part is placed by its own host: this one directly, the
// others through the cluster store (hz/cluster/host_commands.h) as an
// `alloc` limited to that host. If a part fails, the parts already placed
// are released and nothing is kept. The parts of each spread allocation are
// kept in <state_dir>/spread_allocations.json, so that it is released as
// one.
//
// Records change while a plan is made: a host that took devices since its
// last record refuses its part (kLimit), and the allocation fails whole
// with that host's reason.
#ifndef HZ_SERVICE_SPREAD_ALLOCATIONS_H_
#define HZ_SERVICE_SPREAD_ALLOCATIONS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz/cluster/membership.h"
#include "hz/common/status.h"
#include "hz/common/status_or.h"
#include "hz/scheduler/cluster_placement.h"
#include "hz/service/command_registry.h"

namespace hz::service {

struct SpreadHooks {
  std::string self;  // this host's name in the cluster
  // This host's placement record, now.
  std::function<scheduler::PlacementRecord()> local_record;
  // Runs an operator command (alloc limited to this host, release) here.
  std::function<CommandResult(const nlohmann::json& request)> run_here;
  // Runs one on another host; its control answer ({"ok", "result"|"error"}).
  using CallHost = std::function<StatusOr<nlohmann::json>(const std::string& host,
                                                          const nlohmann::json& request)>;
  CallHost call;
};

class SpreadAllocations {
 public:
  SpreadAllocations(std::string path, SpreadHooks hooks, bool sync = true);

  // Reads the file (absent: none yet). kCorruption for one that is not ours.
  Status Load();
  // The live hosts, as membership read them: their placement records.
  void SetHosts(const std::vector<cluster::HostInfo>& hosts);

  // Plans and places `request` of `tenant` across the hosts; the result
  // lists each part with its host, allocation id and devices.
  CommandResult Allocate(const std::string& tenant, const scheduler::Request& request);
  // Releases every part. A part its host no longer has counts as
  // released; a host that cannot be reached keeps the allocation (with the
  // parts still held) and is the error.
  CommandResult Release(uint64_t id);
  nlohmann::json List() const;
  uint64_t malformed_records() const { return malformed_.load(); }

 private:
  struct Part {
    std::string host;
    uint64_t allocation = 0;
  };
  struct Spread {
    uint64_t id = 0;
    std::string tenant;
    std::vector<Part> parts;
  };

  // Runs `request` on `host` (this one or another): the command's result.
  CommandResult Run(const std::string& host, const nlohmann::json& request);
  // Releases the parts in reverse; returns those that could not be.
  std::vector<Part> ReleaseParts(const std::vector<Part>& parts, Status* first_error);
  Status SaveLocked() const;

  const std::string path_;
  const SpreadHooks hooks_;
  const bool sync_;
  mutable std::mutex mu_;
  std::vector<scheduler::PlacementRecord> others_;  // the other hosts' records
  std::vector<Spread> spreads_;
  uint64_t next_id_ = 1;
  std::atomic<uint64_t> malformed_{0};
  std::mutex placing_;  // one spread allocation or release at a time
};

}  // namespace hz::service

#endif  // HZ_SERVICE_SPREAD_ALLOCATIONS_H_
