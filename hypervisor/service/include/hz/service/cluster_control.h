// This host's part in a cluster: its membership, started from [cluster], and
// what the operator sees of it (cluster.status, metrics). Through the
// membership records it also tells the other hosts the shape of each tenant's
// devices here and hands theirs to the scheduler, so that a tenant's topology
// summary covers its devices on every host (cluster_topology.h). Without a
// [cluster] section it does nothing and says the host runs alone.
#ifndef HZ_SERVICE_CLUSTER_CONTROL_H_
#define HZ_SERVICE_CLUSTER_CONTROL_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz/cluster/membership.h"
#include "hz/common/status.h"
#include "hz/scheduler/topology_summary.h"
#include "hz/service/command_registry.h"
#include "hz/service/config.h"

namespace prometheus {
class Registry;
}

namespace hz::service {

// What the rest of the service gives the cluster, and takes from it. Each
// is called on the membership thread and must not block; any may be empty.
struct ClusterHooks {
  // The live hosts, this one included, after any change.
  std::function<void(std::vector<cluster::HostInfo> hosts)> hosts;
  // A host left this host's view.
  std::function<void(const std::string& host, const std::string& why)> host_left;
  // The communicators across hosts, as cluster.status lists them.
  std::function<nlohmann::json()> communicators;
  // Per tenant, the shape of its devices on this host.
  std::function<std::map<std::string, scheduler::HostShape>()> local_shapes;
  // This host's placement record (hz/scheduler/cluster_placement.h), which
  // the other hosts plan allocations spread over several hosts from.
  std::function<nlohmann::json()> placement;
  // The tenant's devices on the other hosts are now `shapes`.
  std::function<void(const std::string& tenant, std::vector<scheduler::HostShape> shapes)>
      other_hosts;
};

class ClusterControl {
 public:
  ClusterControl(const ClusterConfig& config, ClusterHooks hooks)
      : config_(config), hooks_(std::move(hooks)) {}
  ~ClusterControl();
  ClusterControl(const ClusterControl&) = delete;
  ClusterControl& operator=(const ClusterControl&) = delete;

  // Joins the cluster (nothing without [cluster]). Fails when this host's
  // name is held by another live host; a store that cannot be reached is
  // not a failure (the host keeps trying, and says so in cluster.status).
  // A process that took over in a live upgrade passes its predecessor's
  // Instance(), and holds on to the same lease.
  hz::Status Start(const std::string& instance = {});
  // Leaves the cluster: the record is deleted, so the other hosts notice at
  // once rather than a lease later.
  void Stop();

  // This process's holder id of the host's record; empty outside a cluster.
  std::string Instance() const;

  // Whether `host` is a live member of the cluster, as last read.
  bool IsLiveHost(const std::string& host) const;

  static std::span<const CommandSpec<ClusterControl>> Commands();
  CommandResult ClusterStatus(const nlohmann::json& req);
  void CollectMetrics(prometheus::Registry* r) const;

 private:
  // A host joined, left or changed its attributes: every tenant's shapes on
  // the other hosts go to the scheduler again.
  void OnChange(const cluster::MembershipChange& change);

  const ClusterConfig config_;
  const ClusterHooks hooks_;
  std::string host_name_;                      // config's, or the system's host name
  std::set<std::string> tenants_elsewhere_;    // the membership thread's
  std::atomic<uint64_t> malformed_shapes_{0};  // in the other hosts' records, as last read
  std::unique_ptr<cluster::Membership> membership_;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_CLUSTER_CONTROL_H_
