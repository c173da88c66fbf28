// The maintenances of this host and where each stands: who was told, who
// approved, who checkpointed, when it starts. Plain data and the rules that
// move it (MaintenanceWorkflow, maintenance.h, does the telling and keeps it
// on disk); no clock of its own, no I/O.
//
// A maintenance is SCHEDULED until every tenant told of it approved early
// (SPEC §7.6.2) or its start time came, then STARTED until the operator
// completes it; a scheduled one may be CANCELLED.
#ifndef HZ_SERVICE_MAINTENANCE_PLAN_H_
#define HZ_SERVICE_MAINTENANCE_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz/common/status.h"
#include "hz/common/status_or.h"

namespace hz::service {

enum class MaintenanceState { kScheduled, kStarted, kCompleted, kCancelled };
const char* MaintenanceStateName(MaintenanceState state);

struct Maintenance {
  uint64_t id = 0;
  std::string host;
  // The VMs (socket paths) it concerns; empty: every VM and device of the host.
  std::vector<std::string> vms;
  uint64_t at_s = 0;  // unix seconds: it starts then unless every tenant approved earlier
  uint64_t duration_s = 0;
  MaintenanceState state = MaintenanceState::kScheduled;
  uint64_t scheduled_s = 0;
  uint64_t started_s = 0;      // 0 until it starts
  uint64_t ended_s = 0;        // completed or cancelled
  bool started_early = false;  // every tenant approved before at_s
  struct Told {
    std::string tenant;
    uint64_t seq = 0;          // its SCHEDULED event in the tenant's log
    uint64_t approved_s = 0;   // 0: not approved
    uint32_t checkpoints = 0;  // made durable or taken just in time since the notice
  };
  std::vector<Told> told;
  std::string hook;  // what the operator's hook did last ("" when none ran)

  bool Open() const {
    return state == MaintenanceState::kScheduled || state == MaintenanceState::kStarted;
  }
  bool AllApproved() const;
  Told* FindTold(const std::string& tenant);
};

class MaintenancePlan {
 public:
  // Records a new maintenance (state scheduled, nobody told yet); ids ascend
  // from 1 and are never reused.
  Maintenance& Add(std::string host, std::vector<std::string> vms, uint64_t at_s,
                   uint64_t duration_s, uint64_t now_s);
  Maintenance* Find(uint64_t id);

  // The tenant approved its event seq early: the scheduled maintenance whose
  // notice that was, or null.
  Maintenance* Approve(const std::string& tenant, uint64_t seq, uint64_t now_s);
  // The tenant made a checkpoint durable (or one was taken just in time):
  // counts for every scheduled or started maintenance it was told of.
  void NoteCheckpoint(const std::string& tenant);

  // Scheduled maintenances that may start at now_s: every tenant told
  // approved, or at_s came.
  std::vector<uint64_t> Due(uint64_t now_s) const;
  // Whether a started maintenance of host is under way.
  bool UnderWay(const std::string& host) const;

  const std::vector<Maintenance>& all() const { return all_; }

  nlohmann::json ToJson() const;
  // kCorrupt naming what is wrong.
  static StatusOr<MaintenancePlan> FromJson(const std::string& text);

 private:
  uint64_t next_id_ = 1;
  std::vector<Maintenance> all_;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_MAINTENANCE_PLAN_H_
