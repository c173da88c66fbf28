// Resource negotiation with reservation windows and weighted priority.
//
// Time is cut into windows of NegotiationOptions::window_s. A request asks
// for `count` devices of a kind with a locality, starting in a window between
// earliest_start_s and latest_start_s, for duration_s. Requests are queued by
// Submit()/Counter() and answered together by Decide(now): pending requests
// are served in order of lowest weighted usage (device-seconds reserved in the
// trailing usage horizon / operator weight), then higher priority class, then
// earlier arrival, then lower negotiation id. Each request first gets its
// earliest feasible offer in that order; a second pass adds alternatives, up to
// HZ_NEG_MAX_OFFERS. Offers hold capacity until accepted, declined or expired,
// so nothing is ever booked twice. Nothing here reads a clock: `now` (unix
// seconds) is an argument, so decisions are deterministic.
#ifndef HZ_EVENTS_NEGOTIATION_H_
#define HZ_EVENTS_NEGOTIATION_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "hz/events/event_spec.h"
#include "hz/events/resource_provider.h"
#include "hz/events/status.h"
#include "protocol/harmonaize.h"

namespace hz::events {

struct NegotiationOptions {
  uint64_t window_s = 60;                // reservation window, a multiple of 10 s
  uint64_t offer_ttl_s = 30;             // offers expire this long after they are made (>= 10)
  uint64_t usage_horizon_s = 3600;       // trailing horizon of the weighted usage
  uint32_t max_rounds = 8;               // the request is round 1; counters add rounds
  uint64_t max_lookahead_s = 7 * 86400;  // latest_start_s at most now + this
  uint64_t max_duration_s = 86400;
  uint32_t max_open_per_tenant = 64;  // open negotiations per tenant
};

// Answer to one queued request: the wire result and its offers.
struct Decision {
  std::string tenant;
  hz_neg_result result{};
  std::vector<hz_neg_offer> offers;
};

enum class ReservationState { kAccepted, kActive, kEnded, kReleased, kRevoked };

struct ReservationInfo {
  uint64_t id = 0;
  std::string tenant;
  uint64_t negotiation_id = 0;
  hz_device_kind kind = HZ_DEV_GPU;
  uint64_t start_s = 0;
  uint64_t duration_s = 0;
  uint64_t accepted_s = 0;
  uint32_t count = 0;  // devices held now (after partial releases)
  ReservationState state = ReservationState::kAccepted;
  std::vector<PoolCount> devices;
};

struct OfferInfo {
  hz_neg_offer offer{};
  std::string tenant;
  uint64_t negotiation_id = 0;
  std::vector<PoolCount> devices;
};

class NegotiationEngine {
 public:
  // Told when a tenant's attached device count changes (hints follow it).
  using AllocationListener = std::function<void(const std::string& tenant, uint32_t devices_now)>;

  // `provider` and `sink` must outlive the engine.
  NegotiationEngine(NegotiationOptions options, ResourceProvider* provider, EventSink* sink);

  // Checks the options (window a multiple of 10, ttl >= 10, rounds >= 1).
  static Status ValidateOptions(const NegotiationOptions& options);

  // Operator-assigned weight (default 1, must be >= 1).
  Status SetWeight(const std::string& tenant, uint32_t weight);
  void SetAllocationListener(AllocationListener listener) { listener_ = std::move(listener); }

  // NEG_REQUEST: validates and queues; *negotiation_id names it.
  Status Submit(const std::string& tenant, const hz_neg_request& request, uint64_t now,
                uint64_t* negotiation_id);
  // NEG_COUNTER: replaces the negotiation's request (its offers are dropped)
  // and queues it again as the next round.
  Status Counter(const std::string& tenant, uint64_t negotiation_id, const hz_neg_request& request,
                 uint64_t now);
  // Answers every queued request (see the file comment).
  std::vector<Decision> Decide(uint64_t now);
  // NEG_ACCEPT: the offer becomes a reservation; the negotiation's other
  // offers are released. kNotFound for unknown, foreign or expired offers.
  Status Accept(const std::string& tenant, uint64_t offer_id, uint64_t now,
                uint64_t* reservation_id);
  // NEG_DECLINE: ends the negotiation and releases its offers.
  Status Decline(const std::string& tenant, uint64_t negotiation_id, uint64_t now);
  // NEG_RELEASE: gives back `count` devices (0: all) of a reservation.
  Status Release(const std::string& tenant, uint64_t reservation_id, uint32_t count, uint64_t now);
  // Provider side: withdraws an accepted reservation, with a NEGOTIATION/
  // REVOKED event to its tenant.
  Status Revoke(uint64_t reservation_id, RevokeReason reason, uint64_t now);

  // Time passes: expires offers, starts reservations whose start came (attach
  // + CAPACITY event), ends those whose duration ran out, and revokes what no
  // longer fits a capacity that dropped (offers first, newest reservations
  // next). Call it at least once per window.
  void Tick(uint64_t now);

  // Introspection (operator tools, tests). The engine is not thread-safe:
  // the service calls it from one thread (its control strand).
  std::vector<ReservationInfo> Reservations() const;
  std::vector<OfferInfo> Offers() const;
  uint32_t Booked(uint32_t pool, uint64_t window) const;
  // Weighted usage as a fraction: device-seconds and weight.
  void Usage(const std::string& tenant, uint64_t now, uint64_t* device_seconds,
             uint32_t* weight) const;
  uint64_t WindowOf(uint64_t unix_s) const { return unix_s / options_.window_s; }

 private:
  enum class NegState { kPending, kOpen, kClosed };
  struct Negotiation {
    std::string tenant;
    hz_neg_request request{};
    NegState state = NegState::kPending;
    uint32_t round = 1;
    uint64_t arrival = 0;
    std::vector<uint64_t> offers;
  };
  struct Offer {
    OfferInfo info;
    uint64_t first_window = 0;
    uint64_t last_window = 0;
  };
  struct Reservation {
    ReservationInfo info;
    uint64_t first_window = 0;
    uint64_t last_window = 0;
    uint64_t device_seconds = 0;  // what counts toward weighted usage
  };

  Status ValidateRequest(const hz_neg_request& request, uint64_t now) const;
  Status CountOpen(const std::string& tenant) const;
  bool FindPlacement(const hz_neg_request& request, uint64_t first_window, uint64_t last_window,
                     std::vector<PoolCount>* devices) const;
  uint32_t Free(uint32_t pool, uint64_t first_window, uint64_t last_window) const;
  void Book(const std::vector<PoolCount>& devices, uint64_t first_window, uint64_t last_window,
            int64_t sign);
  bool MakeOffer(uint64_t negotiation_id, Negotiation& negotiation, uint64_t now,
                 uint64_t* next_candidate);
  void DropOffer(uint64_t offer_id);
  void DropOffers(Negotiation& negotiation);
  void ExpireOffers(uint64_t now);
  void StartAndEnd(uint64_t now);
  void Reconcile(uint64_t now);
  void EndReservation(Reservation& reservation, ReservationState state, uint64_t now);
  uint32_t DevicesOf(const std::string& tenant) const;
  void NotifyAllocation(const std::string& tenant);
  void PublishTo(const std::string& tenant, const EventSpec& spec);

  NegotiationOptions options_;
  ResourceProvider* provider_;
  EventSink* sink_;
  AllocationListener listener_;

  uint64_t next_negotiation_ = 1;
  uint64_t next_offer_ = 1;
  uint64_t next_reservation_ = 1;
  uint64_t next_arrival_ = 1;
  std::map<uint64_t, Negotiation> negotiations_;
  std::map<uint64_t, Offer> offers_;
  std::map<uint64_t, Reservation> reservations_;
  std::map<std::string, uint32_t> weights_;
  // (pool, window) -> devices held by offers and live reservations.
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> booked_;
};

}  // namespace hz::events

#endif  // HZ_EVENTS_NEGOTIATION_H_
