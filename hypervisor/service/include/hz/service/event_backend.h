// What the per-VM device needs from the event bus (SPEC §8). The service runs
// it on hz::events::EventBus (Engines::events()); tests substitute their own.
#ifndef HZ_SERVICE_EVENT_BACKEND_H_
#define HZ_SERVICE_EVENT_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "hz/common/status.h"
#include "hz/common/tenant_id.h"
#include "hz/events/event_bus.h"
#include "protocol/harmonaize.h"

namespace hz::service {

// One session's subscription to its tenant's events. Same contracts as
// hz::events::Delivery (see event_bus.h); destroying it ends the session's
// binding, and no notify runs after the destructor returned.
class EventSubscription {
 public:
  virtual ~EventSubscription() = default;
  // EVENT_SUBSCRIBE.
  virtual Status Subscribe(const hz_event_subscribe_args& args,
                           hz_event_subscribe_result* result) = 0;
  // The next record for a posted buffer; false when there is none. A record
  // returned counts as delivered.
  virtual bool Next(hz_event* out) = 0;
  // EVENT_ACK. done runs once with the outcome, after the cursor is
  // durable: on any thread, possibly before Ack returns. It must not
  // destroy the subscription.
  virtual void Ack(const hz_event_ack_args& args, std::function<void(Status)> done) = 0;
  // notify runs on a publisher's thread when a record may be ready; it must
  // not destroy the subscription.
  virtual void SetNotify(std::function<void()> notify) = 0;
  // Where the delivery stands, and taking that position up in the next
  // process of the service (Delivery::Position, Delivery::Resume).
  virtual events::DeliveryPosition Position() const { return {}; }
  virtual Status Resume(const events::DeliveryPosition& /*position*/) {
    return Status::NotSupported("this event backend cannot resume a delivery");
  }
  // The next process took the subscriber over: destroying this one must
  // not write what that process owns now (Delivery::Abandon).
  virtual void Abandon() {}
};

class EventBackend {
 public:
  virtual ~EventBackend() = default;
  // Binds a session to the tenant's log under subscriber, a stable name of
  // the VM: its durable cursor survives reconnects.
  virtual Status Connect(const TenantId& tenant, const std::string& subscriber,
                         std::unique_ptr<EventSubscription>* out) = 0;
  // Records written into guests' event buffers, for the service's counters.
  virtual void CountDelivered(uint64_t n) = 0;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_EVENT_BACKEND_H_
