// The device-facing interfaces of the macro-level engines (ckpt_backend.h,
// event_backend.h) on the engines Engines owns.
#ifndef HZ_SERVICE_ENGINE_ADAPTERS_H_
#define HZ_SERVICE_ENGINE_ADAPTERS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "hz/checkpoint/engine.h"
#include "hz/events/event_bus.h"
#include "hz/service/ckpt_backend.h"
#include "hz/service/event_backend.h"

namespace hz::service {

// CkptBackend on hz::checkpoint::Engine.
class CkptAdapter : public CkptBackend {
 public:
  explicit CkptAdapter(checkpoint::Engine& engine) : engine_(engine) {}

  Status SetPolicy(const TenantId& tenant, checkpoint::StreamId stream,
                   const checkpoint::Policy& policy) override {
    return engine_.SetPolicy(tenant, stream, policy);
  }
  Status Save(const checkpoint::SaveRequest& req, checkpoint::SaveResult* result) override {
    return engine_.Save(req, result);
  }
  Status Restore(const checkpoint::RestoreRequest& req,
                 checkpoint::RestoreResult* result) override {
    return engine_.Restore(req, result);
  }
  Status List(const TenantId& tenant, checkpoint::StreamId stream, uint64_t start_after_step,
              uint32_t max_entries, std::vector<checkpoint::ListEntry>* entries,
              bool* more) override {
    return engine_.List(tenant, stream, start_after_step, max_entries, entries, more);
  }
  Status Delete(const TenantId& tenant, checkpoint::StreamId stream, uint64_t step) override {
    return engine_.Delete(tenant, stream, step);
  }
  Status DeclareQuiesce(const TenantId& tenant, checkpoint::StreamId stream,
                        checkpoint::IoSpan word,
                        std::span<const checkpoint::IoSpan> slices) override {
    return engine_.DeclareQuiesce(tenant, stream, word, slices);
  }
  Status CancelQuiesce(const TenantId& tenant, checkpoint::StreamId stream) override {
    return engine_.CancelQuiesce(tenant, stream);
  }
  bool ClaimQuiesce(const TenantId& tenant, checkpoint::StreamId stream, const void* owner,
                    const std::string& vm) override;
  void ReleaseQuiesce(const TenantId& tenant, checkpoint::StreamId stream,
                      const void* owner) override;
  void RunAsync(const TenantId& tenant, std::function<void()> fn) override {
    engine_.RunAsync(tenant, std::move(fn));
  }
  // The tenant's streams whose quiescence registration came from one of vms.
  std::set<checkpoint::StreamId> StreamsOf(const TenantId& tenant,
                                           const std::set<std::string>& vms);

 private:
  struct Claim {
    const void* owner;
    std::string vm;
  };
  checkpoint::Engine& engine_;
  std::mutex mu_;
  std::map<std::pair<TenantId, checkpoint::StreamId>, Claim> quiesce_;
};

// EventBackend on hz::events::EventBus; counts the records delivered.
class BusAdapter : public EventBackend {
 public:
  explicit BusAdapter(events::EventBus& bus) : bus_(bus) {}

  Status Connect(const TenantId& tenant, const std::string& subscriber,
                 std::unique_ptr<EventSubscription>* out) override;
  void CountDelivered(uint64_t n) override { delivered_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t delivered() const { return delivered_.load(std::memory_order_relaxed); }

 private:
  events::EventBus& bus_;
  std::atomic<uint64_t> delivered_{0};
};

}  // namespace hz::service

#endif  // HZ_SERVICE_ENGINE_ADAPTERS_H_
