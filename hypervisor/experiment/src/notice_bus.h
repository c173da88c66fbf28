// The event bus in the emulator's loop: harmonaized's own EventBus (a
// durable, sequence-numbered log per tenant, event_bus.h) in a scratch
// directory that goes with it, on simulated time. The provider publishes
// its notices and the negotiation engine its offers to a job's tenant; the
// tenant's subscriber reads them from the log, with the deadline the bus
// stored (rounded down to 10 s, as every tenant is told). When a tenant
// reads is the emulator's model of delivery (a push or a poll). A tenant
// approves an approvable notice early with the EVENT_ACK a guest sends, and
// the provider hears of it through the bus's approval callback.
#ifndef HZ_EXPERIMENT_SRC_NOTICE_BUS_H_
#define HZ_EXPERIMENT_SRC_NOTICE_BUS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "hz/common/status.h"
#include "hz/events/event_bus.h"

namespace hz::experiment {

// A job's tenant: one per job. The trace names no users, and a tenant per
// job keeps the negotiation engine's weighted usage from ranking one job's
// replacement by another's history.
TenantId TenantOf(size_t job);

// The bus and the negotiation engine count whole seconds; an instant of
// simulated time counts from the second it falls in at the latest, so
// nothing is acted on early.
uint64_t SimSeconds(double t);

class NoticeBus final : public events::EventSink {
 public:
  // `clock` gives the simulated time in seconds.
  static Status Open(std::function<uint64_t()> clock, std::unique_ptr<NoticeBus>* out);
  ~NoticeBus() override;

  Status Publish(const TenantId& tenant, const events::EventSpec& spec, uint64_t* seq) override;
  // What reached the tenant's log since its subscriber last read, in order.
  std::vector<hz_event> Read(const TenantId& tenant);
  // The tenant approves event `seq` (read before) early: EVENT_ACK with
  // HZ_ACK_F_APPROVE. The approval callback has run when this returns OK.
  Status Approve(const TenantId& tenant, uint64_t seq);
  // Told of every early approval, on the caller's thread of Approve.
  void SetApprovalCallback(events::EventBus::ApprovalCallback callback);
  // The tenant is gone: its log and subscriber go too, so the scratch
  // directory holds only the tenants still running.
  void Forget(const TenantId& tenant);

 private:
  explicit NoticeBus(std::string dir) : dir_(std::move(dir)) {}

  std::string dir_;
  std::unique_ptr<events::EventBus> bus_;
  std::map<TenantId, std::unique_ptr<events::Delivery>> readers_;
  // Tenants with a log: each holds its file open until forgotten.
  std::set<TenantId> published_;
};

}  // namespace hz::experiment

#endif  // HZ_EXPERIMENT_SRC_NOTICE_BUS_H_
