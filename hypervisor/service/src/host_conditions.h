// The host's conditions that tenants hear of as events, and the energy slack
// they declare against them:
//  - CONGESTION/HOST_MEMORY (SPEC.md §8.3.5) from the collective engine's
//    waiting time (hz/common/waiting_window.h), mapped to §8.5's levels
//    with hysteresis (a level is kept at least hysteresis_s), told to each
//    tenant with communicators here whenever the level it was last told
//    differs;
//  - ENERGY/LEVEL_CHANGED (§8.3.9) from the operator's schedule
//    (energy_schedule.h, kept in <state_dir>/energy.json), told to each
//    tenant with a VM or devices here whenever it differs from what the
//    tenant was last told;
//  - ENERGY_SLACK (§7.10): while the level is constrained or critical, a
//    tenant's declaration scales its share of the collective workers.
// The service calls Update on a timer with what it measured; times come from
// the injected clock. What tenants declared (slack) and what each was last
// told survive a restart in <state_dir>/conditions.json, so that a level that
// changed while the service was down is told, and none is told twice.
// Thread-safe; the hooks run without the lock held, except set_share, which
// must not call back.
#ifndef HZ_SERVICE_HOST_CONDITIONS_H_
#define HZ_SERVICE_HOST_CONDITIONS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "energy_schedule.h"
#include "hz/common/waiting_window.h"
#include "hz/events/coarse.h"
#include "hz/events/event_spec.h"
#include "hz/service/command_registry.h"
#include "hz/service/energy_backend.h"

namespace hz::service {

// A shared resource as measured, and the tenants that use it.
struct ResourceWaiting {
  WaitingTime waiting;
  std::set<std::string> tenants;
};

struct ConditionInputs {
  std::set<std::string> host_tenants;  // a VM bound or devices allocated on this host
  ResourceWaiting host_memory;         // the collective workers; tenants with communicators here
  ResourceWaiting storage;             // the checkpoint disk; tenants that persist checkpoints here
  ResourceWaiting fabric;  // the inter-host legs; tenants with communicators across hosts
};

struct ConditionHooks {
  std::function<uint64_t()> unix_now;  // seconds
  std::function<void(const std::string& tenant, const events::EventSpec&)> publish;
  // The tenant's share of the collective workers: percent for the next
  // seconds (100: the full weight again).
  std::function<void(const std::string& tenant, uint32_t percent, uint64_t seconds)> set_share;
};

class HostConditions : public EnergyBackend {
 public:
  // The schedule is <state_dir>/energy.json, the rest <state_dir>/conditions.json.
  HostConditions(const std::string& state_dir, uint64_t hysteresis_s, ConditionHooks hooks);

  // Reads both files; an error naming the file when one cannot be read.
  Status Load();
  // One poll: publishes what changed and applies or ends shares.
  void Update(const ConditionInputs& in);
  void ForgetTenant(const std::string& tenant);

  Status DeclareSlack(const TenantId& tenant, const hz_energy_slack_args& args,
                      hz_energy_slack_result* result) override;

  // energy.schedule, energy.status.
  static std::span<const CommandSpec<HostConditions>> Commands();
  CommandResult ScheduleCommand(const nlohmann::json& req);
  CommandResult StatusCommand(const nlohmann::json& req);

 private:
  struct Slack {
    uint32_t pct = 0;
    uint64_t expires_s = 0;
    uint32_t applied = 100;  // the share the engine was last told
  };
  using Events = std::vector<std::pair<std::string, events::EventSpec>>;

  void CongestionLocked(const ConditionInputs& in, uint64_t now, Events* out);
  void EnergyLocked(const ConditionInputs& in, uint64_t now, Events* out);
  void SharesLocked(uint64_t now);
  void Publish(const Events& out);
  // conditions.json (host_conditions_state.cc): the slack and the told
  // levels as JSON, read back, and written when they differ from the file.
  nlohmann::json StateLocked() const;
  Status LoadStateLocked(const nlohmann::json& state);
  Status SaveStateLocked();

  const std::string path_;        // energy.json
  const std::string state_path_;  // conditions.json
  std::string saved_state_;       // what state_path_ holds
  ConditionHooks hooks_;

  mutable std::mutex mu_;
  EnergySchedule schedule_;
  // One per resource, indexed by the CONGESTION kind.
  struct Resource {
    uint8_t level = events::kCongestionNone;
    WaitingTime last;
    std::map<std::string, uint8_t> told;
  };
  void ResourceLocked(events::CongestionKind kind, const ResourceWaiting& in, uint64_t now,
                      Events* out);
  events::ChangeFilter congestion_filter_;
  std::array<Resource, 3> resources_;
  std::map<std::string, EnergyCondition> told_energy_;
  std::map<std::string, Slack> slack_;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_HOST_CONDITIONS_H_
