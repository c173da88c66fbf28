// Cluster membership: this host's leased record in the cluster store, and the
// live hosts as last read from it.
//
// Each host holds a record under its name (its data address and a random
// instance id) with a lease of lease_ms, renewed every lease_ms / 3 by the
// membership thread, which also reads every host's record in the same round.
// A host that dies or is cut off from the store stops renewing; its record
// expires and every other host drops it from its view at its next round: at
// most lease_ms + lease_ms / 3 + one round's store timeouts after the last
// renewal. A host that cannot reach the store for a whole lease knows the
// others have dropped it by now, and drops them in turn (state kIsolated);
// it joins again, under the same name, once the store answers.
#ifndef HZ_CLUSTER_MEMBERSHIP_H_
#define HZ_CLUSTER_MEMBERSHIP_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz/cluster/lease_store.h"
#include "hz/common/status.h"

namespace hz::cluster {

struct MembershipOptions {
  std::string host_name;     // unique in the cluster
  std::string data_address;  // where other hosts reach this one's data path
  uint32_t lease_ms = 3000;
  // What else this host tells the others, read at every renewal (on the
  // membership thread; must not block): a JSON object. A record that would
  // exceed kMaxRecordBytes with it goes without it (logged).
  std::function<nlohmann::json()> attributes;
  // The record's holder id (IsInstanceId); empty: a new random one. A process
  // that takes over from this host's previous one in a live upgrade passes
  // the predecessor's, and so renews the same lease instead of waiting for it
  // to expire, which the other hosts would see as this host leaving.
  std::string instance;
};

// Whether `id` has the form of a holder id: 16 lower-case hex digits.
bool IsInstanceId(const std::string& id);

// The largest record a host writes or reads of another.
inline constexpr size_t kMaxRecordBytes = 256 * 1024;

enum class MemberState : uint8_t {
  kJoining,           // not registered yet
  kMember,            // registered; the view is current
  kStoreUnreachable,  // the last round failed, for less than a lease
  kIsolated,          // no round has succeeded for a whole lease: the others dropped us
  kNameTaken,         // another live host holds this host's name
  kStopped,
};
const char* MemberStateName(MemberState s);

struct HostInfo {
  std::string name;
  std::string data_address;
  nlohmann::json attributes = nlohmann::json::object();  // as the host published them
  int64_t lease_remaining_ms = 0;
  bool self = false;
};

struct MembershipView {
  MemberState state = MemberState::kJoining;
  std::string store;              // where the store is
  std::string detail;             // why the state is not kMember
  std::vector<HostInfo> hosts;    // live hosts, this one included, in name order
  int64_t ms_since_contact = -1;  // since the store last answered; -1: never
  uint64_t rounds = 0;
  uint64_t failed_rounds = 0;
  uint64_t hosts_joined = 0;
  uint64_t hosts_left = 0;
  uint64_t malformed_records = 0;  // records of other hosts that could not be read
};

// A host entering or leaving this host's view, or publishing other
// attributes.
struct MembershipChange {
  enum class Kind : uint8_t { kJoined, kLeft, kAttributes };
  Kind kind = Kind::kJoined;
  std::string host;
  std::string why;  // for a departure
};

class Membership {
 public:
  // Called on the membership thread after each change; must not block.
  using Listener = std::function<void(const MembershipChange&)>;

  Membership(std::unique_ptr<LeaseStore> store, MembershipOptions options, Listener listener = {});
  ~Membership();  // Stop(false)
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Registers this host and starts the membership thread. A name held by a
  // live host is kExists, after waiting up to one lease for the record of a
  // predecessor that crashed to expire. A store that cannot be reached is not
  // an error: the thread keeps trying (kStoreUnreachable meanwhile).
  Status Start();
  // Stops renewing. With release, the record is deleted at once (a graceful
  // leave: the others notice at their next round, not a lease later).
  void Stop(bool release = true);

  MembershipView View() const;
  // The record's holder id, for a successor to take over the lease with.
  const std::string& instance() const { return instance_; }
  uint32_t round_ms() const { return options_.lease_ms / 3; }

 private:
  using Clock = std::chrono::steady_clock;

  // The record's value: what other hosts learn of this one.
  std::string RecordValue() const;
  // One round: renew (or take) the lease, then read every host's record.
  void Round();
  Status Renew(Clock::time_point now);
  void Refresh(std::vector<LeasedRecord> records);
  void Failed(const Status& why, Clock::time_point now);
  // Replaces the view's hosts with `hosts`, telling the listener what changed.
  void SetHosts(std::vector<HostInfo> hosts, const std::string& why_left);
  void Loop();

  const std::unique_ptr<LeaseStore> store_;  // used by Start, then the thread only
  const MembershipOptions options_;
  const Listener listener_;
  const std::string instance_;  // this run's: the record's holder
  const int64_t started_unix_ms_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  MembershipView view_;
  std::optional<Clock::time_point> last_contact_;  // when the store last answered
  std::thread thread_;
};

}  // namespace hz::cluster

#endif  // HZ_CLUSTER_MEMBERSHIP_H_
