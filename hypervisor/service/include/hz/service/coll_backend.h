// What the per-VM device needs from the collective engine. The service runs
// on hz::coll::Engine (EngineBackend); tests substitute a scripted backend so
// the device's request handling is checked without the engine's timing.
#ifndef HZ_SERVICE_COLL_BACKEND_H_
#define HZ_SERVICE_COLL_BACKEND_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz/collectives/types.h"
#include "hz/common/waiting_window.h"

namespace hz::service {

// One rank's membership in a communicator (opaque to the device).
class CommMember {
 public:
  virtual ~CommMember() = default;
  virtual uint32_t rank() const = 0;
  virtual uint32_t nranks() const = 0;
  virtual uint64_t comm_id() const = 0;
};

// What re-forms a rank's membership in the next process (live upgrade): as
// the engine knows it (numbered in the whole communicator), and what the
// backend adds; `backend` is null when it adds nothing (a communicator across
// hosts: where its ranks are and its inter-host group, cross_host_comm.h).
struct SavedMember {
  coll::MemberState engine;
  nlohmann::json backend;
};

struct CommSummary {
  uint64_t id = 0;
  std::string tenant;
  uint32_t nranks = 0;
  uint32_t joined = 0;
  uint64_t next_seq = 0;
  uint32_t pending = 0;
  std::string state;
  std::string abort_reason;
};

struct BackendStats {
  std::vector<std::pair<std::string, uint64_t>> algorithms;  // choice -> ops
  std::vector<std::pair<std::string, uint64_t>> ops;         // op -> executed
  std::vector<std::pair<std::string, uint64_t>> op_bytes;    // op -> payload bytes
  uint64_t streamed = 0;  // collectives written with non-temporal stores
  // Times a worker polled for its next task, and tasks one found so.
  uint64_t worker_polls = 0;
  uint64_t worker_polled_tasks = 0;
  uint64_t communicators = 0;
  uint64_t aborts = 0;
  uint64_t timeouts = 0;
  uint64_t mismatches = 0;
  uint64_t workers = 0;
  // Communicators across hosts: where their reductions spend time, in
  // nanoseconds summed over operations (within the host, across hosts,
  // writing the outputs), and operations the inter-host leg failed.
  std::vector<std::pair<std::string, uint64_t>> cross_host;
};

using MemberPtr = std::shared_ptr<CommMember>;

// Same contract as hz::coll::Engine (see engine.h): callbacks run exactly
// once, on any thread, possibly before the call returns.
class CollBackend {
 public:
  virtual ~CollBackend() = default;
  virtual Status NewUid(const TenantId& tenant, coll::Uid* out) = 0;
  virtual void Init(const TenantId& tenant, const coll::Uid& uid, uint32_t nranks, uint32_t rank,
                    coll::Constraints c, std::function<void(Status, MemberPtr)> done) = 0;
  virtual void Post(const MemberPtr& m, coll::OpDesc op, coll::Done done) = 0;
  // Waits until the engine no longer touches m's memory; never from a callback.
  virtual void Destroy(const MemberPtr& m) = 0;
  // Aborts m's communicator and destroys m later on another thread; safe from
  // a completion callback (a rank whose VM left while its Init completed).
  virtual void DestroyAsync(MemberPtr m) = 0;
  virtual void Abort(const MemberPtr& m) = 0;
  // COMM_DESTROY: the rank leaves on purpose. Like Destroy, but the other
  // ranks learn that a rank destroyed its handle (SPEC §7.3.5, detail 4)
  // rather than that its session ended.
  virtual void Leave(const MemberPtr& m) { Destroy(m); }
  // Live upgrade: the next process serves m's session now and re-forms its
  // communicator. Like Destroy, without reporting it as a failure.
  virtual void HandOver(const MemberPtr& m) { Destroy(m); }
  // Live upgrade. Withdraw takes back every operation of m that has not
  // started: each completes with kTryAgain before Withdraw returns, and
  // nothing else completes an operation so. SaveMember says what re-forms
  // m in another process, where Rejoin does it once every rank came back.
  // The defaults suit a backend that cannot hand its communicators over.
  virtual size_t Withdraw(const MemberPtr& /*m*/) { return 0; }
  virtual Status SaveMember(const MemberPtr& /*m*/, SavedMember* /*out*/) const {
    return Status::NotSupported("this backend cannot hand communicators over");
  }
  virtual void Rejoin(const TenantId& /*tenant*/, const SavedMember& /*saved*/,
                      std::function<void(Status, MemberPtr)> done) {
    done(Status::NotSupported("this backend cannot re-form communicators"), nullptr);
  }
  // Why m's communicator was aborted: the HZ_S_EABORTED detail, 0 if unknown.
  virtual uint32_t AbortDetail(const MemberPtr& /*m*/) const { return 0; }
  virtual void Shutdown() = 0;
  // The operator's weight for the tenant (1..1000): its share of the workers.
  virtual void SetTenantWeight(const TenantId& /*tenant*/, uint32_t /*weight*/) {}
  // The weight the backend schedules the tenant with.
  virtual uint32_t TenantWeight(const TenantId& /*tenant*/) const { return 1; }
  // Energy slack: the tenant's weight at percent of itself for `span`
  // (hz::coll::Engine::SetTenantShare); 100 ends it.
  virtual void SetTenantShare(const TenantId& /*tenant*/, uint32_t /*percent*/,
                              std::chrono::seconds /*span*/) {}
  // The engine's waiting window: CONGESTION/HOST_MEMORY (SPEC §8.3.5).
  virtual WaitingTime WorkerWaiting() const { return {}; }
  // CONGESTION/FABRIC: how long, of the window, the legs across hosts ran
  // slower than their links measured; *tenants gets the tenants with
  // communicators across hosts. Nothing without a cluster.
  virtual WaitingTime FabricWaiting(std::set<std::string>* /*tenants*/) const { return {}; }
  virtual BackendStats Stats() const = 0;
  virtual std::vector<CommSummary> Communicators() const = 0;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_COLL_BACKEND_H_
