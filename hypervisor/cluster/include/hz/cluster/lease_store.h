// The cluster store, as membership needs it: named records that live only as
// long as their holder keeps renewing a lease on them.
//
// This is the only interface the rest of the cluster code sees of the store,
// so that a provider who runs etcd instead of Redis replaces one class: an
// etcd lease per record, a transaction comparing the holder for Hold and
// Release, and a range read of the group's prefix for List.
#ifndef HZ_CLUSTER_LEASE_STORE_H_
#define HZ_CLUSTER_LEASE_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "hz/common/status.h"
#include "hz/common/status_or.h"

namespace hz::cluster {

// One live record of a group.
struct LeasedRecord {
  std::string name;
  std::string value;
  int64_t remaining_ms = 0;  // until the lease ends unless renewed
};

// What Hold found.
struct HoldResult {
  enum class Outcome : uint8_t {
    kAcquired,     // the name was free; the record is now ours
    kRenewed,      // the record was ours; its lease starts again
    kHeldByOther,  // someone else's record holds the name
  };
  Outcome outcome = Outcome::kAcquired;
  // For kHeldByOther: the holder's value and how long its lease has left.
  std::string holder_value;
  int64_t holder_remaining_ms = 0;
};

class LeaseStore {
 public:
  virtual ~LeaseStore() = default;

  // Takes or renews the record `name` of `group` for `holder` (a token
  // unique to the caller), with `value` (which may change from one renewal
  // to the next), for lease_ms. Atomic: a record of another holder is left
  // alone (kHeldByOther). A failure to reach the store is kIoError; a store
  // that answers nonsense, kCorruption.
  virtual StatusOr<HoldResult> Hold(const std::string& group, const std::string& name,
                                    const std::string& holder, const std::string& value,
                                    uint32_t lease_ms) = 0;

  // Deletes the record when `holder` still holds it (a graceful leave); a
  // record someone else took meanwhile is left alone.
  virtual Status Release(const std::string& group, const std::string& name,
                         const std::string& holder) = 0;

  // The group's live records, in name order.
  virtual StatusOr<std::vector<LeasedRecord>> List(const std::string& group) = 0;

  // Where the store is, for operators ("10.0.0.1:6379").
  virtual std::string Describe() const = 0;
};

}  // namespace hz::cluster

#endif  // HZ_CLUSTER_LEASE_STORE_H_
