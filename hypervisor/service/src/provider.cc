#include "hz/service/provider.h"

#include <ctime>
#include <set>

#include "spdlog/spdlog.h"

namespace hz::service {

using json = nlohmann::json;
namespace ev = hz::events;
namespace sc = hz::scheduler;

namespace {

const char* ReservationStateName(ev::ReservationState s) {
  switch (s) {
    case ev::ReservationState::kAccepted:
      return "accepted";
    case ev::ReservationState::kActive:
      return "active";
    case ev::ReservationState::kEnded:
      return "ended";
    case ev::ReservationState::kReleased:
      return "released";
    case ev::ReservationState::kRevoked:
      return "revoked";
  }
  return "unknown";
}

// Operator input: unknown fields are errors, as everywhere in the control API.
std::string OnlyFields(const json& req, std::initializer_list<const char*> allowed) {
  std::set<std::string> ok = {"cmd", "id"};
  for (const char* a : allowed) ok.insert(a);
  for (const auto& [k, v] : req.items()) {
    if (ok.count(k) == 0) return "unknown field \"" + k + "\"";
  }
  return {};
}

std::string GetString(const json& req, const char* key, std::string* out) {
  auto it = req.find(key);
  if (it == req.end() || !it->is_string())
    return std::string("field \"") + key + "\" must be a string";
  *out = it->get<std::string>();
  return {};
}

std::string GetUInt(const json& req, const char* key, uint64_t def, uint64_t max, uint64_t* out) {
  auto it = req.find(key);
  if (it == req.end()) {
    *out = def;
    return {};
  }
  if (!it->is_number_unsigned() || it->get<uint64_t>() > max) {
    return std::string("field \"") + key + "\" must be an integer in 0.." + std::to_string(max);
  }
  *out = it->get<uint64_t>();
  return {};
}

std::string Why(const ev::Status& s) {
  return s.message().empty() ? s.ToString() : s.message();
}

}  // namespace

Provider::Provider(const ServiceConfig& config, boost::asio::io_context& io, ev::EventSink* sink)
    : config_(config), sink_(sink), decide_timer_(io), health_timer_(io) {}

Provider::~Provider() {
  Stop();
  // The engine refers to the scheduler and the scheduler to the engine.
  if (sched_) sched_->SetNegotiationEngine(nullptr);
  engine_.reset();
  health_.reset();
  sched_.reset();
  virt_.reset();
}

uint64_t Provider::Now() {
  return static_cast<uint64_t>(std::time(nullptr));
}

bool Provider::Start(std::string* error) {
  const SchedulerConfig& c = config_.scheduler;
  if (!c.libvirt_uri.empty()) {
    ev::Status s = sc::LibvirtAttacher::Open(c.libvirt_uri, &virt_);
    if (!s.ok()) {
      *error = "libvirt " + c.libvirt_uri + ": " + s.ToString();
      return false;
    }
  }
  sc::SchedulerOptions o;
  o.sysfs_root = c.sysfs_root;
  o.provider_file = c.provider_file;
  o.state_path = config_.SchedulerStatePath();
  o.bind_vfio = c.bind_vfio;
  o.sync = c.sync;
  ev::Status s = sc::Scheduler::Open(o, virt_.get(), sink_, &sched_);
  if (!s.ok()) {
    *error = "scheduler (sysfs " + c.sysfs_root + "): " + s.ToString();
    return false;
  }
  ev::NegotiationOptions no;
  no.window_s = config_.negotiation.window_s;
  no.offer_ttl_s = config_.negotiation.offer_ttl_s;
  no.max_lookahead_s = config_.negotiation.max_lookahead_s;
  no.max_duration_s = config_.negotiation.max_duration_s;
  no.max_open_per_tenant = config_.negotiation.max_open_per_tenant;
  s = ev::NegotiationEngine::ValidateOptions(no);
  if (!s.ok()) {
    *error = "negotiation: " + s.ToString();
    return false;
  }
  hints_ = std::make_unique<ev::HintEngine>(sink_);
  engine_ = std::make_unique<ev::NegotiationEngine>(no, sched_.get(), sink_);
  // Hints follow every change of a tenant's GPU count the engine makes.
  ev::HintEngine* hints = hints_.get();
  engine_->SetAllocationListener([this, hints](const std::string& tenant, uint32_t gpus) {
    gpus_[tenant] = gpus;  // the engine runs under mu_
    hints->SetDevices(tenant, gpus);
  });
  sched_->SetNegotiationEngine(engine_.get());
  health_ = std::make_unique<ev::HealthMonitor>(c.sysfs_root, sink_);
  sc::Scheduler* sched = sched_.get();
  health_->SetFailureListener(
      [this, sched](const std::string& tenant, uint32_t index, ev::FailureKind kind) {
        if (kind != ev::kFailureDeviceFailed) return;  // degraded devices stay attached
        devices_lost_++;
        ev::Status st = sched->DeviceLost(tenant, index, Now());
        spdlog::warn("event=device_lost tenant={} index={} result=\"{}\"", tenant, index,
                     st.ToString());
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
  return true;
}

void Provider::Stop() {
  alive_->store(false);
  decide_timer_.cancel();
  health_timer_.cancel();
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.clear();
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
  std::map<std::string, std::pair<std::string, uint32_t>> now;
  std::map<std::string, uint32_t> gpus;
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
    ev::Status s = health_->Assign(who.first, bdf, who.second);
    if (!s.ok()) spdlog::warn("event=health_assign_failed bdf={} error=\"{}\"", bdf, s.ToString());
  }
  assigned_ = std::move(now);
  // Every tenant the scheduler or the hint engine knows gets its GPU count.
  std::set<std::string> tenants;
  for (const auto& [bdf, who] : assigned_) tenants.insert(who.first);
  for (const auto& [tenant, n] : gpus_) tenants.insert(tenant);
  for (const std::string& t : tenants) {
    const uint32_t n = sched_->DevicesHeld(t, HZ_DEV_GPU);
    auto it = gpus_.find(t);
    if (it != gpus_.end() && it->second == n) continue;
    gpus_[t] = n;
    hints_->SetDevices(t, n);
  }
}

void Provider::DecisionPoint() {
  std::vector<std::pair<DecisionFn, ev::Decision>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!engine_) return;
    const uint64_t now = Now();
    for (ev::Decision& d : engine_->Decide(now)) {
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
  ev::Status s = health_->Poll();
  if (!s.ok()) spdlog::debug("event=health_poll error=\"{}\"", s.ToString());
  SyncLocked();  // a lost device moved indices
}

ev::Status Provider::Summary(const std::string& tenant, std::vector<uint8_t>* bytes) {
  sc::TopologySummary s;
  ev::Status st = sched_->Summary(tenant, &s);
  if (st.ok()) *bytes = std::move(s.bytes);
  return st;
}

ev::Status Provider::Submit(const std::string& tenant, uint32_t weight, uint8_t max_priority,
                            const hz_neg_request& request, DecisionFn done) {
  std::lock_guard<std::mutex> lock(mu_);
  // The operator's tenant policy (hzctl tenant create --weight --priority).
  engine_->SetWeight(tenant, weight == 0 ? 1 : weight);
  engine_->SetMaxPriority(tenant, max_priority);
  uint64_t id = 0;
  ev::Status s = engine_->Submit(tenant, request, Now(), &id);
  if (s.ok()) waiting_[id] = std::move(done);
  return s;
}

ev::Status Provider::Counter(const std::string& tenant, uint64_t negotiation_id,
                             const hz_neg_request& request, DecisionFn done) {
  std::lock_guard<std::mutex> lock(mu_);
  ev::Status s = engine_->Counter(tenant, negotiation_id, request, Now());
  // A counter to a negotiation whose earlier request is still undecided:
  // both requests complete with the one decision of the new round.
  if (s.ok()) {
    auto it = waiting_.find(negotiation_id);
    if (it != waiting_.end()) {
      DecisionFn older = std::move(it->second);
      it->second = [older = std::move(older), done = std::move(done)](const ev::Decision& d) {
        older(d);
        done(d);
      };
    } else {
      waiting_[negotiation_id] = std::move(done);
    }
  }
  return s;
}

ev::Status Provider::Accept(const std::string& tenant, uint64_t offer_id,
                            uint64_t* reservation_id) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t now = Now();
  ev::Status s = engine_->Accept(tenant, offer_id, now, reservation_id);
  // A reservation starting now starts at once instead of at the next tick.
  if (s.ok()) {
    engine_->Tick(now);
    SyncLocked();
  }
  return s;
}

ev::Status Provider::Decline(const std::string& tenant, uint64_t negotiation_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_->Decline(tenant, negotiation_id, Now());
}

ev::Status Provider::Release(const std::string& tenant, const hz_neg_release_args& args) {
  std::lock_guard<std::mutex> lock(mu_);
  ev::Status s = engine_->Release(tenant, args, Now());
  if (s.ok()) SyncLocked();
  return s;
}

ev::Status Provider::DeclareHint(const std::string& tenant, const hz_hint_declare_args& args,
                                 hz_hint_declare_result* result) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t n = sched_->DevicesHeld(tenant, HZ_DEV_GPU);
  gpus_[tenant] = n;
  hints_->SetDevices(tenant, n);  // no event: nothing declared yet, or no change
  return hints_->Declare(tenant, args, result);
}

bool Provider::Command(const std::string& cmd, const json& req, json* out, std::string* error) {
  static const std::set<std::string> kCommands = {
      "inventory",      "allocation.list", "alloc",         "release",         "device.fail",
      "device.degrade", "device.repair",   "tenant.domain", "negotiation.list"};
  if (kCommands.count(cmd) == 0) return false;
  *error = Run(cmd, req, out);
  return true;
}

std::string Provider::Run(const std::string& cmd, const json& req, json* out) {
  std::string err;
  if (cmd == "inventory") {
    if (!(err = OnlyFields(req, {})).empty()) return err;
    *out = sched_->Inventory();
    return {};
  }
  if (cmd == "allocation.list") {
    if (!(err = OnlyFields(req, {})).empty()) return err;
    *out = sched_->Allocations();
    return {};
  }
  if (cmd == "negotiation.list") {
    if (!(err = OnlyFields(req, {})).empty()) return err;
    *out = NegotiationJson();
    return {};
  }
  if (cmd == "tenant.domain") {
    if (!(err = OnlyFields(req, {"tenant", "domain"})).empty()) return err;
    std::string tenant, domain;
    if (!(err = GetString(req, "tenant", &tenant)).empty()) return err;
    if (!(err = GetString(req, "domain", &domain)).empty()) return err;
    ev::Status s = sched_->BindTenant(tenant, domain);
    if (!s.ok()) return Why(s);
    spdlog::info("event=tenant_domain tenant={} domain={}", tenant, domain);
    *out = {{"tenant", tenant}, {"domain", domain}};
    return {};
  }
  if (cmd == "alloc") {
    if (!(err = OnlyFields(req, {"tenant", "gpus", "nics", "locality"})).empty()) return err;
    std::string tenant, locality = "any";
    uint64_t gpus = 0, nics = 0;
    if (!(err = GetString(req, "tenant", &tenant)).empty()) return err;
    if (!(err = GetUInt(req, "gpus", 0, 65535, &gpus)).empty()) return err;
    if (!(err = GetUInt(req, "nics", 0, 65535, &nics)).empty()) return err;
    if (req.contains("locality") && !(err = GetString(req, "locality", &locality)).empty()) {
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
      return "field \"locality\" must be any, host or group";
    }
    if (r.gpus + r.nics == 0) return "ask for at least one device (gpus or nics)";
    uint64_t id = 0;
    std::lock_guard<std::mutex> lock(mu_);
    ev::Status s = sched_->Allocate(tenant, r, &id);
    if (!s.ok()) return Why(s);
    SyncLocked();
    spdlog::info("event=allocated tenant={} id={} gpus={} nics={} locality={}", tenant, id, gpus,
                 nics, locality);
    *out = {{"id", id}, {"tenant", tenant}};
    for (const json& a : sched_->Allocations()) {
      if (a.value("id", uint64_t{0}) == id) (*out)["devices"] = a["devices"];
    }
    return {};
  }
  if (cmd == "release") {
    if (!(err = OnlyFields(req, {"allocation"})).empty()) return err;
    uint64_t id = 0;
    if (!req.contains("allocation")) return "missing field \"allocation\"";
    if (!(err = GetUInt(req, "allocation", 0, UINT64_MAX, &id)).empty()) return err;
    std::lock_guard<std::mutex> lock(mu_);
    ev::Status s = sched_->Release(id);
    if (!s.ok()) return Why(s);
    SyncLocked();
    spdlog::info("event=released id={}", id);
    *out = json::object();
    return {};
  }
  // device.fail / device.degrade / device.repair {"bdf": ..., "errors": N}
  if (!(err = OnlyFields(req, {"bdf", "errors"})).empty()) return err;
  std::string bdf;
  uint64_t errors = 0;
  if (!(err = GetString(req, "bdf", &bdf)).empty()) return err;
  if (!(err = GetUInt(req, "errors", 1, UINT32_MAX, &errors)).empty()) return err;
  std::lock_guard<std::mutex> lock(mu_);
  ev::Status s;
  if (cmd == "device.fail") {
    s = sched_->MarkFailed(bdf, errors, Now());
  } else if (cmd == "device.degrade") {
    s = sched_->MarkDegraded(bdf, errors);
  } else {
    if (req.contains("errors")) return "unknown field \"errors\"";
    s = sched_->Repair(bdf);
  }
  if (!s.ok()) return Why(s);
  SyncLocked();
  spdlog::info("event={} bdf={}", cmd == "device.fail" ? "device_failed" : cmd, bdf);
  *out = {{"bdf", bdf}};
  return {};
}

json Provider::NegotiationJson() {
  std::lock_guard<std::mutex> lock(mu_);
  json reservations = json::array();
  for (const ev::ReservationInfo& r : engine_->Reservations()) {
    reservations.push_back({{"id", r.id},
                            {"tenant", r.tenant},
                            {"negotiation", r.negotiation_id},
                            {"kind", r.kind == HZ_DEV_GPU ? "gpu" : "nic"},
                            {"count", r.count},
                            {"start_s", r.start_s},
                            {"duration_s", r.duration_s},
                            {"state", ReservationStateName(r.state)}});
  }
  json offers = json::array();
  for (const ev::OfferInfo& o : engine_->Offers()) {
    offers.push_back({{"id", o.offer.offer_id},
                      {"tenant", o.tenant},
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
