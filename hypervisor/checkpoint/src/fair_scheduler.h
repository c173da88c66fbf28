// Chooses whose chunk the disk writes next when several tenants persist at
// once, so one tenant's burst cannot starve another.
//
//  - Deficit round robin across tenants with work: each visit adds
//    quantum * weight to a tenant's deficit; it may send chunks while the
//    deficit covers them. Equal weights get equal bytes, whatever the chunk
//    sizes and however long one tenant's backlog is.
//  - A token bucket per tenant when a disk bandwidth is configured: tenants
//    with work share it by weight (a tenant alone gets all of it), refilled
//    with the elapsed time, capped at `burst` bytes.
//
// Time is passed in (microseconds), so tests drive it with a fake clock.
// Not synchronized: one caller (the persist worker).
#ifndef HZ_CHECKPOINT_FAIR_SCHEDULER_H_
#define HZ_CHECKPOINT_FAIR_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <span>

#include "hz/checkpoint/types.h"

namespace hz::checkpoint {

class FairScheduler {
 public:
  struct Candidate {
    TenantNo tenant;
    uint64_t head_bytes;  // size of the tenant's next chunk
  };

  // bandwidth 0: no token buckets (DRR order only).
  FairScheduler(uint64_t bandwidth_bytes_per_s, uint64_t quantum_bytes, uint64_t burst_bytes);

  void SetWeight(TenantNo tenant, uint32_t weight);

  // Picks the tenant whose chunk goes next among `ready` and charges it
  // head_bytes. nullopt when every candidate is out of tokens: *retry_us then
  // holds the earliest time at which one will have tokens again.
  std::optional<TenantNo> Pick(uint64_t now_us, std::span<const Candidate> ready,
                               uint64_t* retry_us);

  // For Stats: bytes charged to a tenant so far.
  uint64_t charged(TenantNo tenant) const;

 private:
  struct State {
    uint32_t weight = 1;
    int64_t deficit = 0;
    double tokens = 0;
    uint64_t charged = 0;
    bool fresh = true;  // never had work: starts with a full bucket
  };

  void Refill(uint64_t now_us, std::span<const Candidate> ready);

  uint64_t bandwidth_;
  uint64_t quantum_;
  double burst_;
  uint64_t last_us_ = 0;
  bool have_time_ = false;
  std::map<TenantNo, State> state_;
  std::optional<TenantNo> current_;  // tenant whose DRR turn it is
};

}  // namespace hz::checkpoint

#endif  // HZ_CHECKPOINT_FAIR_SCHEDULER_H_
