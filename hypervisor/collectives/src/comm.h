// The engine's state for one communicator. Everything below `mu` is guarded
// by it; the engine never holds it while running a kernel or a callback.
#ifndef HZ_COLLECTIVES_COMM_H_
#define HZ_COLLECTIVES_COMM_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "hz/collectives/engine.h"

namespace hz::coll::internal {

using Clock = std::chrono::steady_clock;
using InitDone = std::function<void(Status, std::shared_ptr<Member>)>;

// One rank's post of a collective. done is empty once it has been called
// (an invalid descriptor is answered at once but still counts as posted).
struct CollPost {
  OpDesc desc;
  Done done;
  bool valid = false;
};

// A collective seq some ranks have posted.
struct PendingColl {
  std::vector<std::optional<CollPost>> posts;  // by rank
  uint32_t nposted = 0;
  bool poisoned = false;  // some rank posted an invalid descriptor
  Clock::time_point deadline;
};

struct P2PPost {
  uint32_t rank = 0;
  OpDesc desc;
  Done done;
  Clock::time_point deadline;
};

class Comm {
 public:
  Comm(uint64_t id_, TenantId tenant_, const Uid& uid_, uint32_t nranks_, Constraints c,
       uint32_t timeout_ms_)
      : id(id_),
        tenant(tenant_),
        uid(uid_),
        nranks(nranks_),
        constraints(c),
        timeout(std::chrono::milliseconds(timeout_ms_)),
        joined(nranks_, 0),
        left(nranks_, 0) {}

  const uint64_t id;
  const TenantId tenant;
  const Uid uid;
  const uint32_t nranks;
  const Constraints constraints;
  const Clock::duration timeout;
  // Set with state == kAborted; read by workers between blocks.
  std::atomic<bool> aborted{false};

  std::mutex mu;
  std::condition_variable idle;  // signalled when running_jobs drops to 0
  CommState state = CommState::kJoining;
  Status abort_reason = Status::Ok();
  AbortCause abort_cause = AbortCause::kNone;

  // Formed in another engine and re-formed here (Engine::Rejoin): ranks
  // rejoin it, none may Init it. Set before the communicator is shared.
  bool rejoined = false;

  std::vector<uint8_t> joined;
  uint32_t njoined = 0;
  std::vector<uint8_t> left;
  uint32_t nleft = 0;
  std::vector<std::pair<uint32_t, InitDone>> init_waiters;
  Clock::time_point init_deadline;

  uint64_t next_seq = 0;      // next collective to execute
  bool coll_running = false;  // a collective is executing (they run in seq order)
  std::map<uint64_t, PendingColl> colls;
  // Unmatched point-to-point posts, keyed by (sender, receiver), in post order.
  std::map<std::pair<uint32_t, uint32_t>, std::deque<P2PPost>> sends, recvs;
  size_t pending_p2p = 0;
  uint32_t running_jobs = 0;

  // One timer entry at a time per communicator (see EngineImpl::ArmTimer).
  bool timer_armed = false;
  Clock::time_point timer_when;
};

}  // namespace hz::coll::internal

#endif  // HZ_COLLECTIVES_COMM_H_
