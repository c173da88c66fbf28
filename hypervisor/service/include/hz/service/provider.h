// The provider side of harmonaized: the scheduler (inventory, allocation,
// vfio, libvirt attach, failures, topology summaries), the negotiation engine
// (reservation windows and offers), the batch-size hint engine and the
// device-health monitor, wired as hypervisor/scheduler/README.md and
// hypervisor/events/README.md describe.
//
// The scheduler and the negotiation engine know nothing of each other
// (scheduler_resources.h): the engine reaches the scheduler through
// SchedulerResources, and when the scheduler reports that a failure took a
// device, Provider asks the engine for the replacement offer.
//
// Threads: the negotiation engine and the health monitor are not
// thread-safe, so every call into them (from VM executors, the operator and
// the timers) holds mu_. The scheduler locks itself and calls nothing back;
// what may wait for a guest to let go of a device (operator releases,
// device failures, removing a tenant) calls it without mu_.
// Decisions are handed to the waiting devices through callbacks that only
// post to the device's executor.
//
// The decision point runs on a thread of its own every
// negotiation.decide_interval_ms, and holds mu_ only to copy the queued
// requests and to book what it found: the scan between (the expensive part)
// runs unlocked, so NEG_* and HINT_* calls, operator commands and metrics
// never wait for it, and the service's io_context (control socket, metrics)
// is never busy with it. The health poll runs on the service's io_context
// every scheduler.health_poll_ms. The counters are atomics of their own.
#ifndef HZ_SERVICE_PROVIDER_H_
#define HZ_SERVICE_PROVIDER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "hz/common/status.h"
#include "hz/common/status_or.h"
#include "hz/common/tenant_id.h"
#include "hz/events/event_spec.h"
#include "hz/events/health_monitor.h"
#include "hz/negotiation/hints.h"
#include "hz/negotiation/negotiation.h"
#include "hz/scheduler/domain_attacher.h"
#include "hz/scheduler/scheduler.h"
#include "hz/service/command_registry.h"
#include "hz/service/config.h"
#include "hz/service/provider_backend.h"
#include "hz/service/scheduler_resources.h"
#include "hz/service/spread_allocations.h"
#include "protocol/harmonaize.h"

namespace prometheus {
class Registry;
}

namespace hz::service {

// The devices reach it as their ProviderBackend.
class Provider : public ProviderBackend {
 public:
  // The engine's view of the scheduler, given the scheduler's own; tests
  // wrap it to observe or hold the engine's capacity queries.
  using ResourcesView = std::function<std::unique_ptr<negotiation::ResourceProvider>(
      negotiation::ResourceProvider* scheduler_resources)>;

  Provider(const ServiceConfig& config, boost::asio::io_context& io, events::EventSink* sink,
           ResourcesView view = nullptr);
  ~Provider() override;
  Provider(const Provider&) = delete;
  Provider& operator=(const Provider&) = delete;

  // Opens the scheduler (and libvirt), starts the decision thread and the
  // timers.
  Status Start();
  // Cancels the timers, waits for the decision thread and forgets waiting
  // requests (on the io_context's thread or after it stopped).
  void Stop();

  // In a cluster: allocations this host cannot hold are spread over the
  // hosts (spread_allocations.h); `call` runs an operator command on
  // another host. After Start, before the first command.
  Status JoinCluster(const std::string& self, SpreadHooks::CallHost call);
  // The live hosts, with their placement records (membership thread).
  void SetClusterHosts(const std::vector<cluster::HostInfo>& hosts);

  // The scheduler, once Start succeeded; it locks itself.
  scheduler::Scheduler* scheduler() { return sched_.get(); }

  // ProviderBackend
  Status Summary(const TenantId& tenant, std::vector<uint8_t>* bytes) override;
  Status Submit(const TenantId& tenant, uint32_t weight, uint8_t max_priority, uint32_t max_open,
                const hz_neg_request& request, DecisionFn done) override;
  Status Counter(const TenantId& tenant, uint64_t negotiation_id, const hz_neg_request& request,
                 DecisionFn done) override;
  Status Accept(const TenantId& tenant, uint64_t offer_id, uint64_t* reservation_id) override;
  Status Decline(const TenantId& tenant, uint64_t negotiation_id) override;
  Status Release(const TenantId& tenant, const hz_neg_release_args& args) override;
  Status DeclareHint(const TenantId& tenant, const hz_hint_declare_args& args,
                     hz_hint_declare_result* result) override;

  // Operator commands (control API), for the registry (provider_commands.cc).
  static std::span<const CommandSpec<Provider>> Commands();

  nlohmann::json Counters() const;
  // The same counters as Prometheus families, into the service's scrape.
  void CollectMetrics(prometheus::Registry* r) const;

  // What removing the tenant would take from it here ("2 device
  // allocations", "1 reservation"); empty when it holds nothing.
  std::vector<std::string> TenantHoldings(const TenantId& tenant);
  // The tenant is removed: its negotiations close, its reservations and
  // allocations are released, and its permutation seed, VM and hint are
  // forgotten, so that a tenant created later under the same name starts
  // with nothing of it.
  Status ForgetTenant(const TenantId& tenant);

  // One decision point (Decide, Tick, health assignments); the decision
  // thread's timer calls it.
  void DecisionPoint();
  // One health poll; the timer calls it.
  void PollHealth();

 private:
  static uint64_t Now();
  // Runs tick every interval_ms (0: never) on the timer's io_context.
  void ArmEvery(boost::asio::steady_timer& timer, uint64_t interval_ms, void (Provider::*tick)());
  // Under mu_: health monitor assignments follow the scheduler's, and the
  // hint engine learns the tenants' GPU counts.
  void SyncLocked();
  // Under mu_: the device assigned to the health monitor as the tenant's
  // index; empty when none is.
  std::string BdfAssignedLocked(const TenantId& tenant, uint32_t index) const;
  // Under mu_: a replacement offer for what a failure took, when a healthy
  // device of its kind is free.
  void OfferReplacementLocked(const scheduler::DeviceLoss& loss, uint64_t now);
  // Operator commands, one per entry of Commands().
  CommandResult Inventory(const nlohmann::json& req);
  CommandResult AllocationList(const nlohmann::json& req);
  CommandResult Alloc(const nlohmann::json& req);
  CommandResult ReleaseAllocation(const nlohmann::json& req);
  CommandResult SpreadList(const nlohmann::json& req);
  // Places on this host only.
  CommandResult AllocHere(const std::string& tenant, const scheduler::Request& request);
  CommandResult DeviceFail(const nlohmann::json& req);
  CommandResult DeviceDegrade(const nlohmann::json& req);
  CommandResult DeviceRepair(const nlohmann::json& req);
  CommandResult TenantDomain(const nlohmann::json& req);
  CommandResult NegotiationList(const nlohmann::json& req);
  CommandResult ChangeDevice(const std::string& cmd, const nlohmann::json& req);
  nlohmann::json NegotiationJson();

  ServiceConfig config_;
  events::EventSink* sink_;
  std::unique_ptr<scheduler::LibvirtAttacher> virt_;
  std::unique_ptr<scheduler::Scheduler> sched_;
  ResourcesView view_;
  std::unique_ptr<SchedulerResources> resources_;          // the scheduler's capacity
  std::unique_ptr<negotiation::ResourceProvider> viewed_;  // view_ of resources_, if any
  std::unique_ptr<negotiation::NegotiationEngine> engine_;
  std::unique_ptr<negotiation::HintEngine> hints_;
  std::unique_ptr<events::HealthMonitor> health_;
  std::unique_ptr<SpreadAllocations> spread_;  // in a cluster only
  boost::asio::io_context decide_io_;          // the decision thread's
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>
      decide_work_;
  std::thread decide_thread_;
  boost::asio::steady_timer decide_timer_;  // on decide_io_
  boost::asio::steady_timer health_timer_;  // on the service's io_context
  // Shared with the timer handlers, which may run after Stop().
  std::shared_ptr<std::atomic<bool>> alive_ = std::make_shared<std::atomic<bool>>(true);

  mutable std::mutex mu_;                   // engine_, health_, the maps below
  std::map<uint64_t, DecisionFn> waiting_;  // negotiation id -> the device's request
  std::map<std::string, std::pair<TenantId, uint32_t>> assigned_;  // bdf -> tenant, index
  std::map<TenantId, uint32_t> gpus_;  // tenant -> GPUs the hint engine was told
  // Devices the health monitor found lost during a poll, for PollHealth to
  // hand to the scheduler after it.
  struct LostDevice {
    TenantId tenant;
    uint32_t index = 0;
    std::string bdf;  // as assigned to the monitor; empty if unknown
  };
  std::vector<LostDevice> lost_;
  // Metrics, readable without mu_.
  std::atomic<uint64_t> decisions_{0};
  std::atomic<uint64_t> offers_made_{0};
  std::atomic<uint64_t> health_polls_{0};
  std::atomic<uint64_t> devices_lost_{0};
  std::atomic<uint64_t> waiting_count_{0};   // waiting_.size()
  std::atomic<uint64_t> assigned_count_{0};  // assigned_.size()
};

}  // namespace hz::service

#endif  // HZ_SERVICE_PROVIDER_H_
