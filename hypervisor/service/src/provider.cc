#include "hz/service/provider.h"
#include "hz/common/thread_priority.h"

#include <ctime>

#include <boost/asio/post.hpp>

#include "metrics_families.h"
#include "spdlog/spdlog.h"

namespace hz::service {

using json = nlohmann::json;
namespace ev = hz::events;
namespace neg = hz::negotiation;
namespace sc = hz::scheduler;

Provider::Provider(const ServiceConfig& config, boost::asio::io_context& io, ev::EventSink* sink,
                   ResourcesView view)
    : config_(config),
      sink_(sink),
      view_(std::move(view)),
      decide_timer_(decide_io_),
      health_timer_(io) {}

Provider::~Provider() {
  Stop();
  // The engine refers to the scheduler through resources_.
  engine_.reset();
  viewed_.reset();
  resources_.reset();
  health_.reset();
  sched_.reset();
  virt_.reset();
}

uint64_t Provider::Now() {
  return static_cast<uint64_t>(std::time(nullptr));
}

Status Provider::Start() {
  const SchedulerConfig& c = config_.scheduler;
  if (!c.libvirt_uri.empty()) {
    Status s = sc::LibvirtAttacher::Open(c.libvirt_uri, c.hostdev_managed, &virt_);
    if (!s.ok()) return Status(s.code(), "libvirt " + c.libvirt_uri + ": " + s.ToString());
  }
  sc::SchedulerOptions o;
  o.sysfs_root = c.sysfs_root;
  o.provider_file = c.provider_file;
  o.state_path = config_.SchedulerStatePath();
  o.bind_vfio = c.bind_vfio;
  o.sync = c.sync;
  Status s = sc::Scheduler::Open(o, virt_.get(), sink_, &sched_);
  if (!s.ok()) {
    return Status(s.code(), "scheduler (sysfs " + c.sysfs_root + "): " + s.ToString());
  }
  neg::NegotiationOptions no;
  no.window_s = config_.negotiation.window_s;
  no.offer_ttl_s = config_.negotiation.offer_ttl_s;
  no.max_lookahead_s = config_.negotiation.max_lookahead_s;
  no.max_duration_s = config_.negotiation.max_duration_s;
  no.max_open_per_tenant = config_.negotiation.max_open_per_tenant;
  no.decide_budget = config_.negotiation.decide_budget;
  no.preemption_notice_s = config_.negotiation.preemption_notice_s;
  s = neg::NegotiationEngine::ValidateOptions(no);
  if (!s.ok()) return Status(s.code(), "negotiation: " + s.ToString());
  hints_ = std::make_unique<neg::HintEngine>(sink_);
  resources_ = std::make_unique<SchedulerResources>(sched_.get());
  if (view_) viewed_ = view_(resources_.get());
  neg::ResourceProvider* view = viewed_ ? viewed_.get() : resources_.get();
  engine_ = std::make_unique<neg::NegotiationEngine>(no, view, sink_);
  // Hints follow every change of a tenant's GPU count the engine makes.
  neg::HintEngine* hints = hints_.get();
  engine_->SetAllocationListener([this, hints](const TenantId& tenant, uint32_t gpus) {
    gpus_[tenant] = gpus;  // the engine runs under mu_
    hints->SetDevices(tenant, gpus);
  });
  health_ = std::make_unique<ev::HealthMonitor>(c.sysfs_root, sink_);
  // The monitor polls under mu_; PollHealth hands the lost devices to the
  // scheduler after it, without mu_.
  health_->SetFailureListener([this](const TenantId& tenant, uint32_t index, ev::FailureKind kind) {
    if (kind != ev::kFailureDeviceFailed) return;  // degraded devices stay attached
    devices_lost_++;
    lost_.push_back({tenant, index, BdfAssignedLocked(tenant, index)});
  });
  {
    std::lock_guard<std::mutex> lock(mu_);
    SyncLocked();
  }
  spdlog::info("event=scheduler_started sysfs_root={} devices={} libvirt={} state={}", c.sysfs_root,
               sched_->Inventory().size(), c.libvirt_uri.empty() ? "none" : c.libvirt_uri,
               o.state_path);
  decide_work_.emplace(decide_io_.get_executor());
  decide_thread_ = NamedThread("hz-provider", [this] { decide_io_.run(); });
  boost::asio::post(decide_io_, [this] {
    ArmEvery(decide_timer_, config_.negotiation.decide_interval_ms, &Provider::DecisionPoint);
  });
  ArmEvery(health_timer_, config_.scheduler.health_poll_ms, &Provider::PollHealth);
  return Status::Ok();
}

Status Provider::JoinCluster(const std::string& self, SpreadHooks::CallHost call) {
  SpreadHooks hooks;
  hooks.self = self;
  hooks.local_record = [this] { return sched_->LocalPlacement(); };
  hooks.run_here = [this](const nlohmann::json& req) -> CommandResult {
    const std::string cmd = req.value("cmd", std::string());
    nlohmann::json args = req;
    args.erase("cmd");
    if (cmd == "alloc") return Alloc(args);
    if (cmd == "release") return ReleaseAllocation(args);
    return Status::NotSupported("not a placement command: " + cmd);
  };
  hooks.call = std::move(call);
  spread_ = std::make_unique<SpreadAllocations>(config_.state_dir + "/spread_allocations.json",
                                                std::move(hooks), config_.scheduler.sync);
  return spread_->Load();
}

void Provider::SetClusterHosts(const std::vector<cluster::HostInfo>& hosts) {
  if (spread_) spread_->SetHosts(hosts);
}

void Provider::Stop() {
  alive_->store(false);
  health_timer_.cancel();
  // The decision thread finishes the decision point it is in, if any.
  decide_work_.reset();
  decide_io_.stop();
  if (decide_thread_.joinable()) decide_thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.clear();
  waiting_count_ = 0;
}

void Provider::ArmEvery(boost::asio::steady_timer& timer, uint64_t interval_ms,
                        void (Provider::*tick)()) {
  if (interval_ms == 0) return;  // off
  timer.expires_after(std::chrono::milliseconds(interval_ms));
  std::shared_ptr<std::atomic<bool>> alive = alive_;
  timer.async_wait([this, &timer, interval_ms, tick, alive](const boost::system::error_code& ec) {
    if (ec || !alive->load()) return;
    (this->*tick)();
    ArmEvery(timer, interval_ms, tick);
  });
}

void Provider::SyncLocked() {
  std::map<std::string, std::pair<TenantId, uint32_t>> now;
  for (const auto& [tenant, bdf, index] : sched_->Assignments()) now[bdf] = {tenant, index};
  for (const auto& [bdf, who] : assigned_) {
    auto it = now.find(bdf);
    if (it == now.end() || it->second != who) health_->Unassign(bdf);
  }
  for (const auto& [bdf, who] : now) {
    auto it = assigned_.find(bdf);
    if (it != assigned_.end() && it->second == who) continue;
    // A device whose counters cannot be read is still tracked by the
    // scheduler; the monitor reports it at each poll.
    Status s = health_->Assign(who.first, bdf, who.second);
    if (!s.ok()) spdlog::warn("event=health_assign_failed bdf={} error=\"{}\"", bdf, s.ToString());
  }
  assigned_ = std::move(now);
  assigned_count_ = assigned_.size();
  // Every tenant the scheduler or the hint engine knows gets its GPU count.
  std::set<TenantId> tenants;
  for (const auto& [bdf, who] : assigned_) tenants.insert(who.first);
  for (const auto& [tenant, n] : gpus_) tenants.insert(tenant);
  for (const TenantId& t : tenants) {
    const uint32_t n = sched_->DevicesHeld(t, HZ_DEV_GPU);
    auto it = gpus_.find(t);
    if (it != gpus_.end() && it->second == n) continue;
    gpus_[t] = n;
    hints_->SetDevices(t, n);
  }
}

void Provider::OfferReplacementLocked(const sc::DeviceLoss& loss, uint64_t now) {
  if (loss.tenant.empty() || !loss.replaceable) return;
  uint64_t negotiation = 0;
  Status s =
      engine_->OfferReplacement(loss.tenant, ReplacementRequest(loss, now), now, &negotiation);
  if (!s.ok()) {
    spdlog::warn("event=replacement_offer_failed tenant={} error=\"{}\"", loss.tenant.name(),
                 s.ToString());
  }
}

void Provider::DecisionPoint() {
  neg::DecisionRound round;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!engine_) return;
    round = engine_->PrepareDecide(Now());
  }
  // The scan, unlocked: it reads only the round and the scheduler.
  engine_->PlanDecide(round);
  std::vector<std::pair<DecisionFn, neg::Decision>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t now = Now();
    for (neg::Decision& d : engine_->ApplyDecide(round, now)) {
      decisions_++;
      offers_made_ += d.offers.size();
      if (d.provider_initiated) continue;  // the engine published OFFER_MADE
      auto it = waiting_.find(d.result.negotiation_id);
      if (it == waiting_.end()) continue;  // the VM went away; the offers expire
      done.emplace_back(std::move(it->second), std::move(d));
      waiting_.erase(it);
    }
    waiting_count_ = waiting_.size();
    engine_->Tick(now);
    SyncLocked();
  }
  for (auto& [fn, d] : done) fn(d);
}

std::string Provider::BdfAssignedLocked(const TenantId& tenant, uint32_t index) const {
  for (const auto& [bdf, who] : assigned_) {
    if (who.first == tenant && who.second == index) return bdf;
  }
  return std::string();
}

void Provider::PollHealth() {
  std::vector<LostDevice> lost;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!health_) return;
    SyncLocked();
    health_polls_++;
    Status s = health_->Poll();
    if (!s.ok()) spdlog::debug("event=health_poll error=\"{}\"", s.ToString());
    lost.swap(lost_);
    if (lost.empty()) return;
  }
  // Each lost device leaves its VM without mu_: the guest may take its
  // time, and the other tenants' calls go on meanwhile. By its address, as
  // the first loss moves the tenant's indices.
  std::vector<sc::DeviceLoss> losses;
  for (const LostDevice& d : lost) {
    StatusOr<sc::DeviceLoss> loss =
        d.bdf.empty() ? sched_->DeviceLost(d.tenant, d.index) : sched_->DeviceLostAt(d.bdf);
    spdlog::warn("event=device_lost tenant={} index={} bdf={} result=\"{}\"", d.tenant.name(),
                 d.index, d.bdf, loss.status().ToString());
    if (loss.ok()) losses.push_back(*loss);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const sc::DeviceLoss& loss : losses) OfferReplacementLocked(loss, Now());
  SyncLocked();  // a lost device moved indices
}

Status Provider::Summary(const TenantId& tenant, std::vector<uint8_t>* bytes) {
  sc::TopologySummary s;
  Status st = sched_->Summary(tenant, &s);
  if (st.ok()) *bytes = std::move(s.bytes);
  return st;
}

Status Provider::Submit(const TenantId& tenant, uint32_t weight, uint8_t max_priority,
                        uint32_t max_open, const hz_neg_request& request, DecisionFn done) {
  std::lock_guard<std::mutex> lock(mu_);
  // The operator's tenant policy (hzctl tenant create --weight --priority
  // --max-open-negotiations).
  engine_->SetWeight(tenant, weight == 0 ? 1 : weight);
  engine_->SetMaxPriority(tenant, max_priority);
  engine_->SetMaxOpen(tenant, max_open);
  uint64_t id = 0;
  Status s = engine_->Submit(tenant, request, Now(), &id);
  if (s.ok()) waiting_[id] = std::move(done);
  waiting_count_ = waiting_.size();
  return s;
}

Status Provider::Counter(const TenantId& tenant, uint64_t negotiation_id,
                         const hz_neg_request& request, DecisionFn done) {
  std::lock_guard<std::mutex> lock(mu_);
  Status s = engine_->Counter(tenant, negotiation_id, request, Now());
  // A counter to a negotiation whose earlier request is still undecided:
  // both requests complete with the one decision of the new round.
  if (s.ok()) {
    auto it = waiting_.find(negotiation_id);
    if (it != waiting_.end()) {
      DecisionFn older = std::move(it->second);
      it->second = [older = std::move(older), done = std::move(done)](const neg::Decision& d) {
        older(d);
        done(d);
      };
    } else {
      waiting_[negotiation_id] = std::move(done);
    }
  }
  waiting_count_ = waiting_.size();
  return s;
}

Status Provider::Accept(const TenantId& tenant, uint64_t offer_id, uint64_t* reservation_id) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t now = Now();
  Status s = engine_->Accept(tenant, offer_id, now, reservation_id);
  // A reservation starting now starts at once instead of at the next tick.
  if (s.ok()) {
    engine_->Tick(now);
    SyncLocked();
  }
  return s;
}

Status Provider::Decline(const TenantId& tenant, uint64_t negotiation_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_->Decline(tenant, negotiation_id, Now());
}

Status Provider::Release(const TenantId& tenant, const hz_neg_release_args& args) {
  std::lock_guard<std::mutex> lock(mu_);
  Status s = engine_->Release(tenant, args, Now());
  if (s.ok()) SyncLocked();
  return s;
}

Status Provider::DeclareHint(const TenantId& tenant, const hz_hint_declare_args& args,
                             hz_hint_declare_result* result) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t n = sched_->DevicesHeld(tenant, HZ_DEV_GPU);
  gpus_[tenant] = n;
  hints_->SetDevices(tenant, n);  // no event: nothing declared yet, or no change
  return hints_->Declare(tenant, args, result);
}

std::vector<std::string> Provider::TenantHoldings(const TenantId& tenant) {
  auto counted = [](uint32_t n, const std::string& what) {
    return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
  };
  std::vector<std::string> held;
  if (uint32_t n = sched_->TenantAllocations(tenant); n > 0) {
    held.push_back(counted(n, "device allocation"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (uint32_t n = engine_->LiveReservations(tenant); n > 0) {
    held.push_back(counted(n, "reservation"));
  }
  return held;
}

Status Provider::ForgetTenant(const TenantId& tenant) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (uint64_t id : engine_->ForgetTenant(tenant, Now())) waiting_.erase(id);
    waiting_count_ = waiting_.size();
  }
  // Without mu_: the devices leave the tenant's VM first, its reservations'
  // (which the engine just ended) as well as the others.
  resources_->WaitForDetaches(tenant);
  Status s = sched_->ForgetTenant(tenant);
  std::lock_guard<std::mutex> lock(mu_);
  gpus_.erase(tenant);
  hints_->Forget(tenant);
  SyncLocked();
  return s;
}

json Provider::Counters() const {
  return {{"decisions", decisions_.load()},
          {"offers_made", offers_made_.load()},
          {"waiting_requests", waiting_count_.load()},
          {"health_polls", health_polls_.load()},
          {"devices_lost", devices_lost_.load()},
          {"assigned_devices", assigned_count_.load()}};
}

void Provider::CollectMetrics(prometheus::Registry* r) const {
  AddCounter(r, "hz_provider_decisions_total", "Negotiations the provider decided.",
             static_cast<double>(decisions_.load()));
  AddCounter(r, "hz_provider_offers_total", "Offers the provider made to tenants.",
             static_cast<double>(offers_made_.load()));
  AddCounter(r, "hz_provider_health_polls_total", "Health polls of the host's devices.",
             static_cast<double>(health_polls_.load()));
  AddCounter(r, "hz_provider_devices_lost_total", "Devices found lost by a health poll.",
             static_cast<double>(devices_lost_.load()));
  AddGauge(r, "hz_provider_waiting_requests", "Tenants' device requests waiting for a decision.",
           static_cast<double>(waiting_count_.load()));
  AddGauge(r, "hz_provider_assigned_devices", "Devices assigned to tenants' VMs.",
           static_cast<double>(assigned_count_.load()));
}

}  // namespace hz::service
