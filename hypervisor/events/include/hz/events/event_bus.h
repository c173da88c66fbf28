// The event bus: one durable, sequence-numbered log per tenant, read through
// per-subscriber Delivery objects.
//
// Layout on disk, under BusOptions::dir:
//   <tenant>/events.log   framed records (event_log.h), append-only, compacted
//   <tenant>/state.json   subscriber cursors and approvals, replaced atomically
//
// Thread-safe: publishers, deliveries and acks may run on any thread. Cursor
// writes run on the bus's own writer thread (AckAsync), so an ack never
// waits for the disk on the caller's thread. The bus knows nothing of
// rings; the service turns "a buffer was posted" into Delivery::Next() and
// writes the returned record into the buffer.
#ifndef HZ_EVENTS_EVENT_BUS_H_
#define HZ_EVENTS_EVENT_BUS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hz/common/status.h"
#include "hz/common/status_or.h"
#include "hz/common/tenant_id.h"
#include "hz/events/event_spec.h"
#include "protocol/harmonaize.h"

namespace hz::events {

enum class FsyncPolicy {
  kNone,    // leave flushing to the kernel: survives a process crash, not power loss
  kAlways,  // fdatasync every append and every cursor update
};

struct BusOptions {
  std::string dir;            // root directory of the tenant logs
  uint64_t retention = 4096;  // events kept per tenant (>= 1)
  FsyncPolicy fsync = FsyncPolicy::kAlways;
  std::function<uint64_t()> clock;  // unix seconds; the system clock when empty
  // Replaces a tenant's state.json; WriteFileAtomic when empty. Tests hold
  // or fail the write through it.
  std::function<Status(const std::string& path, const std::string& contents, bool sync)>
      write_state;
};

class TenantLog;
class StateWriter;
struct SubscriberState;
struct ApprovalHolder;

// Where one subscriber's delivery stands, for handing it to another process
// of the service (a live upgrade): the durable cursor is on disk already,
// the rest lives only in memory.
struct DeliveryPosition {
  bool subscribed = false;
  uint64_t topics = 0;     // HZ_TOPIC_MASK bits, LOST included
  uint64_t next = 1;       // the next seq to consider
  uint64_t delivered = 0;  // the highest seq delivered (what an ack may name)
};

// One subscriber of one tenant: the guest's event queue on one device, or a
// tool. Its cursor (last acknowledged seq) is durable and keyed by the
// subscriber name, so a new Delivery with the same names resumes there.
class Delivery {
 public:
  ~Delivery();
  Delivery(const Delivery&) = delete;
  Delivery& operator=(const Delivery&) = delete;

  // EVENT_SUBSCRIBE. topics: HZ_TOPIC_MASK bits (LOST is always added);
  // from_seq: HZ_SEQ_CURSOR to resume after the cursor, or the first seq wanted
  // (at most next_seq). Events are delivered only after a subscribe.
  Status Subscribe(const hz_event_subscribe_args& args, hz_event_subscribe_result* result);

  // "A buffer was posted": writes the next record for this subscriber into
  // *out and returns true, or returns false when there is nothing to deliver.
  // Events this subscriber received before carry HZ_EVENT_F_REPLAY. When the
  // position fell behind the retained window, the next record is one LOST
  // record (seq = last lost seq) before the remaining events.
  bool Next(hz_event* out);

  // True when Next() would return a record.
  bool Pending();

  // Where the delivery stands, and the same position taken up by a Delivery
  // of the same subscriber in the next process. Resume checks the position
  // against this log (it comes from outside) and never moves the durable
  // cursor.
  DeliveryPosition Position() const;
  Status Resume(const DeliveryPosition& position);
  // The subscriber went to the next process: the destructor then leaves
  // the state file, which that process owns now, alone.
  void Abandon() { abandoned_ = true; }

  // EVENT_ACK: moves the cursor (durably) to seq, which must not exceed the
  // highest seq delivered. HZ_ACK_F_APPROVE approves the event `seq` itself,
  // which must be a retained, APPROVABLE maintenance or preemption event.
  // Waits until the cursor is on disk (AckAsync, then done).
  Status Ack(const hz_event_ack_args& args);

  // EVENT_ACK without waiting for the disk. The ack is checked at once and
  // done runs exactly once with its outcome: before AckAsync returns when
  // nothing needs writing (an invalid ack, or one that moves nothing, with no
  // earlier ack of this subscriber still waiting), otherwise on the bus's
  // writer thread once the cursor and approval are durable, or the write
  // failed (they then stay as they were). Acks that arrive while a write is
  // in progress are persisted together by the next one. One subscriber's
  // acks complete in the order they were made. Once the bus is being
  // destroyed, acks it will not write get kShutdown. done must not call
  // back into this Delivery.
  using AckDone = std::function<void(Status)>;
  void AckAsync(const hz_event_ack_args& args, AckDone done);

  // Called (from the publisher's thread, no bus lock held) whenever an event
  // this subscriber wants is published, or when it fell behind the retained
  // window. The callback may call Next() and Pending(); it must not call
  // SetNotify() or destroy the Delivery (both wait for a running callback).
  // The callback is not called after the Delivery's destructor returns.
  void SetNotify(std::function<void()> notify);

  const TenantId& tenant() const;
  const std::string& subscriber() const;

 private:
  friend class EventBus;
  Delivery(std::shared_ptr<TenantLog> log, std::shared_ptr<SubscriberState> state);

  std::shared_ptr<TenantLog> log_;
  std::shared_ptr<SubscriberState> state_;
  bool abandoned_ = false;
};

struct TenantSummary {
  uint64_t next_seq = 1;    // seq of the next event
  uint64_t oldest_seq = 1;  // oldest retained (== next_seq when empty)
  uint64_t approvals = 0;   // approvals recorded
  struct Binding {
    std::string name;
    uint64_t cursor = 0;     // last acknowledged seq
    uint64_t delivered = 0;  // highest seq delivered
    bool connected = false;  // a session holds it now
  };
  std::vector<Binding> bindings;   // by name
  std::vector<uint64_t> approved;  // seqs approved early, ascending
};

class EventBus : public EventSink {
 public:
  using ApprovalCallback = std::function<void(const TenantId& tenant, const hz_event& event)>;

  // Creates options.dir if needed. Tenant logs are opened (and recovered) on
  // first use.
  static Status Open(BusOptions options, std::unique_ptr<EventBus>* bus);
  ~EventBus() override;

  // Appends to the tenant's log. The event is durable per the fsync policy
  // when this returns OK; *seq (optional) receives its sequence number.
  Status Publish(const TenantId& tenant, const EventSpec& spec, uint64_t* seq) override;

  // A delivery for (tenant, subscriber). At most one live Delivery per pair:
  // a second one fails with kState until the first is destroyed (a
  // reconnecting guest's old Delivery goes away with its old session).
  Status Connect(const TenantId& tenant, const std::string& subscriber,
                 std::unique_ptr<Delivery>* delivery);

  // Operator side: told when a tenant approves an event early.
  void SetApprovalCallback(ApprovalCallback callback);

  Status Summary(const TenantId& tenant, TenantSummary* summary);

  // Reads a retained event by seq (hzctl inspection, tests).
  Status Get(const TenantId& tenant, uint64_t seq, hz_event* event);

  // Whether anything was ever published to the tenant's log. An unreadable
  // log or cursor file is an error, not "no".
  StatusOr<bool> HoldsEvents(const TenantId& tenant);
  // Deletes the tenant's log, cursors and approvals, so that a tenant
  // created later under the same name starts with an empty log. kBusy while
  // a delivery of the tenant is connected.
  Status Forget(const TenantId& tenant);

 private:
  explicit EventBus(BusOptions options);
  Status Tenant(const TenantId& tenant, std::shared_ptr<TenantLog>* log);

  // A tenant whose log was found damaged in the middle, and the file as it
  // was then (see Tenant()).
  struct DamagedLog {
    Status status;
    std::string identity;
  };

  BusOptions options_;
  std::mutex mu_;  // guards tenants_ and damaged_
  std::map<TenantId, std::shared_ptr<TenantLog>> tenants_;
  std::map<TenantId, DamagedLog> damaged_;
  std::shared_ptr<ApprovalHolder> approval_;
  // Writes the tenants' state files; shared with the logs, which may outlive
  // the bus (a Delivery still held).
  std::shared_ptr<StateWriter> writer_;
};

}  // namespace hz::events

#endif  // HZ_EVENTS_EVENT_BUS_H_
