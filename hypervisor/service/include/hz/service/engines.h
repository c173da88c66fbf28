// The macro-level engines the service wires into every device: the event bus
// (durable per-tenant logs under <state_dir>/events) and the checkpoint
// engine (<state_dir>/checkpoints). One Engines object per service, shared by
// every HzDevice through DeviceEnv; thread-safe.
//
// The checkpoint engine's events go to the tenant's log on the bus, and a
// MAINTENANCE or PREEMPTION notice published through the operator triggers
// its just-in-time saves (OnNotice) on a thread of its own.
#ifndef HZ_SERVICE_ENGINES_H_
#define HZ_SERVICE_ENGINES_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz/checkpoint/engine.h"
#include "hz/common/status.h"
#include "hz/common/status_or.h"
#include "hz/events/event_bus.h"
#include "hz/service/config.h"

namespace hz::service {

class Engines {
 public:
  explicit Engines(const ServiceConfig& config);
  ~Engines();
  Engines(const Engines&) = delete;
  Engines& operator=(const Engines&) = delete;

  // Opens the engines' state under the state directory.
  Status Start();

  events::EventBus* bus() const { return bus_.get(); }
  checkpoint::Engine* ckpt() const { return ckpt_.get(); }

  // Quiescence registrations belong to one session at a time (SPEC §7.5.7):
  // Claim returns false when another owner holds (tenant, stream).
  bool ClaimQuiesce(const TenantId& t, checkpoint::StreamId s, const void* owner);
  void ReleaseQuiesce(const TenantId& t, checkpoint::StreamId s, const void* owner);
  // Feature bits (1 << HZ_F_*) of the engines that are running.
  uint64_t Features() const;

  // Operator commands (control API): Handles says which are the engines'.
  static bool Handles(const std::string& cmd);
  StatusOr<nlohmann::json> Command(const std::string& cmd, const nlohmann::json& req);

  void CountDelivered(uint64_t n) { delivered_.fetch_add(n, std::memory_order_relaxed); }

  nlohmann::json Counters() const;
  std::string MetricsText() const;  // Prometheus text, appended to the service's

 private:
  class CkptSink;
  StatusOr<nlohmann::json> InjectEvent(const nlohmann::json& req);
  StatusOr<nlohmann::json> ListCheckpoints(const nlohmann::json& req);
  StatusOr<nlohmann::json> EventStatus(const nlohmann::json& req);
  void PublishCheckpoint(const checkpoint::CheckpointEvent& e);
  // Just-in-time saves for a notice published to tenant (any thread).
  void Notice(const TenantId& tenant, const hz_event& ev);

  ServiceConfig config_;
  std::unique_ptr<events::EventBus> bus_;
  std::unique_ptr<CkptSink> sink_;
  std::unique_ptr<checkpoint::Engine> ckpt_;

  std::mutex mu_;  // everything below
  std::map<std::pair<TenantId, checkpoint::StreamId>, const void*> quiesce_;
  std::vector<std::thread> notices_;  // joined on destruction
  std::atomic<uint64_t> published_{0};
  std::atomic<uint64_t> delivered_{0};
  std::atomic<uint64_t> ckpt_events_{0};
  std::atomic<uint64_t> jit_notices_{0};
};

}  // namespace hz::service

#endif  // HZ_SERVICE_ENGINES_H_
