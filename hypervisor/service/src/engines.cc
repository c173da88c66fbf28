#include "hz/service/engines.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <optional>
#include <set>
#include <string>

#include "ckpt_replica.h"
#include "command_args.h"
#include "engine_adapters.h"
#include "hz/common/thread_priority.h"
#include "hz/events/injection.h"
#include "hz/service/wire_status.h"
#include "metrics_families.h"
#include "protocol/harmonaize.h"
#include "spdlog/spdlog.h"

namespace hz::service {

using json = nlohmann::json;

// The checkpoint engine's events, onto the tenant's log.
class Engines::CkptSink : public checkpoint::EventSink {
 public:
  explicit CkptSink(Engines* e) : e_(e) {}
  void Publish(const TenantId& tenant, checkpoint::EventKind kind, checkpoint::StreamId stream,
               uint64_t step) override {
    checkpoint::CheckpointEvent ev;
    ev.tenant = tenant;
    ev.kind = kind;
    ev.stream = stream;
    ev.step = step;
    PublishEvent(ev);
  }
  void PublishEvent(const checkpoint::CheckpointEvent& ev) override { e_->PublishCheckpoint(ev); }

 private:
  Engines* e_;
};

// The provider's engines publish through the service, so that their notices
// start just-in-time saves like the operator's.
class Engines::NoticeSink : public events::EventSink {
 public:
  explicit NoticeSink(Engines* e) : e_(e) {}
  Status Publish(const TenantId& tenant, const events::EventSpec& spec, uint64_t* seq) override {
    return e_->Publish(tenant, spec, seq);
  }

 private:
  Engines* e_;
};

namespace {

// SPEC §8.3.3: a SCHEDULED notice, or a STARTED one (that may come without
// it), of maintenance or preemption starts the just-in-time saves.
bool IsNotice(const hz_event& ev) {
  if (ev.topic == HZ_TOPIC_MAINTENANCE) {
    return ev.kind == events::kMaintenanceScheduled || ev.kind == events::kMaintenanceStarted;
  }
  if (ev.topic == HZ_TOPIC_PREEMPTION) {
    return ev.kind == events::kPreemptionScheduled || ev.kind == events::kPreemptionStarted;
  }
  return false;
}

// The operator's cap on all checkpoints, or half the file system holding the
// state directory: its event logs and state files need room too.
uint64_t CheckpointDiskCap(const ServiceConfig& c) {
  if (c.ckpt_disk_bytes != 0) return c.ckpt_disk_bytes;
  struct statvfs fs {};
  if (statvfs(c.state_dir.c_str(), &fs) != 0) return 0;
  return static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize / 2;
}

}  // namespace

Engines::Engines(const ServiceConfig& config, std::shared_ptr<IdleClassGuard> idle_guard)
    : config_(config), idle_guard_(std::move(idle_guard)) {}

Engines::~Engines() {
  std::list<std::thread> notices;
  {
    std::lock_guard<std::mutex> lock(mu_);
    notices.swap(notices_);
  }
  for (auto& t : notices) t.join();
  if (peer_) peer_->Stop();  // its copies end (FAILED) while the engine is there
  ckpt_.reset();             // before the sink and the bus it publishes to
  sink_.reset();
}

namespace {

// The part of the checkpoint engine's configuration that sizes its staging
// memory: Start and ReserveStaging must agree on it.
checkpoint::EngineConfig StagingConfigOf(const ServiceConfig& config) {
  checkpoint::EngineConfig cc;
  cc.staging_bytes = config.ckpt_staging_bytes;
  return cc;
}

}  // namespace

void Engines::PrepareStaging() {
  if (ckpt_ != nullptr) ckpt_->PrepareStaging();
}

void Engines::ReserveStaging(const ServiceConfig& config) {
  checkpoint::Engine::ReserveStaging(StagingConfigOf(config));
}

Status Engines::FlushCheckpoints(std::chrono::milliseconds timeout) {
  return ckpt_ != nullptr ? ckpt_->Flush(timeout) : Status::Ok();
}

Status Engines::Start(bool after_crash) {
  events::BusOptions bo;
  bo.dir = config_.state_dir + "/events";
  // Infrastructure events are rare; losing one to a power cut would lose a
  // maintenance notice, so every append is flushed.
  bo.fsync = events::FsyncPolicy::kAlways;
  Status st = events::EventBus::Open(bo, &bus_);
  if (!st.ok()) return Status(st.code(), bo.dir + ": " + st.ToString());
  bus_adapter_ = std::make_unique<BusAdapter>(*bus_);
  notice_sink_ = std::make_unique<NoticeSink>(this);

  const std::string root = config_.state_dir + "/checkpoints";
  sink_ = std::make_unique<CkptSink>(this);
  checkpoint::EngineConfig cc = StagingConfigOf(config_);
  cc.root = root;
  cc.memory_tier_bytes = std::min<size_t>(cc.memory_tier_bytes, cc.staging_bytes / 2);
  cc.disk_bandwidth_bytes_per_s = config_.ckpt_disk_bandwidth_bytes_per_s;
  cc.max_stall_budget_ms = config_.ckpt_max_stall_budget_ms;
  cc.jit_max_attempts = config_.ckpt_jit_max_attempts;
  cc.waiting_window_ms = config_.conditions.congestion_window_s * 1000;
  cc.request_threads = config_.ckpt_request_threads;
  cc.tenant_request_threads = config_.ckpt_tenant_request_threads;
  cc.thread_nice = static_cast<int>(config_.ckpt_thread_nice);
  cc.idle_guard = idle_guard_;
  cc.quiesce_bytes = config_.ckpt_quiesce_bytes;
  cc.disk_bytes = disk_cap_ = CheckpointDiskCap(config_);
  cc.default_limits.staging_bytes = config_.ckpt_tenant_staging_bytes;
  cc.default_limits.disk_bytes = config_.ckpt_tenant_disk_bytes;
  cc.sink = sink_.get();
  cc.populate_staging_later = after_crash;
  if (config_.cluster.enabled) {
    peer_ = std::make_unique<PeerReplicas>(PeerReplicaOptionsOf(config_));
    cc.peer = peer_.get();
  }
  st = checkpoint::Engine::Open(cc, &ckpt_);
  if (!st.ok()) return Status(st.code(), root + ": " + st.message());
  if (peer_) peer_->Start(ckpt_.get());
  ckpt_adapter_ = std::make_unique<CkptAdapter>(*ckpt_);
  return Status::Ok();
}

WaitingTime Engines::StorageWaiting() const {
  return ckpt_ ? ckpt_->StorageWaiting() : WaitingTime{};
}

bool Engines::PersistsCheckpoints(const TenantId& tenant) const {
  return ckpt_ && ckpt_->HasTenant(tenant);
}

void Engines::ClusterHosts(std::vector<cluster::HostInfo> hosts) {
  if (!peer_) return;
  const bool reachable =
      std::any_of(hosts.begin(), hosts.end(), [](const cluster::HostInfo& h) { return !h.self; });
  peer_->SetHosts(std::move(hosts));
  // The copies a restart interrupted, once another host can take them.
  if (reachable && !replicas_resumed_.exchange(true)) ckpt_->ResumeReplicas();
}

CkptBackend* Engines::checkpoints() const {
  return ckpt_adapter_.get();
}

EventBackend* Engines::events() const {
  return bus_adapter_.get();
}

uint64_t Engines::Delivered() const {
  return bus_adapter_ ? bus_adapter_->delivered() : 0;
}

void Engines::PublishCheckpoint(const checkpoint::CheckpointEvent& e) {
  if (e.tenant.empty()) return;  // a directory no tenant owns
  events::EventSpec spec = events::MakeCheckpoint(static_cast<events::CheckpointKind>(e.kind),
                                                  e.stream, static_cast<hz_ckpt_tier>(e.tier),
                                                  e.step, ToWireStatus(e.status), e.flags);
  uint64_t seq = 0;
  Status st = Publish(e.tenant, spec, &seq);
  if (!st.ok()) {
    spdlog::warn("event=ckpt_event_lost tenant={} stream={} step={} error=\"{}\"", e.tenant.name(),
                 e.stream, e.step, st.ToString());
    return;
  }
  ckpt_events_.fetch_add(1, std::memory_order_relaxed);
}

events::EventSink* Engines::sink() const {
  return notice_sink_.get();
}

Status Engines::Publish(const TenantId& tenant, const events::EventSpec& spec, uint64_t* seq,
                        const std::set<std::string>& vms) {
  if (!bus_) return Status::State("the event bus is not running");
  uint64_t n = 0;
  Status st = bus_->Publish(tenant, spec, &n);
  if (!st.ok()) return st;
  published_.fetch_add(1, std::memory_order_relaxed);
  if (seq != nullptr) *seq = n;
  hz_event ev{};
  if (!bus_->Get(tenant, n, &ev).ok()) return Status::Ok();  // already compacted away
  if (IsNotice(ev)) Notice(tenant, ev, vms);
  PublishedFn observer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    observer = observer_;
  }
  if (observer) observer(tenant, ev);
  return Status::Ok();
}

void Engines::SetPublishedObserver(PublishedFn fn) {
  std::lock_guard<std::mutex> lock(mu_);
  observer_ = std::move(fn);
}

void Engines::SetNoticeScope(NoticeScopeFn fn) {
  std::lock_guard<std::mutex> lock(scope_mu_);
  scope_ = std::move(fn);
}

std::optional<std::set<std::string>> Engines::ScopeOf(const TenantId& tenant, const hz_event& ev) {
  std::lock_guard<std::mutex> lock(scope_mu_);
  if (!scope_) return std::nullopt;
  return scope_(tenant, ev);
}

// SPEC §7.5.7: a SCHEDULED notice (or STARTED) lets the provider copy every
// registered stream of the VMs it concerns before the deadline. OnNotice
// waits for the copies, so it runs on a thread of its own, never on the
// operator's or a VM's; which VMs it concerns is worked out there too (the
// scope reaches the scheduler, whose lock a publisher may hold).
void Engines::Notice(const TenantId& tenant, const hz_event& ev, const std::set<std::string>& vms) {
  if (!ckpt_) return;
  if (!ckpt_->HasTenant(tenant)) return;  // never used checkpoints
  const uint64_t now = static_cast<uint64_t>(std::time(nullptr));
  // Without a deadline (STARTED) the copy still gets a bounded window.
  uint64_t left_s = ev.deadline_s > now ? ev.deadline_s - now : 10;
  left_s = std::min<uint64_t>(left_s, 3600);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(left_s);
  jit_notices_.fetch_add(1, std::memory_order_relaxed);
  checkpoint::Engine* engine = ckpt_.get();
  std::lock_guard<std::mutex> lock(mu_);
  ReapNoticesLocked();
  notices_.push_back(
      NamedThread("hz-notice-save", [this, engine, deadline, tenant, ev, named = vms] {
        std::optional<std::set<std::string>> concerned = named;
        if (named.empty()) concerned = ScopeOf(tenant, ev);
        SaveJustInTime(engine, tenant, deadline, concerned);
        jit_notices_done_.fetch_add(1, std::memory_order_relaxed);
        std::lock_guard<std::mutex> l(mu_);
        finished_.push_back(std::this_thread::get_id());
      }));
}

void Engines::SaveJustInTime(checkpoint::Engine* engine, const TenantId& tenant,
                             std::chrono::steady_clock::time_point deadline,
                             const std::optional<std::set<std::string>>& vms) {
  // Only the streams the VMs concerned registered; none of theirs: no save.
  std::optional<std::set<checkpoint::StreamId>> only;
  if (vms) {
    only = ckpt_adapter_->StreamsOf(tenant, *vms);
    if (only->empty()) {
      spdlog::info("event=ckpt_jit_none tenant={} vms={} reason=\"no stream of the VMs concerned\"",
                   tenant.name(), vms->size());
      return;
    }
  }
  for (const checkpoint::NoticeOutcome& o :
       engine->OnNotice(tenant, deadline, only ? &*only : nullptr)) {
    spdlog::info("event=ckpt_jit tenant={} stream={} step={} status=\"{}\" attempts={}",
                 tenant.name(), o.stream, o.step, o.status.ToString(), o.attempts);
  }
}

void Engines::ReapNoticesLocked() {
  for (std::thread::id id : finished_) {
    auto it = std::find_if(notices_.begin(), notices_.end(),
                           [id](const std::thread& t) { return t.get_id() == id; });
    if (it == notices_.end()) continue;
    it->join();  // it has left mu_ and is returning
    notices_.erase(it);
  }
  finished_.clear();
}

std::span<const CommandSpec<Engines>> Engines::Commands() {
  // Each names a tenant.
  static const CommandSpec<Engines> kCommands[] = {
      {"event.inject", true, &Engines::InjectEvent},
      {"event.status", true, &Engines::EventStatus},
      {"checkpoint.list", true, &Engines::ListCheckpoints},
  };
  return kCommands;
}

// {"cmd": "event.status", "tenant": "t1"}: the tenant's log, each binding's
// cursor and the events it approved early (what the tenant acknowledged).
CommandResult Engines::EventStatus(const json& req) {
  std::string tenant;
  if (Status s = OnlyFields(req, {"tenant"}); !s.ok()) return s;
  if (Status s = GetString(req, "tenant", &tenant); !s.ok()) return s;
  if (!bus_) return Status::State("the event bus is not running");
  events::TenantSummary s;
  Status st = bus_->Summary(TenantId(tenant), &s);
  if (!st.ok()) return st;
  json bindings = json::array();
  for (const auto& b : s.bindings) {
    bindings.push_back({{"binding", b.name},
                        {"cursor", b.cursor},
                        {"delivered", b.delivered},
                        {"connected", b.connected}});
  }
  return json{{"tenant", tenant},
              {"next_seq", s.next_seq},
              {"oldest_seq", s.oldest_seq},
              {"bindings", bindings},
              {"approved", s.approved}};
}

// {"cmd": "event.inject", "tenant": "t1", "event": {"topic": "maintenance", ...}}
// The event object is SpecFromJson's (hz/events/injection.h).
CommandResult Engines::InjectEvent(const json& req) {
  std::string tenant;
  if (Status s = OnlyFields(req, {"tenant", "event"}); !s.ok()) return s;
  if (Status s = GetString(req, "tenant", &tenant); !s.ok()) return s;
  auto e = req.find("event");
  if (e == req.end() || !e->is_object()) {
    return Status::InvalidArgument("field \"event\" must be an object");
  }
  if (!bus_) return Status::State("the event bus is not running");
  events::EventSpec spec;
  Status st = events::SpecFromJson(e->dump(), static_cast<uint64_t>(std::time(nullptr)), &spec);
  if (!st.ok()) return st;
  uint64_t seq = 0;
  st = Publish(TenantId(tenant), spec, &seq);
  if (!st.ok()) return st;
  spdlog::info("event=event_injected tenant={} topic={} kind={} seq={} deadline_s={}", tenant,
               spec.topic, spec.kind, seq, spec.deadline_s);
  hz_event ev{};
  json res = {{"tenant", tenant}, {"seq", seq}};
  if (bus_->Get(TenantId(tenant), seq, &ev).ok()) res["deadline_s"] = ev.deadline_s;
  return res;
}

// {"cmd": "checkpoint.list", "tenant": "t1"}: the tenant's streams with their
// checkpoints, and the engine's recent decisions about them.
CommandResult Engines::ListCheckpoints(const json& req) {
  std::string tenant;
  if (Status s = OnlyFields(req, {"tenant"}); !s.ok()) return s;
  if (Status s = GetString(req, "tenant", &tenant); !s.ok()) return s;
  if (!ckpt_) return Status::State("the checkpoint engine is not running");
  const TenantId id(tenant);
  if (!ckpt_->HasTenant(id)) {
    return json{{"tenant", tenant}, {"streams", json::array()}, {"decisions", json::array()}};
  }
  json streams = json::array();
  for (checkpoint::StreamId s : ckpt_->Streams(id)) {
    std::vector<checkpoint::ListEntry> entries;
    bool more = false;
    if (!ckpt_->List(id, s, 0, 1024, &entries, &more).ok()) continue;
    json steps = json::array();
    for (const auto& e : entries) {
      steps.push_back({{"step", e.step},
                       {"bytes", e.bytes},
                       {"time_s", e.time_s},
                       {"state", e.state == checkpoint::CkptState::kDurable ? "durable" : "staged"},
                       {"tier", e.tier == checkpoint::TierKind::kHostMemory ? "host_memory"
                                : e.tier == checkpoint::TierKind::kPeerHost ? "peer_host"
                                                                            : "local_disk"}});
    }
    streams.push_back({{"stream", s}, {"checkpoints", steps}, {"more", more}});
  }
  json decisions = json::array();
  for (const checkpoint::Decision& d : ckpt_->Decisions()) {
    if (d.tenant != id) continue;
    decisions.push_back({{"kind", checkpoint::DecisionKindName(d.kind)},
                         {"stream", d.stream},
                         {"step", d.step},
                         {"value", d.value}});
  }
  return json{{"tenant", tenant}, {"streams", streams}, {"decisions", decisions}};
}

json Engines::Counters() const {
  json out = {{"events", {{"published", published_.load()}, {"delivered", Delivered()}}}};
  if (ckpt_) {
    checkpoint::Stats s = ckpt_->GetStats();
    uint64_t saves = 0, durable = 0, bytes = 0, restores = 0, corrupt = 0, failures = 0;
    for (const auto& t : s.tenants) {
      saves += t.saves;
      durable += t.durable;
      bytes += t.bytes_persisted;
      restores += t.restores;
      corrupt += t.corrupt_restores;
      failures += t.persist_failures;
    }
    size_t notice_threads = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      notice_threads = notices_.size();
    }
    out["checkpoints"] = {{"saves", saves},
                          {"persisted", durable},
                          {"bytes_persisted", bytes},
                          {"restores", restores},
                          {"corrupt_restores", corrupt},
                          {"persist_failures", failures},
                          {"jit_notices", jit_notices_.load()},
                          {"jit_notices_done", jit_notices_done_.load()},
                          {"notice_threads", notice_threads},
                          {"events", ckpt_events_.load()},
                          {"free_chunks", s.free_chunks},
                          {"pool_chunks", s.pool_chunks}};
    if (peer_) {
      out["checkpoints"]["replicas"] = {
          {"sent", peer_->sent()}, {"received", peer_->received()}, {"failed", peer_->failed()}};
    }
  }
  return out;
}

void Engines::CollectMetrics(prometheus::Registry* r) const {
  AddCounter(r, "hz_events_published_total", "Events published to tenants' logs.",
             static_cast<double>(published_.load()));
  AddCounter(r, "hz_events_delivered_total", "Event records written into guests' event buffers.",
             static_cast<double>(Delivered()));
  if (!ckpt_) return;
  // One series per tenant the checkpoint engine holds (it drops a removed
  // tenant), for billing and quotas; sum() gives the host's totals.
  struct Counter {
    const char* name;
    const char* help;
    uint64_t checkpoint::TenantStats::*value;
  };
  static const Counter kCounters[] = {
      {"hz_checkpoint_saves_total", "Checkpoint saves accepted.", &checkpoint::TenantStats::saves},
      {"hz_checkpoint_persisted_total", "Checkpoints made durable on disk.",
       &checkpoint::TenantStats::durable},
      {"hz_checkpoint_persisted_bytes_total", "Chunk bytes of checkpoints written to disk.",
       &checkpoint::TenantStats::bytes_persisted},
      {"hz_checkpoint_persist_failures_total", "Checkpoints whose write to disk failed.",
       &checkpoint::TenantStats::persist_failures},
      {"hz_checkpoint_restores_total", "Checkpoint restores served.",
       &checkpoint::TenantStats::restores},
      {"hz_checkpoint_corrupt_restores_total", "Restores that found a corrupt checkpoint.",
       &checkpoint::TenantStats::corrupt_restores},
  };
  const checkpoint::Stats s = ckpt_->GetStats();
  for (const Counter& c : kCounters) {
    auto& family = CounterFamily(r, c.name, c.help);
    for (const auto& t : s.tenants) {
      SetCounter(family, {{"tenant", t.tenant.name()}}, static_cast<double>(t.*c.value));
    }
  }
  if (!peer_) return;
  auto& replicas = CounterFamily(r, "hz_checkpoint_replicas_total",
                                 "Checkpoint replicas to and from peer hosts, by outcome.");
  SetCounter(replicas, {{"outcome", "sent"}}, static_cast<double>(peer_->sent()));
  SetCounter(replicas, {{"outcome", "received"}}, static_cast<double>(peer_->received()));
  SetCounter(replicas, {{"outcome", "failed"}}, static_cast<double>(peer_->failed()));
}

}  // namespace hz::service
