#include "hz/service/provider.h"

#include <ctime>
#include <set>

#include "spdlog/spdlog.h"

namespace hz::service {

using json = nlohmann::json;
namespace ev = hz::events;
namespace neg = hz::negotiation;
namespace sc = hz::scheduler;

namespace {

const char* ReservationStateName(neg::ReservationState s) {
  switch (s) {
    case neg::ReservationState::kAccepted:
      return "accepted";
    case neg::ReservationState::kActive:
      return "active";
    case neg::ReservationState::kEnded:
      return "ended";
    case neg::ReservationState::kReleased:
      return "released";
    case neg::ReservationState::kRevoked:
      return "revoked";
  }
  return "unknown";
}

// Operator input: unknown fields are errors, as everywhere in the control API.
Status OnlyFields(const json& req, std::initializer_list<const char*> allowed) {
  std::set<std::string> ok = {"cmd", "id"};
  for (const char* a : allowed) ok.insert(a);
  for (const auto& [k, v] : req.items()) {
    if (ok.count(k) == 0) return Status::InvalidArgument("unknown field \"" + k + "\"");
  }
  return Status::Ok();
}

Status GetString(const json& req, const char* key, std::string* out) {
  auto it = req.find(key);
  if (it == req.end() || !it->is_string()) {
    return Status::InvalidArgument(std::string("field \"") + key + "\" must be a string");
  }
  *out = it->get<std::string>();
  return Status::Ok();
}

Status GetUInt(const json& req, const char* key, uint64_t def, uint64_t max, uint64_t* out) {
  auto it = req.find(key);
  if (it == req.end()) {
    *out = def;
    return Status::Ok();
  }
  if (!it->is_number_unsigned() || it->get<uint64_t>() > max) {
    return Status::InvalidArgument(std::string("field \"") + key + "\" must be an integer in 0.." +
                                   std::to_string(max));
  }
  *out = it->get<uint64_t>();
  return Status::Ok();
}

}  // namespace

Provider::Provider(const ServiceConfig& config, boost::asio::io_context& io, ev::EventSink* sink)
    : config_(config), sink_(sink), decide_timer_(io), health_timer_(io) {}

Provider::~Provider() {
  Stop();
  // The engine refers to the scheduler through resources_.
  engine_.reset();
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
    Status s = sc::LibvirtAttacher::Open(c.libvirt_uri, &virt_);
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
  s = neg::NegotiationEngine::ValidateOptions(no);
  if (!s.ok()) return Status(s.code(), "negotiation: " + s.ToString());
  hints_ = std::make_unique<neg::HintEngine>(sink_);
  resources_ = std::make_unique<SchedulerResources>(sched_.get());
  engine_ = std::make_unique<neg::NegotiationEngine>(no, resources_.get(), sink_);
  // Hints follow every change of a tenant's GPU count the engine makes.
  neg::HintEngine* hints = hints_.get();
  engine_->SetAllocationListener([this, hints](const TenantId& tenant, uint32_t gpus) {
    gpus_[tenant] = gpus;  // the engine runs under mu_
    hints->SetDevices(tenant, gpus);
  });
  health_ = std::make_unique<ev::HealthMonitor>(c.sysfs_root, sink_);
  sc::Scheduler* sched = sched_.get();
  health_->SetFailureListener(
      [this, sched](const TenantId& tenant, uint32_t index, ev::FailureKind kind) {
        if (kind != ev::kFailureDeviceFailed) return;  // degraded devices stay attached
        devices_lost_++;
        StatusOr<sc::DeviceLoss> loss = sched->DeviceLost(tenant, index);
        spdlog::warn("event=device_lost tenant={} index={} result=\"{}\"", tenant.name(), index,
                     loss.status().ToString());
        if (loss.ok()) OfferReplacementLocked(*loss, Now());  // the monitor polls under mu_
      });
  {
    std::lock_guard<std::mutex> lock(mu_);
    SyncLocked();
  }
  spdlog::info("event=scheduler_started sysfs_root={} devices={} libvirt={} state={}", c.sysfs_root,
               sched_->Inventory().size(), c.libvirt_uri.empty() ? "none" : c.libvirt_uri,
               o.state_path);
  ArmEvery(decide_timer_, config_.negotiation.decide_interval_ms, &Provider::DecisionPoint);
  ArmEvery(health_timer_, config_.scheduler.health_poll_ms, &Provider::PollHealth);
  return Status::Ok();
}

void Provider::Stop() {
  alive_->store(false);
  decide_timer_.cancel();
  health_timer_.cancel();
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.clear();
}

uint64_t Provider::Features() const {
  return (1ull << HZ_F_TOPOLOGY) | (1ull << HZ_F_NEGOTIATION) | (1ull << HZ_F_HINTS);
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
  std::vector<std::pair<DecisionFn, neg::Decision>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!engine_) return;
    const uint64_t now = Now();
    for (neg::Decision& d : engine_->Decide(now)) {
      decisions_++;
      offers_made_ += d.offers.size();
      if (d.provider_initiated) continue;  // the engine published OFFER_MADE
      auto it = waiting_.find(d.result.negotiation_id);
      if (it == waiting_.end()) continue;  // the VM went away; the offers expire
      done.emplace_back(std::move(it->second), std::move(d));
      waiting_.erase(it);
    }
    engine_->Tick(now);
    SyncLocked();
  }
  for (auto& [fn, d] : done) fn(d);
}

void Provider::PollHealth() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!health_) return;
  SyncLocked();
  health_polls_++;
  Status s = health_->Poll();
  if (!s.ok()) spdlog::debug("event=health_poll error=\"{}\"", s.ToString());
  SyncLocked();  // a lost device moved indices
}

Status Provider::Summary(const TenantId& tenant, std::vector<uint8_t>* bytes) {
  sc::TopologySummary s;
  Status st = sched_->Summary(tenant, &s);
  if (st.ok()) *bytes = std::move(s.bytes);
  return st;
}

Status Provider::Submit(const TenantId& tenant, uint32_t weight, uint8_t max_priority,
                        const hz_neg_request& request, DecisionFn done) {
  std::lock_guard<std::mutex> lock(mu_);
  // The operator's tenant policy (hzctl tenant create --weight --priority).
  engine_->SetWeight(tenant, weight == 0 ? 1 : weight);
  engine_->SetMaxPriority(tenant, max_priority);
  uint64_t id = 0;
  Status s = engine_->Submit(tenant, request, Now(), &id);
  if (s.ok()) waiting_[id] = std::move(done);
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

bool Provider::Handles(const std::string& cmd) {
  static const std::set<std::string> kCommands = {
      "inventory",      "allocation.list", "alloc",         "release",         "device.fail",
      "device.degrade", "device.repair",   "tenant.domain", "negotiation.list"};
  return kCommands.count(cmd) != 0;
}

StatusOr<json> Provider::Command(const std::string& cmd, const json& req) {
  if (!Handles(cmd)) return Status::NotSupported("unknown command \"" + cmd + "\"");
  return Run(cmd, req);
}

StatusOr<json> Provider::Run(const std::string& cmd, const json& req) {
  Status err;
  if (cmd == "inventory") {
    if (!(err = OnlyFields(req, {})).ok()) return err;
    return sched_->Inventory();
  }
  if (cmd == "allocation.list") {
    if (!(err = OnlyFields(req, {})).ok()) return err;
    return sched_->Allocations();
  }
  if (cmd == "negotiation.list") {
    if (!(err = OnlyFields(req, {})).ok()) return err;
    return NegotiationJson();
  }
  if (cmd == "tenant.domain") {
    if (!(err = OnlyFields(req, {"tenant", "domain"})).ok()) return err;
    std::string tenant, domain;
    if (!(err = GetString(req, "tenant", &tenant)).ok()) return err;
    if (!(err = GetString(req, "domain", &domain)).ok()) return err;
    Status s = sched_->BindTenant(TenantId(tenant), domain);
    if (!s.ok()) return s;
    spdlog::info("event=tenant_domain tenant={} domain={}", tenant, domain);
    return json{{"tenant", tenant}, {"domain", domain}};
  }
  if (cmd == "alloc") {
    if (!(err = OnlyFields(req, {"tenant", "gpus", "nics", "locality"})).ok()) return err;
    std::string tenant, locality = "any";
    uint64_t gpus = 0, nics = 0;
    if (!(err = GetString(req, "tenant", &tenant)).ok()) return err;
    if (!(err = GetUInt(req, "gpus", 0, 65535, &gpus)).ok()) return err;
    if (!(err = GetUInt(req, "nics", 0, 65535, &nics)).ok()) return err;
    if (req.contains("locality") && !(err = GetString(req, "locality", &locality)).ok()) {
      return err;
    }
    sc::Request r;
    r.gpus = static_cast<uint32_t>(gpus);
    r.nics = static_cast<uint32_t>(nics);
    if (locality == "any") {
      r.locality = HZ_LOC_ANY;
    } else if (locality == "host" || locality == "same_host") {
      r.locality = HZ_LOC_SAME_HOST;
    } else if (locality == "group" || locality == "same_group") {
      r.locality = HZ_LOC_SAME_GROUP;
    } else {
      return Status::InvalidArgument("field \"locality\" must be any, host or group");
    }
    if (r.gpus + r.nics == 0) {
      return Status::InvalidArgument("ask for at least one device (gpus or nics)");
    }
    uint64_t id = 0;
    std::lock_guard<std::mutex> lock(mu_);
    Status s = sched_->Allocate(TenantId(tenant), r, &id);
    if (!s.ok()) return s;
    SyncLocked();
    spdlog::info("event=allocated tenant={} id={} gpus={} nics={} locality={}", tenant, id, gpus,
                 nics, locality);
    json out = {{"id", id}, {"tenant", tenant}};
    for (const json& a : sched_->Allocations()) {
      if (a.value("id", uint64_t{0}) == id) out["devices"] = a["devices"];
    }
    return out;
  }
  if (cmd == "release") {
    if (!(err = OnlyFields(req, {"allocation"})).ok()) return err;
    uint64_t id = 0;
    if (!req.contains("allocation")) {
      return Status::InvalidArgument("missing field \"allocation\"");
    }
    if (!(err = GetUInt(req, "allocation", 0, UINT64_MAX, &id)).ok()) return err;
    std::lock_guard<std::mutex> lock(mu_);
    Status s = sched_->Release(id);
    if (!s.ok()) return s;
    SyncLocked();
    spdlog::info("event=released id={}", id);
    return json::object();
  }
  // device.fail / device.degrade / device.repair {"bdf": ..., "errors": N}
  if (!(err = OnlyFields(req, {"bdf", "errors"})).ok()) return err;
  std::string bdf;
  uint64_t errors = 0;
  if (!(err = GetString(req, "bdf", &bdf)).ok()) return err;
  if (!(err = GetUInt(req, "errors", 1, UINT32_MAX, &errors)).ok()) return err;
  std::lock_guard<std::mutex> lock(mu_);
  Status s;
  if (cmd == "device.fail") {
    StatusOr<sc::DeviceLoss> loss = sched_->MarkFailed(bdf, errors);
    s = loss.status();
    if (loss.ok()) OfferReplacementLocked(*loss, Now());
  } else if (cmd == "device.degrade") {
    s = sched_->MarkDegraded(bdf, errors);
  } else {
    if (req.contains("errors")) return Status::InvalidArgument("unknown field \"errors\"");
    s = sched_->Repair(bdf);
  }
  if (!s.ok()) return s;
  SyncLocked();
  spdlog::info("event={} bdf={}", cmd == "device.fail" ? "device_failed" : cmd, bdf);
  return json{{"bdf", bdf}};
}

json Provider::NegotiationJson() {
  std::lock_guard<std::mutex> lock(mu_);
  json reservations = json::array();
  for (const neg::ReservationInfo& r : engine_->Reservations()) {
    reservations.push_back({{"id", r.id},
                            {"tenant", r.tenant.name()},
                            {"negotiation", r.negotiation_id},
                            {"kind", r.kind == HZ_DEV_GPU ? "gpu" : "nic"},
                            {"count", r.count},
                            {"start_s", r.start_s},
                            {"duration_s", r.duration_s},
                            {"state", ReservationStateName(r.state)}});
  }
  json offers = json::array();
  for (const neg::OfferInfo& o : engine_->Offers()) {
    offers.push_back({{"id", o.offer.offer_id},
                      {"tenant", o.tenant.name()},
                      {"negotiation", o.negotiation_id},
                      {"count", o.offer.count},
                      {"start_s", o.offer.start_s},
                      {"duration_s", o.offer.duration_s},
                      {"expires_s", o.offer.expires_s}});
  }
  return {{"reservations", reservations}, {"offers", offers}};
}

json Provider::Counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {{"decisions", decisions_},
          {"offers_made", offers_made_},
          {"waiting_requests", waiting_.size()},
          {"health_polls", health_polls_},
          {"devices_lost", devices_lost_},
          {"assigned_devices", assigned_.size()}};
}

}  // namespace hz::service
