#include "hz/service/cluster_control.h"

#include <chrono>

#include "cluster_topology.h"
#include "command_args.h"
#include "hz/cluster/redis_lease_store.h"
#include "metrics_families.h"
#include "spdlog/spdlog.h"

namespace hz::service {

using json = nlohmann::json;

ClusterControl::~ClusterControl() {
  Stop();
}

hz::Status ClusterControl::Start(const std::string& instance) {
  if (!config_.enabled) return hz::Status::Ok();
  host_name_ = config_.HostName();
  if (host_name_.empty()) {
    return hz::Status::InvalidArgument("cluster.host_name is not set and the system has none");
  }
  StatusOr<cluster::RedisAddress> address = cluster::RedisAddress::Parse(config_.store);
  if (!address.ok()) return address.status();
  auto store = std::make_unique<cluster::RedisLeaseStore>(*address, config_.key_prefix,
                                                          config_.StoreTimeout());
  cluster::MembershipOptions options{
      host_name_, config_.data_address, config_.lease_ms, {}, instance};
  options.attributes = [this] {
    json a = hooks_.local_shapes ? ShapesAttribute(hooks_.local_shapes()) : json::object();
    if (hooks_.placement) a["placement"] = hooks_.placement();
    return a;
  };
  membership_ = std::make_unique<cluster::Membership>(
      std::move(store), std::move(options),
      [this](const cluster::MembershipChange& c) { OnChange(c); });
  if (hz::Status s = membership_->Start(); !s.ok()) {
    membership_.reset();
    return s;
  }
  return hz::Status::Ok();
}

void ClusterControl::OnChange(const cluster::MembershipChange& change) {
  if (change.kind == cluster::MembershipChange::Kind::kLeft && hooks_.host_left) {
    hooks_.host_left(change.host, change.why);
  }
  if (hooks_.hosts) hooks_.hosts(membership_->View().hosts);
  if (!hooks_.other_hosts) return;
  uint64_t malformed = 0;
  auto shapes = OtherHostsShapes(membership_->View().hosts, &malformed);
  malformed_shapes_ = malformed;
  std::set<std::string> tenants;
  for (auto& [tenant, list] : shapes) {
    tenants.insert(tenant);
    hooks_.other_hosts(tenant, std::move(list));
  }
  // Tenants with nothing on the other hosts any more.
  for (const std::string& tenant : tenants_elsewhere_) {
    if (tenants.count(tenant) == 0) hooks_.other_hosts(tenant, {});
  }
  tenants_elsewhere_ = std::move(tenants);
}

std::string ClusterControl::Instance() const {
  return membership_ ? membership_->instance() : std::string();
}

void ClusterControl::Stop() {
  if (!membership_) return;
  membership_->Stop(/*release=*/true);
  spdlog::info("event=cluster_left host={}", host_name_);
  membership_.reset();
}

bool ClusterControl::IsLiveHost(const std::string& host) const {
  if (!membership_) return false;
  for (const cluster::HostInfo& h : membership_->View().hosts) {
    if (h.name == host) return true;
  }
  return false;
}

std::span<const CommandSpec<ClusterControl>> ClusterControl::Commands() {
  static const CommandSpec<ClusterControl> kCommands[] = {
      {"cluster.status", false, &ClusterControl::ClusterStatus},
  };
  return kCommands;
}

CommandResult ClusterControl::ClusterStatus(const json& req) {
  if (hz::Status err = OnlyFields(req, {}); !err.ok()) return err;
  if (!membership_) return json{{"mode", "single-host"}};
  const cluster::MembershipView v = membership_->View();
  json hosts = json::array();
  for (const cluster::HostInfo& h : v.hosts) {
    hosts.push_back({{"name", h.name},
                     {"data_address", h.data_address},
                     {"lease_remaining_ms", h.lease_remaining_ms},
                     {"self", h.self}});
  }
  json out = {{"mode", "cluster"},
              {"host", host_name_},
              {"data_address", config_.data_address},
              {"store", v.store},
              {"state", cluster::MemberStateName(v.state)},
              {"lease_ms", config_.lease_ms},
              {"ms_since_store_contact", v.ms_since_contact},
              {"hosts", std::move(hosts)},
              {"communicators", hooks_.communicators ? hooks_.communicators() : json::array()},
              {"rounds", v.rounds},
              {"failed_rounds", v.failed_rounds},
              {"hosts_joined", v.hosts_joined},
              {"hosts_left", v.hosts_left},
              {"malformed_records", v.malformed_records},
              {"malformed_tenant_shapes", malformed_shapes_.load()}};
  if (!v.detail.empty()) out["detail"] = v.detail;
  return out;
}

void ClusterControl::CollectMetrics(prometheus::Registry* r) const {
  if (!membership_) return;
  const cluster::MembershipView v = membership_->View();
  AddGauge(r, "hz_cluster_member",
           "1 while this host holds its lease in the cluster store and sees the other hosts.",
           v.state == cluster::MemberState::kMember ? 1 : 0);
  AddGauge(r, "hz_cluster_hosts", "Live hosts of the cluster, this one included.",
           static_cast<double>(v.hosts.size()));
  AddCounter(r, "hz_cluster_store_failures_total",
             "Membership rounds that could not reach the cluster store.",
             static_cast<double>(v.failed_rounds));
  AddCounter(r, "hz_cluster_hosts_left_total",
             "Hosts dropped from this host's view (lease ended, or the store was lost).",
             static_cast<double>(v.hosts_left));
}

}  // namespace hz::service
