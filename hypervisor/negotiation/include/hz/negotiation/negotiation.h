// Resource negotiation with reservation windows and weighted priority
// (SPEC.md §7.8 and §9).
//
// Time is cut into windows of NegotiationOptions::window_s. A request asks
// for `count` devices of a kind with a locality, starting in a window between
// earliest_start_s and latest_start_s, for duration_s. Requests are queued by
// Submit()/Counter() and answered together by Decide(now), the decision point:
// pending requests are served in order of lowest weighted usage
// (device-seconds in the trailing horizon / operator weight, compared
// exactly), then higher priority class, then earlier arrival, then lower
// negotiation id. Each request first gets its earliest feasible offer in that
// order; a second pass adds alternatives, up to HZ_NEG_MAX_OFFERS. Offers hold
// capacity until accepted, declined, replaced by a counter or expired, so
// nothing is ever booked twice. Nothing here reads a clock: `now` (unix
// seconds) is an argument, so decisions are deterministic.
//
// Usage counts accepted reservations and offers alike: a negotiation round
// whose offers are held, or lapse unaccepted (expired, declined, countered),
// costs its tenant count x duration device-seconds, as accepting one of them
// would. Holding capacity without using it therefore costs the holder, not
// the tenants it keeps waiting.
//
// The cost of a decision point is bounded: capacity is asked once per pool
// and window, free capacity over a request's windows is a sliding minimum,
// and each tenant with queued requests gets an equal share of a fixed budget
// of window steps; what a tenant's share does not reach stays queued for the
// next decision point.
//
// Not thread-safe, with one exception: a decision point can be taken in three
// steps so that its scan needs no exclusive access. PrepareDecide and
// ApplyDecide need it like every other call; PlanDecide reads only its round
// and the provider, so it may run on another thread while the engine serves
// other calls. ApplyDecide keeps only what still holds: a request that was
// countered, declined or closed meanwhile stays as it is now, and an offer
// whose devices were booked meanwhile is dropped. The service calls
// Decide() (or the three steps) at least once per second and Tick() at least
// once per window.
#ifndef HZ_NEGOTIATION_NEGOTIATION_H_
#define HZ_NEGOTIATION_NEGOTIATION_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "hz/common/status.h"
#include "hz/common/tenant_id.h"
#include "hz/events/event_spec.h"
#include "hz/negotiation/availability_limiter.h"
#include "hz/negotiation/resource_provider.h"
#include "protocol/harmonaize.h"

namespace hz::negotiation {

struct NegotiationOptions {
  uint64_t window_s = 60;                // reservation window, a multiple of 10 s
  uint64_t offer_ttl_s = 30;             // offer lifetime (>= 10)
  uint64_t usage_horizon_s = 3600;       // trailing horizon of the weighted usage
  uint32_t max_rounds = 8;               // the request is round 1; counters add rounds
  uint64_t max_lookahead_s = 7 * 86400;  // latest_start_s at most now + this
  uint64_t max_duration_s = 86400;
  uint32_t max_open_per_tenant = 64;  // open negotiations per tenant
  // Key of the identifier function (a keyed PRF of a counter). Identifiers
  // are unique and unpredictable without the key; 0 draws a random 128-bit
  // key, which is what a service should do. Tests fix it for repeatability.
  uint64_t id_key = 0;
  // Window steps one decision point may spend, shared equally among the
  // tenants with queued requests.
  uint64_t decide_budget = uint64_t{1} << 21;
  // A reservation's holder gets PREEMPTION/SCHEDULED this long before its
  // end (at its start when less is left then), and PREEMPTION/STARTED at it.
  uint64_t preemption_notice_s = 120;
};

// Answer to one queued request: the wire result and its offers.
struct Decision {
  TenantId tenant;
  hz_neg_result result{};
  std::vector<hz_neg_offer> offers;
  bool provider_initiated = false;  // a replacement offer: no guest request waits for it
};

enum class ReservationState { kAccepted, kActive, kEnded, kReleased, kRevoked };

struct ReservationInfo {
  uint64_t id = 0;
  TenantId tenant;
  uint64_t negotiation_id = 0;
  hz_device_kind kind = HZ_DEV_GPU;
  uint64_t start_s = 0;
  uint64_t duration_s = 0;
  uint64_t accepted_s = 0;
  uint32_t count = 0;  // devices held now (after partial releases)
  ReservationState state = ReservationState::kAccepted;
  std::vector<PoolCount> devices;  // where they are held
};

struct OfferInfo {
  hz_neg_offer offer{};
  TenantId tenant;
  uint64_t negotiation_id = 0;
  std::vector<PoolCount> devices;
};

using WindowKey = std::pair<uint32_t, uint64_t>;  // (pool, window)

// An offer a decision round found, not yet booked in the engine.
struct PlannedOffer {
  uint64_t start_s = 0;
  uint64_t first_window = 0;
  uint64_t last_window = 0;
  std::vector<PoolCount> devices;
};

// One queued request as a decision round sees it.
struct PlannedRequest {
  uint64_t negotiation_id = 0;
  uint64_t arrival = 0;  // changes when the request is countered
  TenantId tenant;
  hz_neg_request request{};
  bool decided = false;  // false: its tenant's share ran out; it stays queued
  std::vector<PlannedOffer> offers;
};

// A decision point's inputs (a snapshot taken by PrepareDecide) and, once
// PlanDecide ran, its results.
struct DecisionRound {
  uint64_t now = 0;
  std::vector<Pool> pools;
  std::vector<PlannedRequest> requests;    // in decision order
  std::map<WindowKey, uint32_t> booked;    // the engine's bookings, then the plan's
  std::map<WindowKey, uint32_t> capacity;  // every capacity the round asked for
  uint64_t steps = 0;                      // window steps spent
};

class NegotiationEngine {
 public:
  // Told when a tenant's GPU count changes, with the count now (hints follow it).
  using AllocationListener = std::function<void(const TenantId& tenant, uint32_t gpus_now)>;

  // `provider` and `sink` (may be null) must outlive the engine. The options
  // must pass ValidateOptions.
  NegotiationEngine(NegotiationOptions options, ResourceProvider* provider,
                    events::EventSink* sink);

  static Status ValidateOptions(const NegotiationOptions& options);

  // Operator policy: weight (default 1, >= 1) and the highest priority class
  // the tenant may ask for (default HZ_PRIO_HIGH).
  Status SetWeight(const TenantId& tenant, uint32_t weight);
  Status SetMaxPriority(const TenantId& tenant, uint8_t priority_class);
  // Operator policy: the tenant's open negotiations (NEG_REQUEST beyond them:
  // kLimit); 0 gives it options.max_open_per_tenant.
  void SetMaxOpen(const TenantId& tenant, uint32_t max_open);
  void SetAllocationListener(AllocationListener listener) { listener_ = std::move(listener); }

  // NEG_REQUEST: validates and queues; *negotiation_id names it.
  Status Submit(const TenantId& tenant, const hz_neg_request& request, uint64_t now,
                uint64_t* negotiation_id);
  // NEG_COUNTER: replaces the open negotiation's request (its offers are
  // released) and queues it as the next round; kLimit at the last round.
  Status Counter(const TenantId& tenant, uint64_t negotiation_id, const hz_neg_request& request,
                 uint64_t now);
  // Provider side (SPEC.md §9.7): a replacement offer after a failure. Opens a
  // negotiation on the tenant's behalf, decided at the next decision point;
  // its offers are published as NEGOTIATION/OFFER_MADE events.
  Status OfferReplacement(const TenantId& tenant, const hz_neg_request& request, uint64_t now,
                          uint64_t* negotiation_id);
  // The decision point: answers every queued request (file comment). The
  // same as ApplyDecide(PlanDecide(PrepareDecide(now)), now).
  std::vector<Decision> Decide(uint64_t now);
  // Time passes (Tick) and the queued requests are copied, in decision order.
  DecisionRound PrepareDecide(uint64_t now);
  // Finds the offers of `round`'s requests. Touches nothing in the engine
  // but its options and the provider.
  void PlanDecide(DecisionRound& round) const;
  // Books what PlanDecide found and still fits, and answers those requests.
  std::vector<Decision> ApplyDecide(const DecisionRound& round, uint64_t now);
  // NEG_ACCEPT: the offer becomes a reservation; the negotiation's other
  // offers are released and it closes.
  Status Accept(const TenantId& tenant, uint64_t offer_id, uint64_t now, uint64_t* reservation_id);
  // NEG_DECLINE: closes the negotiation and releases its offers.
  Status Decline(const TenantId& tenant, uint64_t negotiation_id, uint64_t now);
  // NEG_RELEASE: gives back `count` devices (0: all) of a reservation.
  Status Release(const TenantId& tenant, uint64_t reservation_id, uint32_t count, uint64_t now);
  Status Release(const TenantId& tenant, const hz_neg_release_args& args, uint64_t now);
  // Provider side: withdraws an accepted reservation, with a NEGOTIATION/
  // RESERVATION_REVOKED event to its tenant.
  Status Revoke(uint64_t reservation_id, events::RevokeReason reason, uint64_t now);

  // Reservations of the tenant that still hold or will hold devices.
  uint32_t LiveReservations(const TenantId& tenant) const;
  // The tenant is removed: its negotiations close, its reservations end
  // (started ones are detached) and are forgotten with its identifiers,
  // usage, weight and priority cap, without events, so that a tenant created
  // later under the same name inherits none of it. Returns the negotiations
  // that closed.
  std::vector<uint64_t> ForgetTenant(const TenantId& tenant, uint64_t now);

  // Time passes: expires offers (OFFER_EXPIRED), closes negotiations whose
  // offers are gone, starts reservations whose start came (attach +
  // CAPACITY/RESERVATION_STARTED), gives those whose end is near their
  // preemption notice (PREEMPTION/SCHEDULED), ends those whose duration ran
  // out (PREEMPTION/STARTED, detach, CAPACITY/RESERVATION_ENDED), takes back
  // what no longer fits a capacity that dropped (offers first, then the
  // most recently accepted reservations), and tells the tenants waiting for
  // a device kind that devices of it were freed (CAPACITY/AVAILABLE).
  void Tick(uint64_t now);

  // Introspection (operator tools, tests).
  std::vector<ReservationInfo> Reservations() const;
  std::vector<OfferInfo> Offers() const;
  uint32_t Booked(uint32_t pool, uint64_t window) const;
  // Weighted usage as a fraction: device-seconds and weight.
  void Usage(const TenantId& tenant, uint64_t now, uint64_t* device_seconds,
             uint32_t* weight) const;
  uint64_t WindowOf(uint64_t unix_s) const { return unix_s / options_.window_s; }
  // Window steps the last decision point spent (at most decide_budget).
  uint64_t LastDecideSteps() const { return last_decide_steps_; }

 private:
  enum class NegState { kPending, kOpen };
  struct Negotiation {
    TenantId tenant;
    hz_neg_request request{};
    NegState state = NegState::kPending;
    uint32_t round = 1;
    uint64_t arrival = 0;
    uint64_t decided_s = 0;
    bool provider_initiated = false;
    std::vector<uint64_t> offers;
    bool round_charged = false;  // this round's lapsed offers were charged
  };
  struct Offer {
    OfferInfo info;
    uint64_t first_window = 0;
    uint64_t last_window = 0;
    uint64_t order = 0;  // creation order
  };
  struct Reservation {
    ReservationInfo info;
    uint64_t first_window = 0;
    uint64_t last_window = 0;
    uint64_t device_seconds = 0;  // what counts toward weighted usage
    uint64_t order = 0;           // acceptance order
    uint64_t closed_s = 0;        // when it stopped holding devices
    // PREEMPTION/SCHEDULED went out, with this payload (CANCELLED repeats it).
    bool noticed = false;
    uint32_t notice_devices = 0;
    uint32_t notice_index = 0;
  };
  struct Owner {
    TenantId tenant;
    uint64_t closed_s = 0;  // 0 while the object is live
  };

  // Free devices of one pool over a moving range of windows (a monotonic
  // queue: both ends of the range only move forward).
  struct PoolScan {
    uint32_t pool = 0;
    uint32_t host = 0;
    uint64_t next = 0;                                // next window to add
    std::deque<std::pair<uint64_t, uint32_t>> queue;  // (window, free), free rising
  };
  enum class OfferResult { kOffer, kNone, kOutOfBudget };
  // A tenant's charges for lapsed offers: (10 s bucket, device-seconds).
  using Charges = std::vector<std::pair<uint64_t, uint64_t>>;
  // Capacity is asked once per pool and window while a scope is open.
  class CapacityScope;

  uint64_t NewId();
  uint32_t CapacityOf(uint32_t pool, uint64_t window) const;
  uint32_t FreeIn(DecisionRound& round, uint32_t pool, uint64_t window) const;
  uint32_t ScanFree(DecisionRound& round, PoolScan& scan, uint64_t first, uint64_t last,
                    uint64_t* steps) const;
  bool Place(DecisionRound& round, const hz_neg_request& request, std::vector<PoolScan>& scans,
             uint64_t first, uint64_t last, uint64_t* steps, std::vector<PoolCount>* devices) const;
  bool StillFits(const DecisionRound& round, const PlannedOffer& offer) const;
  void AddOffer(uint64_t negotiation_id, Negotiation& negotiation, const PlannedOffer& planned,
                uint64_t now);
  void Charge(Negotiation& negotiation, uint64_t now);
  Status CheckOwner(uint64_t id, const TenantId& tenant, const char* what) const;
  void CloseId(uint64_t id, uint64_t now);
  Status ValidateRequest(const TenantId& tenant, const hz_neg_request& request, uint64_t now) const;
  Status CountOpen(const TenantId& tenant) const;
  void Book(const std::vector<PoolCount>& devices, uint64_t first_window, uint64_t last_window,
            bool add);
  OfferResult PlanOffer(DecisionRound& round, PlannedRequest& request, uint64_t* next_candidate,
                        uint64_t* budget) const;
  std::vector<Decision> Answer(const std::vector<uint64_t>& decided, uint64_t now);
  void DropOffer(uint64_t offer_id, uint64_t now);
  void DropOffers(Negotiation& negotiation, uint64_t now, bool charge);
  void CloseNegotiation(uint64_t negotiation_id, uint64_t now, bool charge = false);
  void ExpireOffers(uint64_t now);
  void StartAndEnd(uint64_t now);
  void Reconcile(uint64_t now);
  void Collect(uint64_t now);
  void EndReservation(Reservation& reservation, ReservationState state, uint64_t now);
  void NotifyAllocation(const TenantId& tenant);
  void PublishTo(const TenantId& tenant, const events::EventSpec& spec);
  // Preemption notices and capacity notices (notices.cc).
  uint32_t NoticeIndex(const Reservation& reservation) const;
  void NoticePreemption(Reservation& reservation, uint64_t now);
  void PublishPreemptionStarted(const Reservation& reservation);
  void PublishPreemptionCancelled(const Reservation& reservation);
  std::map<hz_device_kind, uint64_t> FreeNow(const std::set<hz_device_kind>& kinds,
                                             uint64_t now) const;
  void NoticeAvailability(uint64_t now);

  NegotiationOptions options_;
  ResourceProvider* provider_;
  events::EventSink* sink_;
  AllocationListener listener_;

  uint64_t id_counter_ = 0;
  uint64_t id_key2_ = 0;  // second half of the 128-bit identifier key
  uint64_t last_decide_steps_ = 0;
  std::map<TenantId, Charges> charges_;  // within the usage horizon
  mutable bool caching_ = false;
  mutable std::map<WindowKey, uint32_t> capacity_cache_;
  uint64_t next_arrival_ = 1;
  uint64_t next_order_ = 1;
  std::map<uint64_t, Negotiation> negotiations_;  // open or pending
  // Each tenant's entries in negotiations_ that it opened itself (the quota
  // counts these), so checking the quota does not scan every tenant's.
  std::map<TenantId, uint32_t> open_by_tenant_;
  std::map<uint64_t, Offer> offers_;              // live
  std::map<uint64_t, Reservation> reservations_;  // within the usage horizon
  std::map<uint64_t, Owner> owners_;              // every id, live or recently closed
  std::map<TenantId, uint32_t> weights_;
  std::map<TenantId, uint8_t> max_priority_;
  std::map<TenantId, uint32_t> max_open_;  // tenants with their own limit
  // (pool, window) -> devices held by offers and live reservations.
  std::map<WindowKey, uint32_t> booked_;
  // Free devices per kind at the last tick while some tenant waited for
  // the kind; a rise means devices were freed.
  std::map<hz_device_kind, uint64_t> last_free_;
  AvailabilityLimiter availability_;
};

}  // namespace hz::negotiation

#endif  // HZ_NEGOTIATION_NEGOTIATION_H_
