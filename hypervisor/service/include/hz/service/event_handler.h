// EVENT_SUBSCRIBE, EVENT_ACK and the event queue (SPEC §8) of one device.
// The handler binds its VM's tenant to the event bus (an EventBackend) under
// the VM's socket path, so the durable cursor survives reconnects, and fills
// the buffers the guest posts on queue 1 with the next record as soon as one
// exists. EVENT_ACK waits in the PendingTable while the bus's writer thread
// makes the cursor durable, so the connection's executor (shared with other
// VMs) never waits for the disk; its answer comes back through the
// executor. Without an event engine the buffers are still held, and handed
// back unused when the ring stops or the service drains (SPEC §2.8).
#ifndef HZ_SERVICE_EVENT_HANDLER_H_
#define HZ_SERVICE_EVENT_HANDLER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hz/service/device_state.h"
#include "hz/service/event_backend.h"
#include "hz/service/family_handler.h"
#include "hz/service/request.h"
#include "hz/service/tenants.h"
#include "vdev/device.h"

namespace hz::service {

class EventQueueHandler : public FamilyHandler {
 public:
  EventQueueHandler(EventBackend* backend, const HandlerContext& ctx, const QueueSlots& queues,
                    const Tenant& tenant, const std::string& socket_path);
  ~EventQueueHandler() override;

  uint64_t Features() const override;
  // The subscription ends with the session; the held buffers stay while
  // their ring does.
  void EndSession(SessionEnd end) override;
  // The held buffers go back unused; acks waiting for their write are
  // answered HZ_S_ESHUTDOWN (the write itself still happens).
  void Drain() override;
  // A live upgrade: the held buffers go back to the ring unanswered (the
  // next process holds them again), the subscription's position goes with
  // the session, and this process lets go of it without writing the state
  // the next process now owns.
  void OnQueueFreezing(vdev::Queue& queue) override;
  Status SaveState(nlohmann::json* out) const override;
  Status RestoreState(const nlohmann::json& in) override;
  void OnHandedOver() override;

  Reply Handle(const vdev::Queue& queue, const Request& req);

  // The guest posted buffers on the event queue.
  void OnKick(vdev::Queue& queue);
  // The front-end takes the event ring back: the buffers go back unused.
  void OnQueueStopping() { ReturnBuffers(); }
  // The event ring is gone, and the buffers with it.
  void OnQueueStopped() { held_.clear(); }

  size_t held() const { return held_.size(); }
  // Where the subscription stands (all zero without one).
  events::DeliveryPosition position() const;

 private:
  // EVENT_ACK: answered once the bus wrote the cursor (OnAckDone).
  // Binds the session to the bus (the first EVENT_SUBSCRIBE, or a restore).
  Status Connect();
  Reply Ack(const vdev::Queue& queue, const Request& req, const hz_event_ack_args& args);
  void OnAckDone(uint64_t id, const Status& status);
  // Fills held buffers with the subscription's next records.
  void Fill();
  // Completes every held buffer unused (SPEC §2.8).
  void ReturnBuffers();

  EventBackend* const backend_;  // null: events are not offered
  const HandlerContext ctx_;
  const QueueSlots& queues_;
  const Tenant& tenant_;
  const std::string& socket_path_;
  std::vector<std::pair<vdev::Chain, uint64_t>> held_;  // buffers and their ring's generation
  std::unique_ptr<EventSubscription> subscription_;     // the session's
};

}  // namespace hz::service

#endif  // HZ_SERVICE_EVENT_HANDLER_H_
