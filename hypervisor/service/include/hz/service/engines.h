// The macro-level engines the service wires into every device: the event bus
// (durable per-tenant logs under <state_dir>/events) and the checkpoint
// engine (<state_dir>/checkpoints). One Engines object per service; every
// HzDevice reaches them through the interfaces checkpoints() and events()
// return (DeviceEnv). Thread-safe.
//
// Every event the service publishes goes through Publish (the provider's
// engines reach it as an EventSink, sink()): the checkpoint engine's, the
// scheduler's and the negotiation engine's, the operator's. A MAINTENANCE or
// PREEMPTION notice (SCHEDULED or STARTED) triggers the just-in-time saves
// (OnNotice) of the VMs it concerns, on a thread of its own.
#ifndef HZ_SERVICE_ENGINES_H_
#define HZ_SERVICE_ENGINES_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz/checkpoint/engine.h"
#include "hz/cluster/membership.h"
#include "hz/common/idle_class_guard.h"
#include "hz/common/status.h"
#include "hz/common/tenant_id.h"
#include "hz/events/event_bus.h"
#include "hz/service/ckpt_backend.h"
#include "hz/service/command_registry.h"
#include "hz/service/config.h"
#include "hz/service/event_backend.h"
#include "hz/service/tenants.h"

namespace prometheus {
class Registry;
}

namespace hz::service {

class BusAdapter;
class CkptAdapter;
class PeerReplicas;

class Engines {
 public:
  // idle_guard: the checkpoint engine's threads wait in the idle class
  // until they starve (none: they run at [checkpoint] thread_nice).
  Engines(const ServiceConfig& config, std::shared_ptr<IdleClassGuard> idle_guard);
  ~Engines();
  Engines(const Engines&) = delete;
  Engines& operator=(const Engines&) = delete;

  // Opens the engines' state under the state directory. after_crash: the
  // tenants wait until this process serves, so the checkpoint staging memory
  // is faulted in once it does (PrepareStaging).
  Status Start(bool after_crash = false);
  // After Start(after_crash): faults in the checkpoint staging memory on a
  // thread of the engine (checkpoint::Engine::PrepareStaging).
  void PrepareStaging();
  // Faults in the checkpoint staging memory Start will take, before Start
  // (checkpoint::Engine::ReserveStaging).
  static void ReserveStaging(const ServiceConfig& config);
  // What the engines keep for the tenant that a tenant.remove would delete:
  // "checkpoints", "events" (none: nothing worth keeping).
  Status TenantData(const TenantId& tenant, std::vector<std::string>* held) const;
  // Deletes everything the engines keep under the tenant's name.
  Status ForgetTenant(const TenantId& tenant);
  // The operator's checkpoint limits for the tenant: its weight (1..1000,
  // its share of checkpoint staging, the memory tier, disk space and disk
  // bandwidth) and its own disk and staging caps. A failure (the engine
  // cannot record the tenant) is logged: the tenant keeps the defaults.
  void SetTenantLimits(const TenantSpec& spec);
  // kInvalidArgument when the tenant's own caps exceed what all tenants
  // together have (the checkpoint disk space, the staging pool).
  Status CheckTenantLimits(const TenantSpec& spec) const;

  // The live hosts of the cluster (membership thread): where checkpoints of
  // the peer-host tier are copied to. The first view with another host
  // resumes the copies a restart interrupted. Nothing without [cluster].
  void ClusterHosts(std::vector<cluster::HostInfo> hosts);

  events::EventBus* bus() const { return bus_.get(); }
  // Waits until no checkpoint is being persisted (a live upgrade hands the
  // state directory to the next process only then).
  Status FlushCheckpoints(std::chrono::milliseconds timeout);
  // Appends to the tenant's log, then starts the just-in-time saves of a
  // notice: of the tenant's VMs named in vms (socket paths), or of all its
  // VMs on this host when vms is empty. Any thread.
  Status Publish(const TenantId& tenant, const events::EventSpec& spec, uint64_t* seq,
                 const std::set<std::string>& vms = {});
  // Publish, for the provider's engines (every VM of the tenant in scope).
  events::EventSink* sink() const;
  // Told of every event published, after it is in the log (any thread, no
  // lock held). Set once, before anything publishes.
  using PublishedFn = std::function<void(const TenantId& tenant, const hz_event& event)>;
  // Empty: none. Clearing it does not wait for a call in progress.
  void SetPublishedObserver(PublishedFn fn);
  // Which of the tenant's VMs (socket paths) a notice concerns when its
  // publisher named none: nullopt, every VM of the tenant on this host; an
  // empty set, none (no save). Called on the notice's own thread with no
  // lock of the engines held. Unset: every VM. Setting it (to empty before
  // what it reaches goes) waits for a call in progress.
  using NoticeScopeFn = std::function<std::optional<std::set<std::string>>(const TenantId& tenant,
                                                                           const hz_event& event)>;
  void SetNoticeScope(NoticeScopeFn fn);
  // CONGESTION/STORAGE: how long checkpoint chunks waited for the disk;
  // whether a tenant persists checkpoints here.
  WaitingTime StorageWaiting() const;
  bool PersistsCheckpoints(const TenantId& tenant) const;
  // What the devices use; null when that engine is not running.
  CkptBackend* checkpoints() const;
  EventBackend* events() const;

  // Operator commands of the engines (control API), for the registry.
  static std::span<const CommandSpec<Engines>> Commands();

  nlohmann::json Counters() const;
  // The engines' families, into the service's scrape.
  void CollectMetrics(prometheus::Registry* r) const;

 private:
  class CkptSink;
  class NoticeSink;
  CommandResult InjectEvent(const nlohmann::json& req);
  CommandResult ListCheckpoints(const nlohmann::json& req);
  CommandResult EventStatus(const nlohmann::json& req);
  void PublishCheckpoint(const checkpoint::CheckpointEvent& e);
  // Just-in-time saves for a notice published to tenant (any thread).
  void Notice(const TenantId& tenant, const hz_event& ev, const std::set<std::string>& vms);
  void ReapNoticesLocked();
  // The saves of one notice: the streams of `vms` (nullopt: every stream of
  // the tenant). On the notice's thread.
  void SaveJustInTime(checkpoint::Engine* engine, const TenantId& tenant,
                      std::chrono::steady_clock::time_point deadline,
                      const std::optional<std::set<std::string>>& vms);
  // The VMs of a notice that named none, through scope_ (notice thread).
  std::optional<std::set<std::string>> ScopeOf(const TenantId& tenant, const hz_event& ev);
  uint64_t Delivered() const;  // event records written into guests' buffers

  ServiceConfig config_;
  std::shared_ptr<IdleClassGuard> idle_guard_;
  uint64_t disk_cap_ = 0;  // all checkpoints on disk; 0: unknown
  std::unique_ptr<events::EventBus> bus_;
  std::unique_ptr<CkptSink> sink_;
  std::unique_ptr<NoticeSink> notice_sink_;
  PublishedFn observer_;
  std::mutex scope_mu_;  // held while scope_ runs
  NoticeScopeFn scope_;
  // The peer-host tier (with [cluster]); stopped before the engine goes.
  std::unique_ptr<PeerReplicas> peer_;
  std::unique_ptr<checkpoint::Engine> ckpt_;
  // After the engines: a save still queued when the checkpoint engine stops
  // runs during its destruction, through the adapter.
  std::unique_ptr<CkptAdapter> ckpt_adapter_;
  std::unique_ptr<BusAdapter> bus_adapter_;

  mutable std::mutex mu_;  // everything below
  // Notice threads, running or finished; a finished one (its id in
  // finished_) is joined by the next Notice, the rest on destruction.
  std::list<std::thread> notices_;
  std::vector<std::thread::id> finished_;
  std::atomic<uint64_t> published_{0};
  std::atomic<uint64_t> ckpt_events_{0};
  std::atomic<uint64_t> jit_notices_{0};
  std::atomic<uint64_t> jit_notices_done_{0};  // notices whose saves are over
  std::atomic<bool> replicas_resumed_{false};  // ResumeReplicas ran (ClusterHosts)
};

}  // namespace hz::service

#endif  // HZ_SERVICE_ENGINES_H_
