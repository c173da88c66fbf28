// Requests a device answers later: a collective until the engine completes
// it, COMM_INIT until every rank joined, COMM_ABORT until the handle's
// operations ended, NEG_REQUEST until the decision point, CKPT_SAVE and
// CKPT_RESTORE until an engine thread ran them, EVENT_ACK until the event
// bus wrote its cursor.
//
// A request is in flight from Add until it is taken back (Take, FinishAll)
// or forgotten with its ring (ForgetAll); the count is kept here and nowhere
// else. Every answer goes through Finish, which writes it only into the ring
// the request was popped from: a queue stopped or restarted since has lost
// that ring, and nobody is left to answer.
//
// Executor only, except in_flight().
#ifndef HZ_SERVICE_PENDING_TABLE_H_
#define HZ_SERVICE_PENDING_TABLE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "hz/service/device_state.h"
#include "hz/service/family_handler.h"
#include "hz/service/request.h"
#include "vdev/device.h"

namespace hz::service {

// A request answered later. Handlers derive from it to keep what their
// answer needs; whoever holds it keeps the chain, and with it the guest
// memory map, alive.
struct PendingRequest {
  PendingRequest() = default;
  virtual ~PendingRequest() = default;
  PendingRequest(const PendingRequest&) = delete;
  PendingRequest& operator=(const PendingRequest&) = delete;

  uint16_t opcode() const { return req.hdr.opcode; }

  // Set by PendingTable::Add.
  uint64_t id = 0;
  const FamilyHandler* owner = nullptr;
  vdev::Chain chain;
  Request req;  // its framing; req.chain points at chain
  uint16_t queue = 0;
  uint64_t queue_gen = 0;
  // Set by the handler: payload bytes, counted in the metrics on success.
  uint64_t bytes = 0;
};

class PendingTable {
 public:
  PendingTable(const QueueSlots& queues, RequestCounters& counters)
      : queues_(queues), counters_(counters) {}
  PendingTable(const PendingTable&) = delete;
  PendingTable& operator=(const PendingTable&) = delete;

  // Takes req, popped from queue, into the table for owner. p receives the
  // request's origin and its id.
  void Add(const FamilyHandler* owner, const vdev::Queue& queue, const Request& req,
           std::shared_ptr<PendingRequest> p);

  // Removes request id; null when it was answered or forgotten already.
  std::shared_ptr<PendingRequest> Take(uint64_t id);

  // Answers a request taken out of the table: counted in the metrics, and
  // written (result first, on success) if its ring still exists.
  void Finish(const PendingRequest& p, const Reply& reply, std::span<const uint8_t> result = {});

  // Whether the ring p came from still exists: an answer for a ring that
  // stopped reaches nobody.
  bool RingLive(const PendingRequest& p) const {
    return queues_.Live(p.queue, p.queue_gen) != nullptr;
  }

  // Hands a request taken out of the table back to its ring unanswered (a
  // live upgrade is freezing the session: vdev::Queue::Return); it will be
  // served again from scratch, by this process or the next.
  void Return(const PendingRequest& p);

  // Takes and answers every request of owner that matches (all by default),
  // in the order they arrived.
  void FinishAll(const FamilyHandler* owner, const Reply& reply,
                 const std::function<bool(const PendingRequest&)>& match = nullptr);

  // Drops every request of owner unanswered: its ring is gone.
  void ForgetAll(const FamilyHandler* owner);

  // Requests of owner in flight, of one opcode.
  size_t Count(const FamilyHandler* owner, uint16_t opcode) const;

  // Every request of owner, in the order they arrived; T must be the type
  // owner added them as.
  template <typename T>
  std::vector<std::shared_ptr<T>> Owned(const FamilyHandler* owner) const {
    std::vector<std::shared_ptr<T>> out;
    for (const auto& [id, p] : requests_) {
      if (p->owner == owner) out.push_back(std::static_pointer_cast<T>(p));
    }
    return out;
  }

  uint64_t in_flight() const { return in_flight_.load(); }  // any thread

 private:
  void Counted() { in_flight_.store(requests_.size()); }

  const QueueSlots& queues_;
  RequestCounters& counters_;
  std::map<uint64_t, std::shared_ptr<PendingRequest>> requests_;  // by id, in arrival order
  uint64_t next_id_ = 1;
  std::atomic<uint64_t> in_flight_{0};
};

}  // namespace hz::service

#endif  // HZ_SERVICE_PENDING_TABLE_H_
