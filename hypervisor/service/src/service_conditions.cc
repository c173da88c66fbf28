// The host's conditions as tenants hear of them (host_conditions.h): a timer
// on the main io_context measures, every [conditions] poll_ms, who uses
// what on this host and how congested the collective workers are, and
// HostConditions publishes what changed and applies energy slack.
#include <boost/asio/steady_timer.hpp>
#include <ctime>

#include "host_conditions.h"
#include "hz/scheduler/scheduler.h"
#include "hz/service/service.h"
#include "spdlog/spdlog.h"

namespace hz::service {

hz::Status Service::StartConditions() {
  ConditionHooks hooks;
  hooks.unix_now = [] { return static_cast<uint64_t>(std::time(nullptr)); };
  hooks.publish = [this](const std::string& tenant, const events::EventSpec& spec) {
    uint64_t seq = 0;
    hz::Status s = engines_->Publish(TenantId(tenant), spec, &seq);
    if (!s.ok()) {
      spdlog::warn("event=condition_publish_failed tenant={} topic={} error=\"{}\"", tenant,
                   spec.topic, s.ToString());
    }
  };
  hooks.set_share = [this](const std::string& tenant, uint32_t percent, uint64_t seconds) {
    if (coll_) coll_->SetTenantShare(TenantId(tenant), percent, std::chrono::seconds(seconds));
  };
  conditions_ = std::make_unique<HostConditions>(
      config_.state_dir, config_.conditions.congestion_hysteresis_s, std::move(hooks));
  if (hz::Status s = conditions_->Load(); !s.ok()) return s;
  env_.energy = conditions_.get();
  commands_.Add(conditions_.get(), HostConditions::Commands());
  conditions_timer_ = std::make_unique<boost::asio::steady_timer>(io_);
  ArmConditions();
  return hz::Status::Ok();
}

void Service::ArmConditions() {
  conditions_timer_->expires_after(std::chrono::milliseconds(config_.conditions.poll_ms));
  conditions_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec || draining_) return;
    // The next process publishes from the state it loads; this one must
    // not change it meanwhile.
    if (!upgrading_) PollConditions();
    ArmConditions();
  });
}

void Service::PollConditions() {
  ConditionInputs in;
  in.host_tenants = HostTenants();
  if (coll_) {
    for (const CommSummary& c : coll_->Communicators()) in.host_memory.tenants.insert(c.tenant);
    in.host_memory.waiting = coll_->WorkerWaiting();
    in.fabric.waiting = coll_->FabricWaiting(&in.fabric.tenants);
  }
  in.storage.waiting = engines_->StorageWaiting();
  for (const std::string& t : in.host_tenants) {
    if (engines_->PersistsCheckpoints(TenantId(t))) in.storage.tenants.insert(t);
  }
  conditions_->Update(in);
}

}  // namespace hz::service
