// One tenant's event log as the bus keeps it: the retained events, each
// subscriber's cursor and REPLAY marks, the approvals given, and the acks
// waiting for the state write that makes them durable. Private to the bus;
// Delivery and EventBus (event_bus.h) are the interface.
#ifndef HZ_EVENTS_TENANT_LOG_H_
#define HZ_EVENTS_TENANT_LOG_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "hz/events/event_bus.h"
#include "hz/events/event_log.h"
#include "state_writer.h"

namespace hz::events {

// mkdir (0700) that accepts an existing directory; *created says which.
Status MakeDir(const std::string& dir, bool* created = nullptr);

// Shared by the bus and its tenant logs, so a Delivery that outlives the bus
// still finds a valid (possibly empty) callback.
struct ApprovalHolder {
  std::mutex mu;
  EventBus::ApprovalCallback callback;
};

struct SubscriberState {
  std::string name;
  uint64_t cursor = 0;  // last acknowledged seq (durable)
  // Highest seq ever delivered, for HZ_EVENT_F_REPLAY. Saved with every
  // cursor update and when the delivery goes away, not on every delivery: a
  // host crash in between can lose REPLAY marks, never events.
  uint64_t delivered = 0;
  uint64_t saved_delivered = 0;
  uint64_t writing_delivered = 0;  // what the write in progress saves
  // This subscriber's acks queued or being written (under the log's mutex):
  // a later ack waits behind them, so acks complete in order.
  uint64_t acks_waiting = 0;
  // Live fields, meaningful while a Delivery holds this subscriber.
  bool connected = false;
  bool subscribed = false;
  uint64_t mask = 0;
  uint64_t pos = 1;  // next seq to consider
  // Held while the notify callback runs, so clearing it waits for a running call.
  std::mutex notify_mu;
  std::function<void()> notify;
};

// An EVENT_ACK checked and waiting for the state write that makes it durable.
struct PendingAck {
  std::shared_ptr<SubscriberState> sub;
  uint64_t seq = 0;
  bool needs_write = false;  // it moves the durable cursor or approves
  bool approve = false;
  hz_event approved{};  // the event approved, for the operator's callback
  Status status;        // a failed check, answered in turn without a write
  Delivery::AckDone done;
};

class TenantLog : public std::enable_shared_from_this<TenantLog> {
 public:
  TenantLog(TenantId tenant, std::string dir, const BusOptions& options,
            std::shared_ptr<ApprovalHolder> approval, std::shared_ptr<StateWriter> writer)
      : tenant_(std::move(tenant)),
        dir_(std::move(dir)),
        retention_(options.retention),
        sync_(options.fsync == FsyncPolicy::kAlways),
        clock_(options.clock),
        write_state_(options.write_state),
        approval_(std::move(approval)),
        writer_(std::move(writer)) {}

  Status Open();
  // After a failed Open: whether events.log was damaged in the middle.
  bool log_damaged() const { return log_damaged_; }
  Status Publish(const EventSpec& spec, uint64_t* seq);
  Status Connect(const std::string& subscriber, std::shared_ptr<SubscriberState>* state);
  // save: write the delivery marks that changed (not for a subscriber
  // handed to the next process, which owns the state file then).
  void Disconnect(SubscriberState& state, bool save);
  Status Subscribe(SubscriberState& state, const hz_event_subscribe_args& args,
                   hz_event_subscribe_result* result);
  bool Next(SubscriberState& state, hz_event* out);
  bool Pending(SubscriberState& state);
  DeliveryPosition Position(const SubscriberState& state) const;
  Status Resume(SubscriberState& state, const DeliveryPosition& position);
  void AckAsync(const std::shared_ptr<SubscriberState>& state, const hz_event_ack_args& args,
                Delivery::AckDone done);
  // Waits until no state write of this log is queued or running.
  void WaitWritten();
  void Summary(TenantSummary* summary);
  Status Get(uint64_t seq, hz_event* event);
  const TenantId& tenant() const { return tenant_; }

 private:
  uint64_t OldestLocked() const { return events_.empty() ? next_seq_ : events_.front().seq; }
  const hz_event* FindLocked(uint64_t seq) const;
  Status ApprovableLocked(const hz_event& ev) const;
  bool NextLocked(SubscriberState& state, hz_event* out, bool consume);
  Status LoadState();
  // Checks an ack against the subscriber's state; fills ack.
  Status CheckAckLocked(SubscriberState& state, const hz_event_ack_args& args, PendingAck* ack);
  // Has the writer write the state file soon; false when it has stopped.
  bool ScheduleWriteLocked();
  // One write of state.json with every ack queued so far; then answers
  // them. True when more is due (acks that arrived meanwhile).
  bool WriteStateOnce();
  std::string StateJsonLocked(const std::deque<PendingAck>& batch);
  // The write of batch succeeded: cursors and approvals become what it wrote.
  void ApplyWrittenLocked(const std::deque<PendingAck>& batch, std::vector<hz_event>* approved);
  // Keeps a copy of a log damaged in the middle and says where, for the operator.
  Status KeepDamagedLog(const Status& found);

  const TenantId tenant_;
  const std::string dir_;
  const uint64_t retention_;
  const bool sync_;
  const std::function<uint64_t()> clock_;
  const std::function<Status(const std::string&, const std::string&, bool)> write_state_;
  const std::shared_ptr<ApprovalHolder> approval_;
  const std::shared_ptr<StateWriter> writer_;

  std::mutex write_mu_;  // one state write at a time, from whichever thread
  mutable std::mutex mu_;
  std::condition_variable written_;  // with mu_: write_queued_ went false
  RecordFile file_;
  std::deque<hz_event> events_;  // retained, increasing seq
  uint64_t next_seq_ = 1;
  std::map<std::string, std::shared_ptr<SubscriberState>> subscribers_;
  std::set<uint64_t> approved_;
  bool log_damaged_ = false;
  std::deque<PendingAck> acks_;  // waiting for the next state write, in arrival order
  bool write_queued_ = false;    // the writer holds a job for this log
  bool state_dirty_ = false;     // delivered marks to save, with or without acks
};

}  // namespace hz::events

#endif  // HZ_EVENTS_TENANT_LOG_H_
