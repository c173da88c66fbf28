// What the service reports about itself: `hzctl status` and `hzctl counters`
// (Status, Counters) and the Prometheus exposition of /metrics (MetricsText).
#include <algorithm>
#include <chrono>
#include <mutex>

#include <prometheus/registry.h>

#include "control_server.h"
#include "hz/common/idle_class_guard.h"
#include "hz/service/request.h"
#include "hz/service/service.h"
#include "maintenance.h"
#include "metrics_families.h"
#include "metrics_server.h"
#include "protocol/harmonaize_opcodes.h"
#include "vdev/turn_scheduler.h"

namespace hz::service {

using json = nlohmann::json;

json Service::Status() const {
  size_t bound;
  {
    std::lock_guard<std::mutex> lock(mu_);
    bound = bindings_.size();
  }
  size_t connected = 0;
  devices_.ForEach([&](HzDevice& d) { connected += d.Info().connected ? 1 : 0; });
  auto up =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_);
  return {{"version", HZ_VERSION_MAJOR * 100 + HZ_VERSION_MINOR},
          {"pid", getpid()},
          {"upgrade", UpgradeStatus()},
          {"draining", draining_.load()},
          {"state_dir", config_.state_dir},
          {"control_socket", config_.ControlSocketPath()},
          {"vm_socket_dir", config_.VmSocketDir()},
          {"metrics_port", metrics_port_},
          {"uptime_s", up.count()},
          {"tenants", tenants_.List().size()},
          {"vms_bound", bound},
          {"vms_connected", connected},
          {"collectives", coll_ != nullptr},
          {"scheduler", provider_ != nullptr}};
}

json Service::Counters() const {
  json requests = json::array();
  for (const hz_opcode_name& o : hz_opcode_names) {
    const uint16_t op = o.opcode;
    for (uint32_t s = 0; s <= HZ_S_MAX; ++s) {
      uint64_t n = metrics_.requests(op, s);
      if (n != 0) {
        requests.push_back({{"opcode", OpcodeName(op)}, {"status", StatusName(s)}, {"count", n}});
      }
    }
  }
  json out = {{"requests", requests}, {"dropped", metrics_.dropped()}};
  // Read from any thread, as ChargedTurns does.
  json threads = json::array();
  for (const auto& t : vdev_threads_) {
    threads.push_back({{"sleeps", t->loop.sleeps.load(std::memory_order_relaxed)},
                       {"idle_polls", t->loop.idle_polls.load(std::memory_order_relaxed)}});
  }
  out["connection_threads"] = std::move(threads);
  if (idle_guard_) out["bulk_thread_lifts"] = idle_guard_->lifts();
  if (engines_) out.update(engines_->Counters());
  if (provider_) out["provider"] = provider_->Counters();
  if (coll_) {
    BackendStats s = coll_->Stats();
    json algos = json::object();
    for (const auto& [name, n] : s.algorithms) algos[name] = n;
    out["engine"] = {{"algorithms", algos},
                     {"communicators", s.communicators},
                     {"aborts", s.aborts},
                     {"timeouts", s.timeouts},
                     {"mismatches", s.mismatches},
                     {"workers", s.workers},
                     {"streamed", s.streamed},
                     {"worker_polls", s.worker_polls},
                     {"worker_polled_tasks", s.worker_polled_tasks}};
    if (!s.cross_host.empty()) {
      json x = json::object();
      for (const auto& [name, n] : s.cross_host) x[name] = n;
      out["engine"]["cross_host"] = std::move(x);
    }
  }
  return out;
}

std::map<std::string, TenantTurns> Service::ChargedTurns() const {
  std::map<std::string, TenantTurns> out;
  // Read here, not on the connection threads: the schedulers keep their
  // charges in atomics for any thread to read, so a busy connection thread
  // does not hold up the reader. vdev_threads_ is made by Start before the
  // metrics endpoint serves and cleared by Shutdown on the endpoint's thread.
  for (const auto& t : vdev_threads_) {
    for (const auto& [tenant, c] : t->turns->Charges()) {
      TenantTurns& sum = out[tenant];
      sum.nanoseconds += c.nanoseconds;
      sum.turns += c.turns;
    }
  }
  return out;
}

std::string Service::MetricsText() const {
  MetricsSnapshot snap;
  {
    std::lock_guard<std::mutex> lock(mu_);
    snap.vms_bound = bindings_.size();
  }
  for (const auto& t : tenants_.List()) snap.tenant_names.push_back(t->name());
  snap.tenants = snap.tenant_names.size();
  snap.tenant_turns = ChargedTurns();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [tenant, sum] : snap.tenant_turns) {
      auto before = turns_before_.find(tenant);
      if (before == turns_before_.end()) continue;
      sum.nanoseconds -= std::min(sum.nanoseconds, before->second.nanoseconds);
      sum.turns -= std::min(sum.turns, before->second.turns);
    }
  }
  snap.draining = draining_.load();
  devices_.ForEach([&](HzDevice& d) {
    DeviceInfo i = d.Info();
    snap.vms_connected += i.connected ? 1 : 0;
    snap.regions += i.regions;
    snap.region_bytes += i.region_bytes;
    snap.device_communicators += i.comms.size();
  });
  BackendStats engine;
  if (coll_) {
    engine = coll_->Stats();
    snap.engine = &engine;
    for (const auto& t : tenants_.List()) {
      snap.coll_weights.emplace_back(t->name(), coll_->TenantWeight(t->id()));
    }
  }
  prometheus::Registry r;  // fresh per scrape (src/metrics_families.h)
  CollectBuildInfo(&r);
  metrics_.Collect(snap, &r);
  if (idle_guard_) {
    AddCounter(&r, "hz_bulk_thread_lifts_total",
               "Times a bulk thread starved in the kernel's idle class and was put at its nice "
               "value for a while (bulk_idle_class).",
               static_cast<double>(idle_guard_->lifts()));
  }
  if (engines_) engines_->CollectMetrics(&r);
  if (provider_) provider_->CollectMetrics(&r);
  if (cluster_) cluster_->CollectMetrics(&r);
  if (maintenance_) maintenance_->CollectMetrics(&r);
  if (metrics_server_) CollectListenerMetrics(control_->accept_failures(), *metrics_server_, &r);
  return SerializeMetrics(r);
}

}  // namespace hz::service
