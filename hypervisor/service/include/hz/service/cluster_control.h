// This host's part in a cluster: its membership, started from [cluster], and
// what the operator sees of it (cluster.status, metrics). Without a
// [cluster] section it does nothing and says the host runs alone.
#ifndef HZ_SERVICE_CLUSTER_CONTROL_H_
#define HZ_SERVICE_CLUSTER_CONTROL_H_

#include <functional>
#include <memory>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "hz/cluster/membership.h"
#include "hz/common/status.h"
#include "hz/service/command_registry.h"
#include "hz/service/config.h"

namespace hz::service {

class ClusterControl {
 public:
  // Called on the membership thread when a host leaves this host's view.
  using HostLeft = std::function<void(const std::string& host, const std::string& why)>;

  // The communicators across hosts, as cluster.status lists them.
  using Communicators = std::function<nlohmann::json()>;

  ClusterControl(const ClusterConfig& config, HostLeft host_left, Communicators communicators)
      : config_(config),
        host_left_(std::move(host_left)),
        communicators_(std::move(communicators)) {}
  ~ClusterControl();
  ClusterControl(const ClusterControl&) = delete;
  ClusterControl& operator=(const ClusterControl&) = delete;

  // Joins the cluster (nothing without [cluster]). Fails when this host's
  // name is held by another live host; a store that cannot be reached is
  // not a failure (the host keeps trying, and says so in cluster.status).
  hz::Status Start();
  // Leaves the cluster: the record is deleted, so the other hosts notice at
  // once rather than a lease later.
  void Stop();

  static std::span<const CommandSpec<ClusterControl>> Commands();
  CommandResult ClusterStatus(const nlohmann::json& req);
  std::string MetricsText() const;

 private:
  const ClusterConfig config_;
  const HostLeft host_left_;
  const Communicators communicators_;
  std::string host_name_;  // config's, or the system's host name
  std::unique_ptr<cluster::Membership> membership_;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_CLUSTER_CONTROL_H_
