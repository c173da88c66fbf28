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
// the timers) holds mu_. The scheduler locks itself and calls nothing back.
// Decisions are handed to the waiting devices through callbacks that only
// post to the device's executor.
//
// Timers run on the service's io_context: the decision point (Decide + Tick)
// every negotiation.decide_interval_ms and the health poll every
// scheduler.health_poll_ms.
#ifndef HZ_SERVICE_PROVIDER_H_
#define HZ_SERVICE_PROVIDER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <vector>

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
#include "protocol/harmonaize.h"

namespace hz::service {

// The devices reach it as their ProviderBackend.
class Provider : public ProviderBackend {
 public:
  Provider(const ServiceConfig& config, boost::asio::io_context& io, events::EventSink* sink);
  ~Provider() override;
  Provider(const Provider&) = delete;
  Provider& operator=(const Provider&) = delete;

  // Opens the scheduler (and libvirt) and starts the timers.
  Status Start();
  // Cancels the timers and forgets waiting requests (on the io_context's thread
  // or after it stopped).
  void Stop();

  // ProviderBackend
  Status Summary(const TenantId& tenant, std::vector<uint8_t>* bytes) override;
  Status Submit(const TenantId& tenant, uint32_t weight, uint8_t max_priority,
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

  // One decision point (Decide, Tick, health assignments); the timer calls it.
  void DecisionPoint();
  // One health poll; the timer calls it.
  void PollHealth();

 private:
  static uint64_t Now();
  // Runs tick every interval_ms (0: never) on the service's io_context.
  void ArmEvery(boost::asio::steady_timer& timer, uint64_t interval_ms, void (Provider::*tick)());
  // Under mu_: health monitor assignments follow the scheduler's, and the
  // hint engine learns the tenants' GPU counts.
  void SyncLocked();
  // Under mu_: a replacement offer for what a failure took, when a healthy
  // device of its kind is free.
  void OfferReplacementLocked(const scheduler::DeviceLoss& loss, uint64_t now);
  // Operator commands, one per entry of Commands().
  CommandResult Inventory(const nlohmann::json& req);
  CommandResult AllocationList(const nlohmann::json& req);
  CommandResult Alloc(const nlohmann::json& req);
  CommandResult ReleaseAllocation(const nlohmann::json& req);
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
  std::unique_ptr<SchedulerResources> resources_;  // the engine's view of sched_
  std::unique_ptr<negotiation::NegotiationEngine> engine_;
  std::unique_ptr<negotiation::HintEngine> hints_;
  std::unique_ptr<events::HealthMonitor> health_;
  boost::asio::steady_timer decide_timer_;
  boost::asio::steady_timer health_timer_;
  // Shared with the timer handlers, which may run after Stop().
  std::shared_ptr<std::atomic<bool>> alive_ = std::make_shared<std::atomic<bool>>(true);

  mutable std::mutex mu_;                   // engine_, health_, everything below
  std::map<uint64_t, DecisionFn> waiting_;  // negotiation id -> the device's request
  std::map<std::string, std::pair<TenantId, uint32_t>> assigned_;  // bdf -> tenant, index
  std::map<TenantId, uint32_t> gpus_;  // tenant -> GPUs the hint engine was told
  uint64_t decisions_ = 0;
  uint64_t offers_made_ = 0;
  uint64_t health_polls_ = 0;
  uint64_t devices_lost_ = 0;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_PROVIDER_H_
