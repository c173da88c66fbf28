// The collective backend of a host in a cluster: communicators whose ranks
// may be on several hosts. It wraps the host's own backend (the collective
// engine) and adds what crossing hosts needs:
//  - COMM_UID publishes the uid's owning tenant in the cluster store, so that
//    a tenant's scope holds on every host (another tenant's COMM_INIT with it
//    is refused wherever it is made);
//  - COMM_INIT claims the rank for this host in the store and waits (off the
//    connection thread) until every rank is placed; the ranks on this host
//    then join a communicator of their own in the local engine, and, when
//    other hosts hold ranks too, a CrossHostComm joins the hosts with an
//    inter-host group (Gloo) formed through the same store;
//  - each operation goes to the local engine or to the CrossHostComm.
// A communicator whose ranks all landed on this host is a plain local one.
#ifndef HZ_SERVICE_CLUSTER_COLL_BACKEND_H_
#define HZ_SERVICE_CLUSTER_COLL_BACKEND_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "cross_host_comm.h"
#include "hz/cluster/comm_directory.h"
#include "hz/service/coll_backend.h"

namespace hz::service {

struct ClusterCollOptions {
  cluster::RedisAddress store;
  std::string key_prefix;
  std::string host_name;
  std::string data_address;
  std::chrono::milliseconds store_timeout{1000};
  // What an init or an operation waits for when the tenant sets no timeout.
  uint32_t default_timeout_ms = 60000;
  std::chrono::milliseconds uid_lifetime{std::chrono::hours(1)};
  // The window CONGESTION/FABRIC is measured over ([conditions]).
  std::chrono::milliseconds fabric_window{10000};
};

class ClusterCollBackend : public CollBackend {
 public:
  ClusterCollBackend(std::unique_ptr<CollBackend> local, ClusterCollOptions options);
  ~ClusterCollBackend() override;

  Status NewUid(const TenantId& tenant, coll::Uid* out) override;
  void Init(const TenantId& tenant, const coll::Uid& uid, uint32_t nranks, uint32_t rank,
            coll::Constraints c, std::function<void(Status, MemberPtr)> done) override;
  void Post(const MemberPtr& m, coll::OpDesc op, coll::Done done) override;
  void Destroy(const MemberPtr& m) override;
  void DestroyAsync(MemberPtr m) override;
  void Abort(const MemberPtr& m) override;
  void Leave(const MemberPtr& m) override;
  void HandOver(const MemberPtr& m) override;
  uint32_t AbortDetail(const MemberPtr& m) const override;
  // Communicators within this host go on in the next process as the local
  // engine's do; one across hosts re-forms its inter-host group with the
  // next process (cross_host_comm.h says how).
  size_t Withdraw(const MemberPtr& m) override;
  Status SaveMember(const MemberPtr& m, SavedMember* out) const override;
  void Rejoin(const TenantId& tenant, const SavedMember& saved,
              std::function<void(Status, MemberPtr)> done) override;
  void Shutdown() override;
  void SetTenantWeight(const TenantId& tenant, uint32_t weight) override {
    local_->SetTenantWeight(tenant, weight);
  }
  uint32_t TenantWeight(const TenantId& tenant) const override {
    return local_->TenantWeight(tenant);
  }
  void SetTenantShare(const TenantId& tenant, uint32_t percent,
                      std::chrono::seconds span) override {
    local_->SetTenantShare(tenant, percent, span);
  }
  WaitingTime WorkerWaiting() const override { return local_->WorkerWaiting(); }
  // The engine's, and the inter-host legs' algorithms.
  BackendStats Stats() const override;
  std::vector<CommSummary> Communicators() const override { return local_->Communicators(); }

  // Membership saw `host` go (its lease ended, or this host lost the
  // store): every communicator with ranks there is aborted at once, its
  // ranks answered even while Gloo still waits for the host.
  void HostLeft(const std::string& host, const std::string& why);
  // Live upgrade. A communicator that re-forms in this (next) process asks
  // its other hosts, through `call` (the cluster's host commands), to
  // re-form at once rather than at their next operation: each of them
  // serves kReformCommand with ReformRequested. Notices made before the
  // caller is set wait for it.
  static constexpr const char* kReformCommand = "cross_host.reform";
  using HostCaller =
      std::function<StatusOr<nlohmann::json>(const std::string& host, const nlohmann::json& req)>;
  void SetHostCaller(HostCaller call);
  // {"uid": hex}: the communicator's group re-forms if the store announces
  // a newer generation. Input from another host: checked.
  nlohmann::json ReformRequested(const nlohmann::json& req);

  // The live communicators across hosts that this host takes part in.
  std::vector<CrossHostCommInfo> CrossHostComms() const;
  WaitingTime FabricWaiting(std::set<std::string>* tenants) const override;

 private:
  struct Joining;
  // This host's part of one communicator while its local ranks join.
  struct LocalPart {
    coll::Uid local_uid;
    std::shared_ptr<CrossHostComm> comm;  // null when every rank is here
    uint32_t remaining = 0;               // local ranks still to join
  };

  // On the directory thread: one step of an init (check the uid's tenant,
  // claim the rank, see whether every rank is placed), again every poll
  // interval until all are or the init's deadline passes.
  void Step(const std::shared_ptr<Joining>& j);
  void Placed(const std::shared_ptr<Joining>& j, const cluster::Placement& p);
  void Retry(const std::shared_ptr<Joining>& j);
  // What an init, and each operation of the group, may wait (the tenant's
  // timeout, or the default).
  std::chrono::milliseconds TimeoutOf(const coll::Constraints& c) const;
  StatusOr<LocalPart*> PartFor(const std::shared_ptr<Joining>& j, const CrossHostLayout& layout);
  CrossHostKeys KeysFor(const coll::Uid& uid) const;
  cluster::GlooGroupOptions GroupFor(const coll::Uid& uid, const CrossHostLayout& layout,
                                     const coll::Constraints& c) const;
  // The communicator a rank handed over by the previous process rejoins:
  // made by its host's first rank to come back.
  StatusOr<std::shared_ptr<CrossHostComm>> RejoinedComm(const coll::Uid& uid,
                                                        const CrossHostSaved& saved,
                                                        const coll::Constraints& c);
  struct ReformNotice {
    std::string uid_hex;
    std::vector<std::string> hosts;
  };
  // Sends it on the directory thread (the calls wait for their answers).
  void Notify(ReformNotice notice);

  const std::unique_ptr<CollBackend> local_;
  const ClusterCollOptions options_;
  cluster::CommDirectory directory_;        // directory thread only
  std::map<coll::Uid, LocalPart> joining_;  // directory thread only

  boost::asio::io_context io_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;

  const std::shared_ptr<CrossHostStats> stats_ =
      std::make_shared<CrossHostStats>(std::chrono::nanoseconds(options_.fabric_window).count());
  std::atomic<bool> shut_down_{false};
  mutable std::mutex mu_;
  std::vector<std::weak_ptr<CrossHostComm>> comms_;
  struct Rejoining {
    std::shared_ptr<CrossHostComm> comm;
    uint32_t remaining = 0;  // this host's ranks still to come back
  };
  std::map<coll::Uid, Rejoining> rejoining_;
  HostCaller host_caller_;
  std::vector<ReformNotice> unsent_;  // until the caller is set
};

}  // namespace hz::service

#endif  // HZ_SERVICE_CLUSTER_COLL_BACKEND_H_
