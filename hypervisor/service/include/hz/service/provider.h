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
#include "hz/service/config.h"
#include "hz/service/scheduler_resources.h"
#include "protocol/harmonaize.h"

namespace hz::service {

class Provider {
 public:
  // Receives the decision of a request the device keeps pending.
  using DecisionFn = std::function<void(const negotiation::Decision&)>;

  Provider(const ServiceConfig& config, boost::asio::io_context& io, events::EventSink* sink);
  ~Provider();
  Provider(const Provider&) = delete;
  Provider& operator=(const Provider&) = delete;

  // Opens the scheduler (and libvirt) and starts the timers.
  Status Start();
  // Cancels the timers and forgets waiting requests (on the io_context's thread
  // or after it stopped).
  void Stop();

  // HZ_F_TOPOLOGY | HZ_F_NEGOTIATION | HZ_F_HINTS.
  uint64_t Features() const;

  // TOPOLOGY_GET: the tenant's private summary.
  Status Summary(const TenantId& tenant, std::vector<uint8_t>* bytes);

  // NEG_REQUEST / NEG_COUNTER: queued; `done` runs (any thread) at the
  // decision point. weight and max_priority are the tenant's operator policy.
  Status Submit(const TenantId& tenant, uint32_t weight, uint8_t max_priority,
                const hz_neg_request& request, DecisionFn done);
  Status Counter(const TenantId& tenant, uint64_t negotiation_id, const hz_neg_request& request,
                 DecisionFn done);
  Status Accept(const TenantId& tenant, uint64_t offer_id, uint64_t* reservation_id);
  Status Decline(const TenantId& tenant, uint64_t negotiation_id);
  Status Release(const TenantId& tenant, const hz_neg_release_args& args);

  // HINT_DECLARE.
  Status DeclareHint(const TenantId& tenant, const hz_hint_declare_args& args,
                     hz_hint_declare_result* result);

  // Operator commands (control API): Handles says which are the provider's.
  static bool Handles(const std::string& cmd);
  StatusOr<nlohmann::json> Command(const std::string& cmd, const nlohmann::json& req);

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
  StatusOr<nlohmann::json> Run(const std::string& cmd, const nlohmann::json& req);
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
