// The maintenance workflow (maintenance.h) wired into the service: who is on
// this host, the one publication path, the scheduler's cordon, and a timer
// on the main io_context that starts what is due.
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <ctime>

#include "hz/scheduler/scheduler.h"
#include "hz/service/service.h"
#include "maintenance.h"

namespace hz::service {

namespace {
// How often a scheduled maintenance's start time is looked at: starts are
// coarse (SPEC §8.5 rounds deadlines to 10 s).
constexpr std::chrono::seconds kMaintenancePoll{1};
}  // namespace

std::set<std::string> Service::HostTenants() const {
  std::set<std::string> tenants;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [path, b] : bindings_) tenants.insert(b.tenant);
  }
  if (provider_ && provider_->scheduler()) {
    for (const nlohmann::json& a : provider_->scheduler()->Allocations()) {
      if (a.contains("tenant") && a["tenant"].is_string()) {
        tenants.insert(a["tenant"].get<std::string>());
      }
    }
  }
  return tenants;
}

hz::StatusOr<std::set<std::string>> Service::TenantsOfVms(
    const std::vector<std::string>& vms) const {
  if (vms.empty()) return HostTenants();
  std::set<std::string> tenants;
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& vm : vms) {
    auto it = bindings_.find(ResolveSocketPath(vm));
    if (it == bindings_.end()) return hz::Status::NotFound("no VM is bound to " + vm);
    tenants.insert(it->second.tenant);
  }
  return tenants;
}

// A preemption takes devices, and the scheduler attaches every device of a
// tenant to its one libvirt domain (tenant.domain): the VMs it concerns are
// those bound with that domain, and those whose domain the operator did not
// name (one of them may be it). Every VM when the tenant has no domain.
std::optional<std::set<std::string>> Service::VmsOfNotice(const TenantId& tenant,
                                                          const hz_event& ev) const {
  if (ev.topic != HZ_TOPIC_PREEMPTION || !provider_ || !provider_->scheduler()) {
    return std::nullopt;
  }
  std::optional<std::string> domain = provider_->scheduler()->DomainOf(tenant);
  if (!domain) return std::nullopt;
  std::set<std::string> vms;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [path, b] : bindings_) {
    if (b.tenant == tenant.name() && (b.domain.empty() || b.domain == *domain)) vms.insert(path);
  }
  return vms;
}

hz::Status Service::StartMaintenance() {
  MaintenanceHooks hooks;
  hooks.unix_now = [] { return static_cast<uint64_t>(std::time(nullptr)); };
  hooks.host = config_.cluster.HostName();
  hooks.hook = config_.maintenance_hook;
  hooks.hook_timeout_s = config_.maintenance_hook_timeout_s;
  hooks.affected = [this](const std::vector<std::string>& vms) { return TenantsOfVms(vms); };
  hooks.publish = [this](const std::string& tenant, const events::EventSpec& spec, uint64_t* seq,
                         const std::set<std::string>& vms) {
    std::set<std::string> paths;
    for (const std::string& vm : vms) paths.insert(ResolveSocketPath(vm));
    return engines_->Publish(TenantId(tenant), spec, seq, paths);
  };
  hooks.cordon = [this](bool cordoned) {
    if (provider_ && provider_->scheduler()) provider_->scheduler()->SetCordoned(cordoned);
  };
  hooks.post = [this](std::function<void()> fn) {
    boost::asio::post(io_, [this, fn = std::move(fn)] {
      if (maintenance_) fn();
    });
  };
  maintenance_ = std::make_shared<MaintenanceWorkflow>(config_.state_dir + "/maintenance.json",
                                                       std::move(hooks));
  if (hz::Status s = maintenance_->Load(); !s.ok()) return s;
  // The bus's threads reach it through a weak pointer: a call in progress
  // when StopMaintenance lets go keeps it alive until the call returns.
  std::weak_ptr<MaintenanceWorkflow> weak = maintenance_;
  engines_->SetPublishedObserver([weak](const TenantId& tenant, const hz_event& ev) {
    if (auto m = weak.lock()) m->OnPublished(tenant, ev);
  });
  engines_->bus()->SetApprovalCallback([weak](const TenantId& tenant, const hz_event& ev) {
    if (auto m = weak.lock()) m->OnApproval(tenant, ev);
  });
  commands_.Add(maintenance_.get(), MaintenanceWorkflow::Commands());
  maintenance_timer_ = std::make_unique<boost::asio::steady_timer>(io_);
  ArmMaintenance();
  return hz::Status::Ok();
}

void Service::ArmMaintenance() {
  maintenance_timer_->expires_after(kMaintenancePoll);
  maintenance_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec || draining_ || !maintenance_) return;
    if (!upgrading_) maintenance_->Tick();  // the state is being handed over
    ArmMaintenance();
  });
}

void Service::StopMaintenance() {
  if (!maintenance_) return;
  engines_->SetPublishedObserver({});
  engines_->bus()->SetApprovalCallback({});
  maintenance_.reset();  // waits for its hooks
}

}  // namespace hz::service
