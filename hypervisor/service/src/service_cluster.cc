// The service in a cluster: what membership tells the rest of the service
// and asks of it, and operator commands across the hosts. A command with
// "on_host": H runs on host H: this host forwards it through the cluster
// store (hz/cluster/host_commands.h) and returns H's answer as its own.
// Only the commands below travel, on both ends: placing and releasing
// devices (the parts of a spread allocation) and the maintenance workflow,
// so that any host can schedule another's maintenance. Everything else
// stays with the host whose control socket it came to.
//
// A forwarded command runs on the main io_context like a local one, so it
// meets the same state the same way. Forwarding waits on that io_context
// (at most [cluster] command_timeout_ms): two hosts that forward to each
// other at the same moment both wait until the timeout.
#include <boost/asio/post.hpp>
#include <future>
#include <set>

#include "cluster_coll_backend.h"
#include "hz/service/service.h"
#include "spdlog/spdlog.h"

namespace hz::service {

using json = nlohmann::json;

namespace {

bool Forwardable(const std::string& cmd) {
  // clang-format off
  static const std::set<std::string> kCommands = {
      "alloc", "release", "allocation.list", "allocation.spread", "inventory", "cluster.status",
      "maintenance.schedule", "maintenance.status", "maintenance.cancel", "maintenance.complete"};
  // clang-format on
  return kCommands.count(cmd) != 0;
}

json Refused(const std::string& why, StatusCode code = StatusCode::kInvalidArgument) {
  return {{"ok", false}, {"error", why}, {"status", static_cast<int>(code)}};
}

json CrossHostCommsJson(const ClusterCollBackend* backend) {
  json out = json::array();
  if (backend == nullptr) return out;
  for (const CrossHostCommInfo& c : backend->CrossHostComms()) {
    // The measured leg: per algorithm, its latency and the rate it reaches.
    json model = json::object();
    for (cluster::InterHostAlgorithm a : cluster::kInterHostAlgorithms) {
      if (!c.leg_model) break;
      model[cluster::InterHostAlgorithmName(a)] = {
          {"latency_us", c.leg_model->Seconds(a, 0) * 1e6},
          {"mbit_s", c.leg_model->BytesPerSecond(a) * 8e-6}};
    }
    out.push_back({{"tenant", c.tenant},
                   {"nranks", c.nranks},
                   {"hosts", c.hosts},
                   {"local_ranks", c.local_ranks},
                   {"state", c.state},
                   {"next_seq", c.next_seq},
                   {"abort_reason", c.abort_reason},
                   {"leg_model", std::move(model)}});
  }
  return out;
}

// What the cluster's membership tells the rest of the service, and asks of
// it: hosts leaving abort communicators across hosts; each tenant's summary
// covers its devices on every host; checkpoints are copied to live hosts.
}  // namespace

ClusterHooks Service::ClusterHooksFor(ClusterCollBackend* cross_host) {
  scheduler::Scheduler* sched = provider_ ? provider_->scheduler() : nullptr;
  ClusterHooks hooks;
  hooks.hosts = [e = engines_.get(), p = provider_.get()](std::vector<cluster::HostInfo> hosts) {
    if (p) p->SetClusterHosts(hosts);
    e->ClusterHosts(std::move(hosts));
  };
  hooks.host_left = [cross_host](const std::string& host, const std::string& why) {
    if (cross_host) cross_host->HostLeft(host, why);
  };
  hooks.communicators = [cross_host] { return CrossHostCommsJson(cross_host); };
  if (sched == nullptr) return hooks;
  hooks.local_shapes = [sched] { return sched->LocalShapes(); };
  hooks.placement = [sched] { return scheduler::PlacementRecordJson(sched->LocalPlacement()); };
  hooks.other_hosts = [sched](const std::string& tenant, std::vector<scheduler::HostShape> shapes) {
    hz::Status s = sched->SetOtherHosts(TenantId(tenant), std::move(shapes));
    if (!s.ok())
      spdlog::warn("event=cluster_shapes_failed tenant={} error=\"{}\"", tenant, s.ToString());
  };
  return hooks;
}

hz::Status Service::StartHostCommands() {
  if (!config_.cluster.enabled) return hz::Status::Ok();
  cluster::HostCommandsOptions o;
  o.store = *cluster::RedisAddress::Parse(config_.cluster.store);  // ValidateConfig checked it
  o.key_prefix = config_.cluster.key_prefix;
  o.host_name = config_.cluster.HostName();
  o.store_timeout = config_.cluster.StoreTimeout();
  o.timeout = std::chrono::milliseconds(config_.cluster.command_timeout_ms);
  host_commands_ = std::make_unique<cluster::HostCommands>(
      o, [this](const json& req, const std::string& from) { return ServeForwarded(req, from); });
  auto call = [this](const std::string& host, const json& req) {
    return host_commands_->Call(host, req);
  };
  if (provider_) {
    if (hz::Status s = provider_->JoinCluster(o.host_name, call); !s.ok()) return s;
  }
  if (auto* cross_host = dynamic_cast<ClusterCollBackend*>(coll_.get())) {
    cross_host->SetHostCaller(call);
  }
  host_commands_->Start();
  return hz::Status::Ok();
}

std::string Service::HandleControl(const std::string& line) {
  if (upgrading_ && !ReadOnlyCommand(line)) {
    return json{{"ok", false},
                {"error", "a live upgrade is under way: only commands that change nothing run"},
                {"status", static_cast<int>(StatusCode::kBusy)}}
        .dump();
  }
  json req = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!req.is_object() || !req.contains("on_host")) return api_.Handle(line).dump();
  const json& host = req["on_host"];
  const json id = req.value("id", json());
  json answer;
  if (!host.is_string()) {
    answer = Refused("field \"on_host\" must be a host name");
  } else if (host.get<std::string>() == config_.cluster.HostName()) {
    req.erase("on_host");
    return api_.Handle(req.dump()).dump();
  } else if (!host_commands_) {
    answer = Refused("this host is not in a cluster: it runs commands for itself only");
  } else if (!cluster_->IsLiveHost(host.get<std::string>())) {
    answer = Refused("no live host \"" + host.get<std::string>() + "\" in the cluster",
                     StatusCode::kNotFound);
  } else if (!Forwardable(req.value("cmd", std::string()))) {
    answer = Refused("command \"" + req.value("cmd", std::string()) +
                     "\" runs only on the host whose control socket it comes to");
  } else {
    StatusOr<json> r = host_commands_->Call(host.get<std::string>(), req);
    answer = r.ok() ? *r : Refused(OperatorError(r.status()), r.status().code());
  }
  if (!id.is_null()) answer["id"] = id;
  return answer.dump();
}

json Service::ServeForwarded(json req, const std::string& from) {
  const std::string cmd = req.value("cmd", std::string());
  // Between hosts only (no operator sends it): a communicator across hosts
  // re-forms after another host's upgrade (cluster_coll_backend.h).
  if (cmd == ClusterCollBackend::kReformCommand) {
    auto* cross_host = dynamic_cast<ClusterCollBackend*>(coll_.get());
    if (cross_host == nullptr) return Refused("this host runs no communicators across hosts");
    spdlog::info("event=host_command from={} cmd={}", from, cmd);
    return cross_host->ReformRequested(req);
  }
  if (!Forwardable(cmd)) {
    spdlog::warn("event=host_command_refused from={} cmd=\"{}\"", from, cmd);
    return Refused("command \"" + cmd + "\" is not run for another host", StatusCode::kPermission);
  }
  if (req.contains("on_host") && req["on_host"] != config_.cluster.HostName()) {
    return Refused("this is host " + config_.cluster.HostName() + ": commands are not relayed");
  }
  req.erase("on_host");
  req.erase("id");
  auto done = std::make_shared<std::promise<json>>();
  std::future<json> answer = done->get_future();
  boost::asio::post(io_, [this, done, line = req.dump()] { done->set_value(api_.Handle(line)); });
  // The io_context stops before the service's shutdown; its wait is then
  // cut short instead of running out.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(config_.cluster.command_timeout_ms / 2);
  while (answer.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (stopped_ || io_.stopped() || std::chrono::steady_clock::now() > deadline) {
      return Refused("host " + config_.cluster.HostName() + " is stopping or busy",
                     StatusCode::kTryAgain);
    }
  }
  spdlog::info("event=host_command from={} cmd={}", from, cmd);
  return answer.get();
}

}  // namespace hz::service
