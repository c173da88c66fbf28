#include "hz/experiment/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <queue>
#include <random>
#include <set>

#include "ckpt_policy.h"
#include "hz/events/coarse.h"
#include "hz/experiment/comm_model.h"
#include "hz/scheduler/allocator.h"
#include "hz/scheduler/planner.h"
#include "hz/scheduler/synthetic_cluster.h"
#include "hz/scheduler/topology_summary.h"
#include "hz/service/maintenance_plan.h"
#include "notice_bus.h"
#include "replacements.h"

namespace hz::experiment {
namespace {

using scheduler::Allocation;
using scheduler::Allocator;
using scheduler::Cluster;
using scheduler::DeviceKind;
using scheduler::DeviceRef;

// Infrastructure events, the same for every cohort of a seed.
struct InfraEvent {
  double time = 0;
  Outage kind = Outage::kGpuFailure;
  uint32_t host = 0;
  DeviceRef gpu;             // kGpuFailure only
  bool predictable = false;  // kGpuFailure: warned of by the health monitor
  // A fixed event aimed at a job: where it strikes is set by Aim.
  static constexpr size_t kNoJob = SIZE_MAX;
  size_t job = kNoJob;
  bool aimed = false;
  bool started = false;  // kMaintenance: every tenant told approved, so it began early
};

std::vector<InfraEvent> FixedInfraEvents(const std::vector<FixedEvent>& fixed) {
  std::vector<InfraEvent> out;
  for (const FixedEvent& f : fixed) {
    InfraEvent e;
    e.time = f.time;
    e.kind = f.kind;
    e.job = f.job;
    out.push_back(e);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const InfraEvent& a, const InfraEvent& b) { return a.time < b.time; });
  return out;
}

std::vector<InfraEvent> DrawInfraEvents(const Cluster& cluster, const Model& m, double horizon,
                                        uint64_t seed) {
  std::vector<DeviceRef> gpus;
  for (uint32_t h = 0; h < cluster.num_hosts(); ++h) {
    const auto& devices = cluster.host(h).devices;
    for (uint32_t i = 0; i < devices.size(); ++i) {
      if (devices[i].kind == DeviceKind::kGpu) gpus.push_back({h, i});
    }
  }
  std::vector<InfraEvent> out;
  const double hosts = static_cast<double>(cluster.num_hosts());
  struct Process {
    Outage kind;
    double per_hour;
  };
  const Process processes[] = {
      {Outage::kGpuFailure, m.gpu_failures_per_gpu_hour.value * static_cast<double>(gpus.size())},
      {Outage::kHostFailure, m.host_failures_per_host_hour.value * hosts},
      {Outage::kMaintenance, m.maintenance_per_host_hour.value * hosts},
  };
  uint64_t stream = 0;
  for (const Process& p : processes) {
    std::mt19937_64 rng(seed * 1000003 + ++stream);
    if (p.per_hour <= 0 || gpus.empty()) continue;
    std::exponential_distribution<double> gap(p.per_hour / 3600.0);
    std::uniform_real_distribution<double> unit(0, 1);
    for (double t = gap(rng); t < horizon; t += gap(rng)) {
      InfraEvent e;
      e.time = t;
      e.kind = p.kind;
      if (p.kind == Outage::kGpuFailure) {
        e.gpu = gpus[rng() % gpus.size()];
        e.host = e.gpu.host;
        e.predictable = unit(rng) < m.predictable_failure_share.value;
      } else {
        e.host = static_cast<uint32_t>(rng() % cluster.num_hosts());
      }
      out.push_back(e);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const InfraEvent& a, const InfraEvent& b) { return a.time < b.time; });
  return out;
}

enum class JobState { kWaiting, kRunning, kDone };

struct Job {
  const TraceJob* trace = nullptr;
  JobState state = JobState::kWaiting;
  uint64_t epoch = 0;          // bumped when a run ends, so its old events are ignored
  double work_done = 0;        // seconds of work at full speed in the last usable checkpoint
  double queued_at = 0;        // when it last entered the queue
  double interrupted_at = -1;  // when the run it is waiting to resume ended; -1: none
  double waited = 0;
  // The current run.
  uint64_t allocation = 0;
  double run_start = 0;              // placed
  double compute_start = 0;          // state restored, computing
  double slowdown = 1;               // wall seconds per second of work
  double comm_share = 0;             // share of the run's time spent in all-reduces
  CheckpointPlan ckpt;               // as the cohort's checkpoint policy makes them
  double preempt_left = 0;           // running time until the next reclaim (preemptible jobs)
  double reclaim_at = 0;             // when the run is reclaimed, if it runs that long
  bool leaving_for_reclaim = false;  // it saved on the reclaim's notice and leaves
  // Approvable maintenance notices it read and has not approved (seqs).
  std::vector<uint64_t> approvable;
  // Replacement capacity for the move a notice announced: the offer made to
  // it, the reservation it accepted, whether one was sought, and whether it
  // stopped before the reservation started and waits for it.
  uint64_t offer = 0;
  uint64_t reservation = 0;
  bool sought = false;
  bool awaiting = false;
  double lost = 0;  // work recomputed, seconds at full speed
  double jct = 0;   // once done
  uint64_t interruptions = 0;
  std::mt19937_64 rng;
};

// kHear: the tenant hears a notice (and reads the offer made with it);
// kEngine: the negotiation engine's time passes (offers expire,
// reservations start); kReclaimNotice: a spot reclaim is announced.
enum class EventKind {
  kArrival,
  kFinish,
  kInfra,
  kNotice,
  kLeave,
  kReclaimNotice,
  kPreempt,
  kRepair,
  kHear,
  kEngine
};

// Event::infra of a kHear for a reclaim's notice, which is the job's own.
constexpr size_t kReclaim = SIZE_MAX;

struct Event {
  double time = 0;
  uint64_t order = 0;  // ties: first scheduled first
  EventKind kind = EventKind::kArrival;
  size_t job = 0;
  uint64_t epoch = 0;
  size_t infra = 0;  // index into the infrastructure events
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : order > o.order; }
};

// The tenant's tensor-parallel group: pairs for 4 and 8 GPUs, else one group.
int GroupSize(int gpus) {
  return gpus >= 4 && gpus % 2 == 0 ? 2 : gpus;
}

// The slowest link between two of the GPUs: what a ring over all of them
// runs at.
double SlowestLinkGBs(const Cluster& cluster, const std::vector<DeviceRef>& gpus) {
  double slowest = std::numeric_limits<double>::infinity();
  for (size_t a = 0; a < gpus.size(); ++a) {
    for (size_t b = a + 1; b < gpus.size(); ++b)
      slowest = std::min(slowest, cluster.TrueBandwidthGBs(gpus[a], gpus[b]));
  }
  return slowest;
}

// What a job asks the allocator for: its GPUs, on one host.
scheduler::Request RequestFor(const TraceJob& job) {
  return {job.gpus, 0, HZ_LOC_SAME_HOST};
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

class Simulation {
 public:
  Simulation(const Cluster& cluster, const std::vector<TraceJob>& jobs, const Model& model,
             const Mechanisms& mech, uint64_t seed, const std::vector<FixedEvent>* fixed)
      : cluster_(cluster),
        model_(model),
        mech_(mech),
        alloc_(&cluster,
               mech.topology ? scheduler::Policy::kTopologyAware : scheduler::Policy::kFirstFit),
        plan_rng_(seed * 7919 + 17) {
    total_gpus_ = alloc_.TotalFree(DeviceKind::kGpu);  // all of them, before any allocation
    outages_.assign(cluster.num_hosts(), {});
    for (uint32_t h = 0; h < cluster.num_hosts(); ++h)
      outages_[h].assign(cluster.host(h).devices.size(), 0);
    jobs_.resize(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      Job& j = jobs_[i];
      j.trace = &jobs[i];
      j.rng.seed(seed * 104729 + i);
      if (j.trace->preemptible && model.preemptions_per_job_hour.value > 0) DrawReclaim(j);
      Push(static_cast<double>(jobs[i].arrival_s), EventKind::kArrival, i);
    }
    const auto [first, last] = std::minmax_element(
        jobs.begin(), jobs.end(),
        [](const TraceJob& a, const TraceJob& b) { return a.arrival_s < b.arrival_s; });
    if (first != jobs.end()) {
      first_arrival_ = static_cast<double>(first->arrival_s);
      last_arrival_ = static_cast<double>(last->arrival_s);
    }
    if (mech.pushed_notices || mech.reservations) {
      const Status s = NoticeBus::Open([this] { return SimSeconds(now_); }, &bus_);
      if (!s.ok()) {
        // The cohort's notices would not reach its tenants: no run is better
        // than a run that only looks like one.
        std::fprintf(stderr, "hz-experiment: event bus: %s\n", s.ToString().c_str());
        std::abort();
      }
    }
    if (bus_ && mech.pushed_notices) {
      // Maintenance as harmonaized's workflow runs it: approvable notices,
      // started early once every tenant told approved.
      bus_->SetApprovalCallback([this](const TenantId& tenant, const hz_event& ev) {
        maintenance_plan_.Approve(tenant.name(), ev.seq, SimSeconds(now_));
      });
    }
    if (mech.reservations) {
      replacements_ = std::make_unique<Replacements>(
          alloc_,
          [this](const std::vector<DeviceRef>& devices) {
            Allocation a;
            const scheduler::Request r{static_cast<uint32_t>(devices.size()), 0, HZ_LOC_SAME_HOST};
            if (!alloc_.AllocateDevices("reserved", r, devices, &a).ok()) return uint64_t{0};
            allocated_ += a.devices.size();
            return a.id;
          },
          [this](uint64_t id) { Give(id); }, bus_.get(), seed);
    }
    infra_ = fixed != nullptr
                 ? FixedInfraEvents(*fixed)
                 : DrawInfraEvents(cluster, model, last_arrival_ + kEventHorizonS, seed);
    for (size_t k = 0; k < infra_.size(); ++k) ScheduleInfra(k);
    ComputeReferenceCosts();
  }

  RunResult Run() {
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      if (Unfinished() == 0 && e.kind != EventKind::kArrival) break;
      Advance(e.time);
      Handle(e);
      TryStart();
    }
    return Result();
  }

 private:
  void Push(double time, EventKind kind, size_t job = 0, uint64_t epoch = 0, size_t infra = 0) {
    events_.push({time, next_order_++, kind, job, epoch, infra});
  }

  size_t Unfinished() const { return jobs_.size() - completed_; }

  // When the tenant hears of infrastructure event `k` (-1: never), and when
  // the provider stops placing on its devices.
  double NoticeLead(const InfraEvent& e) const {
    switch (e.kind) {
      case Outage::kMaintenance:
        return mech_.pushed_notices ? model_.early_maintenance_notice_s.value
                                    : model_.maintenance_notice_s.value;
      case Outage::kGpuFailure:
        return e.predictable && mech_.pushed_notices ? model_.failure_warning_s.value : -1;
      case Outage::kHostFailure:
        return -1;
    }
    return -1;
  }

  // The lead a tenant has left once the notice reaches it: delivery (a poll
  // or a push) and, for coarse events, what the deadline it was told
  // (`told`, rounded down as harmonaized publishes it) falls short of the
  // event. -1 when it is not told.
  double UsableLead(double event_time, double lead, double told) const {
    if (lead < 0) return -1;
    if (!mech_.pushed_notices) return lead - Delivery();
    switch (mech_.events) {
      case Information::kNone:
        return -1;
      case Information::kCoarse:
        return lead - (event_time - told) - Delivery();
      case Information::kFull:
        return lead - Delivery();
    }
    return -1;
  }
  static double Coarse(double t) {
    return static_cast<double>(events::RoundDownTime(static_cast<uint64_t>(t)));
  }
  // From a notice's publication to the tenant reading it: a push, or half a
  // poll interval on average.
  double Delivery() const {
    return mech_.pushed_notices ? model_.push_latency_s.value : model_.poll_interval_s.value / 2;
  }
  double NoticeTime(const InfraEvent& e) const { return std::max(0.0, e.time - NoticeLead(e)); }

  void ScheduleInfra(size_t k) {
    const InfraEvent& e = infra_[k];
    if (NoticeLead(e) > 0) {
      // The provider drains the devices from the notice on (planned work and
      // warned failures alike), and tells the tenants running there.
      Push(NoticeTime(e), EventKind::kNotice, 0, 0, k);
    }
    Push(e.time, EventKind::kInfra, 0, 0, k);
  }

  std::vector<DeviceRef> DevicesOf(const InfraEvent& e) const {
    if (e.kind == Outage::kGpuFailure) return {e.gpu};
    std::vector<DeviceRef> out;
    const auto& devices = cluster_.host(e.host).devices;
    for (uint32_t i = 0; i < devices.size(); ++i) {
      if (devices[i].kind == DeviceKind::kGpu) out.push_back({e.host, i});
    }
    return out;
  }

  void Handle(const Event& e) {
    switch (e.kind) {
      case EventKind::kArrival:
        Enqueue(e.job, e.time);
        break;
      case EventKind::kFinish:
        if (Current(e)) Finish(e.job, e.time);
        break;
      case EventKind::kNotice:
        OnNotice(e.infra, e.time);
        break;
      case EventKind::kInfra:
        OnInfra(e.infra, e.time);
        break;
      case EventKind::kLeave:
        if (Current(e)) Interrupt(e.job, e.time, /*saved=*/true, Loss::kGuest);
        break;
      case EventKind::kReclaimNotice:
        if (Current(e)) OnReclaimNotice(e.job, e.time);
        break;
      case EventKind::kPreempt:
        if (Current(e)) Interrupt(e.job, e.time, /*saved=*/false, Loss::kGuest);
        break;
      case EventKind::kRepair:
        Repair(e.infra);
        break;
      case EventKind::kHear:
        if (Current(e)) OnHear(e.job, e.time, e.infra);
        break;
      case EventKind::kEngine:
        replacements_->Tick(e.time);
        AfterEngine(e.time);
        break;
    }
  }

  bool Current(const Event& e) const {
    const Job& j = jobs_[e.job];
    return j.state == JobState::kRunning && j.epoch == e.epoch;
  }

  // First come, first served: a new job by its arrival, a stopped one by
  // when it stopped, as a tenant that asks for new capacity after an
  // eviction queues behind everyone who asked before it.
  void Enqueue(size_t i, double now) {
    Job& j = jobs_[i];
    j.state = JobState::kWaiting;
    j.queued_at = now;
    queue_.insert({now, i});
  }

  void TryStart() {
    while (!queue_.empty()) {
      const size_t i = queue_.begin()->second;
      Job& j = jobs_[i];
      Allocation a;
      if (!Take("t", RequestFor(*j.trace), &a)) break;  // first come, first served: the head waits
      queue_.erase(queue_.begin());
      Start(i, a, now_);
    }
  }

  void Start(size_t i, const Allocation& a, double now) {
    Job& j = jobs_[i];
    j.state = JobState::kRunning;
    j.allocation = a.id;
    running_[a.id] = i;
    j.run_start = now;
    j.waited += now - j.queued_at;
    double restore = 0;
    if (j.interrupted_at >= 0) {
      const double gb = model_.ckpt_gb_per_gpu.value;
      const double rate =
          mech_.peer_replicas ? model_.peer_copy_gbps.value : model_.restore_gbps.value;
      restore = model_.restart_s.value + (j.work_done > 0 ? gb / rate : 0);
      recoveries_.push_back(now + restore - j.interrupted_at);
      j.interrupted_at = -1;
    }
    j.compute_start = now + restore;
    j.slowdown = Slowdown(j, a);
    j.ckpt = PlanCheckpoints(model_, mech_, *j.trace);
    const double work_left = static_cast<double>(j.trace->duration_s) - j.work_done;
    const double compute = work_left * j.slowdown;
    const double checkpoints = std::floor(compute / j.ckpt.interval_s);
    Push(j.compute_start + compute + checkpoints * j.ckpt.stall_s, EventKind::kFinish, i, j.epoch);
    if (j.trace->preemptible && j.preempt_left > 0) {
      // The reclaim is announced its notice ahead, or at the start.
      j.reclaim_at = now + j.preempt_left;
      Push(std::max(now, j.reclaim_at - model_.preemption_notice_s.value),
           EventKind::kReclaimNotice, i, j.epoch);
      Push(j.reclaim_at, EventKind::kPreempt, i, j.epoch);
    }
  }

  // Wall seconds per second of work on this allocation: the job's iteration
  // (comm_model.h) with the cohort's collectives, the tenant's plan and the
  // host's PCIe links shared with the other jobs communicating there,
  // against the same job alone on the best GPUs of a host with its own
  // library.
  double Slowdown(Job& j, const Allocation& a) {
    const uint32_t g = j.trace->gpus;
    j.comm_share = 0;
    if (g < 2) return 1;
    std::vector<DeviceRef> gpus;
    for (DeviceRef d : a.devices) {
      if (cluster_.device(d).kind == DeviceKind::kGpu) gpus.push_back(d);
    }
    double neighbours = 0;
    for (const auto& [id, other] : alloc_.allocations()) {
      auto it = running_.find(id);
      if (id != a.id && it != running_.end() && other.devices[0].host == gpus[0].host)
        neighbours += jobs_[it->second].comm_share;
    }
    const int k = GroupSize(static_cast<int>(g));
    // The plan's slowest group runs at RingFactor(k) / cost GB/s.
    const double group_gbs = RingFactor(k) / PlanCost(gpus);
    const Engine engine = mech_.topology ? ProviderEngine(model_) : StandardEngine(model_);
    const Iteration it =
        IterationTime(model_, g, k, RingFactor(k) / SharedGBs(group_gbs, neighbours),
                      SharedGBs(SlowestLinkGBs(cluster_, gpus), neighbours), 1, engine);
    j.comm_share = it.comm_share();
    return it.total_s() / reference_iteration_s_[g];
  }

  // Seconds per GB of the tenant's plan: groups of 2 (tensor parallel) for
  // 4 and 8 GPUs, one group for 2, priced under the true topology. With the
  // summary (or the full topology) the tenant plans with the real planner;
  // without, it groups its GPUs in the order its VM lists them (PCI order),
  // as a framework does by default.
  double PlanCost(const std::vector<DeviceRef>& gpus) {
    const int n = static_cast<int>(gpus.size());
    const int k = GroupSize(n);
    const Information info = mech_.topology ? mech_.topology_info : Information::kNone;
    if (info == Information::kNone) {
      scheduler::Partition in_order(n / k);
      for (int i = 0; i < n; ++i) in_order[i / k].push_back(i);
      return scheduler::PlanCost(
          in_order, [&](int a, int b) { return cluster_.TrueBandwidthGBs(gpus[a], gpus[b]); });
    }
    const scheduler::TopologySummary s =
        scheduler::BuildTopologySummary(cluster_, gpus, plan_rng_());
    const scheduler::PlanQuality q = scheduler::EvaluatePlans(cluster_, s, k, plan_rng_);
    return info == Information::kFull ? q.full_cost : q.coarse_cost;
  }

  // A job's iteration on the best GPUs of an idle 8-GPU host with the
  // tenant's own library: the speed its traced duration is taken at.
  void ComputeReferenceCosts() {
    reference_iteration_s_.assign(9, 0);
    const Cluster one = scheduler::UniformCluster(1, 8);
    for (uint32_t g = 2; g <= 8; ++g) {
      Allocator a(&one, scheduler::Policy::kTopologyAware);
      std::vector<DeviceRef> gpus;
      if (!a.Place({g, 0, HZ_LOC_SAME_HOST}, &gpus)) continue;
      const scheduler::TopologySummary s = scheduler::BuildTopologySummary(one, gpus, 1);
      std::mt19937_64 rng(1);
      const int k = GroupSize(static_cast<int>(g));
      const double best = scheduler::EvaluatePlans(one, s, k, rng).best_cost;
      reference_iteration_s_[g] =
          IterationTime(model_, g, k, best, SlowestLinkGBs(one, gpus), 1, StandardEngine(model_))
              .total_s();
    }
  }

  // Work (seconds at full speed) the run has done by `now`, and the work in
  // its last checkpoint that has been safe `lag` seconds after its stall.
  double WorkAt(const Job& j, double now) const {
    const double e = std::max(0.0, now - j.compute_start);
    const double cycle = j.ckpt.interval_s + j.ckpt.stall_s;
    const double cycles = std::floor(e / cycle);
    const double compute =
        cycles * j.ckpt.interval_s + std::min(e - cycles * cycle, j.ckpt.interval_s);
    return j.work_done + compute / j.slowdown;
  }
  double CheckpointAt(const Job& j, double now, double lag) const {
    const double e = now - j.compute_start - lag;
    if (e <= 0) return j.work_done;
    const double cycles = std::floor(e / (j.ckpt.interval_s + j.ckpt.stall_s));
    return j.work_done + cycles * j.ckpt.interval_s / j.slowdown;
  }

  void Finish(size_t i, double now) {
    Job& j = jobs_[i];
    EndRun(j);
    if (j.reservation != 0) {
      replacements_->Release(i, j.reservation, now);
      reserved_by_.erase(j.reservation);
      j.reservation = 0;
    }
    j.state = JobState::kDone;
    ++completed_;
    j.jct = now - static_cast<double>(j.trace->arrival_s);
    jct_.push_back(j.jct);
    waits_.push_back(j.waited);
    last_completion_ = std::max(last_completion_, now);
    ApproveNotices(i, now);
    if (bus_) bus_->Forget(TenantOf(i));  // the tenant is done
  }

  // A planned move (maintenance, a warned failure): the provider drains the
  // devices, publishes harmonaized's notice on the event bus to each tenant
  // running there (today's IaaS tells its own way, polled), and seeks their
  // replacements; each tenant reads after its delivery, if it is told. A
  // maintenance the bus announces runs as harmonaized's workflow does: it
  // starts early once every tenant told approved.
  void OnNotice(size_t k, double now) {
    if (!Aim(k)) return;
    const InfraEvent& e = infra_[k];
    const std::vector<DeviceRef> devices = DevicesOf(e);
    for (DeviceRef d : devices) Drain(d);
    const bool told = UsableLead(e.time, e.time - now, Coarse(e.time)) >= 0;
    service::Maintenance* m = nullptr;
    if (EarlyApproval() && e.kind == Outage::kMaintenance) {
      m = &maintenance_plan_.Add("host-" + std::to_string(e.host), {}, SimSeconds(e.time),
                                 static_cast<uint64_t>(model_.maintenance_s.value),
                                 SimSeconds(now));
      maintenance_of_[m->id] = k;
    }
    for (size_t i : JobsOn(devices)) {
      Job& j = jobs_[i];
      if (bus_ && mech_.pushed_notices) {
        uint64_t seq = 0;
        if (bus_->Publish(TenantOf(i), NoticeOf(e, j, m != nullptr), &seq).ok() && m != nullptr)
          m->told.push_back({TenantOf(i).name(), seq, 0, 0});
      }
      if (replacements_ && j.offer == 0 && j.reservation == 0) SeekReplacement(i, now, e.time);
      if (told) Push(now + Delivery(), EventKind::kHear, i, j.epoch, k);
    }
    if (m != nullptr) StartDueMaintenance(now);  // nobody told: it starts now
  }

  // Early approval belongs to the notices harmonaized pushes.
  bool EarlyApproval() const { return bus_ != nullptr && mech_.pushed_notices; }

  // A maintenance as MAINTENANCE/SCHEDULED; a warned failure as
  // PREEMPTION/SCHEDULED, the devices the provider takes at the deadline.
  events::EventSpec NoticeOf(const InfraEvent& e, const Job& j, bool approvable) const {
    const auto deadline = static_cast<uint64_t>(e.time);
    if (e.kind == Outage::kMaintenance) {
      return events::MakeMaintenance(events::kMaintenanceScheduled, deadline,
                                     static_cast<uint64_t>(model_.maintenance_s.value),
                                     events::kAllDevices, approvable);
    }
    return events::MakePreemption(events::kPreemptionScheduled, deadline, j.trace->gpus,
                                  events::kAllDevices, /*approvable=*/false);
  }

  // Maintenances every tenant told has approved start now: the plan's rule,
  // as harmonaized's workflow applies it.
  void StartDueMaintenance(double now) {
    for (uint64_t id : maintenance_plan_.Due(SimSeconds(now))) {
      service::Maintenance* m = maintenance_plan_.Find(id);
      m->state = service::MaintenanceState::kStarted;
      m->started_s = SimSeconds(now);
      m->started_early = SimSeconds(now) < m->at_s;
      const size_t k = maintenance_of_.at(id);
      if (!infra_[k].started) BeginOutage(k, now);
    }
  }

  // A spot reclaim's notice: PREEMPTION/SCHEDULED on the bus for the
  // cohorts harmonaized tells, today's polled notice otherwise.
  void OnReclaimNotice(size_t i, double now) {
    Job& j = jobs_[i];
    if (bus_ && mech_.pushed_notices) {
      bus_->Publish(
          TenantOf(i),
          events::MakePreemption(events::kPreemptionScheduled, static_cast<uint64_t>(j.reclaim_at),
                                 j.trace->gpus, events::kAllDevices, /*approvable=*/false),
          nullptr);
    }
    if (UsableLead(j.reclaim_at, j.reclaim_at - now, Coarse(j.reclaim_at)) >= 0)
      Push(now + Delivery(), EventKind::kHear, i, j.epoch, kReclaim);
  }

  // What a notice announced: when the event strikes, and when it was told.
  struct Announced {
    double event_time = 0;
    double notice_time = 0;
  };
  Announced AnnouncedBy(size_t i, size_t k) const {
    if (k == kReclaim) {
      const double at = jobs_[i].reclaim_at;
      return {at, std::max(jobs_[i].run_start, at - model_.preemption_notice_s.value)};
    }
    return {infra_[k].time, NoticeTime(infra_[k])};
  }

  // The tenant reads its log: the notice (harmonaized's, with the deadline
  // the bus stored) and the offer made with it, which it accepts. Then it
  // plans its move against what it was told.
  void OnHear(size_t i, double now, size_t k) {
    const Announced a = AnnouncedBy(i, k);
    bool noticed = !mech_.pushed_notices;  // today's notices do not come by the bus
    double told = a.event_time;
    uint64_t offer = 0;
    for (const hz_event& ev : ReadLog(i)) {
      if (ev.topic == HZ_TOPIC_NEGOTIATION && ev.kind == events::kNegotiationOfferMade) {
        events::NegotiationPayload p{};
        std::memcpy(&p, ev.payload, sizeof(p));
        offer = p.offer_id;
      } else if (ev.deadline_s != 0) {
        noticed = true;
        if (mech_.events == Information::kCoarse) told = static_cast<double>(ev.deadline_s);
      }
    }
    if (offer != 0) AcceptOffer(i, offer, now);
    if (!noticed) return;
    const double lead = UsableLead(a.event_time, a.event_time - a.notice_time, told);
    if (PlanMove(i, now, lead, a.event_time)) jobs_[i].leaving_for_reclaim = k == kReclaim;
  }

  // The tenant's log since it last read; approvable notices are kept to
  // approve once the job is off their devices.
  std::vector<hz_event> ReadLog(size_t i) {
    if (!bus_) return {};
    std::vector<hz_event> events = bus_->Read(TenantOf(i));
    for (const hz_event& ev : events) {
      if ((ev.flags & HZ_EVENT_F_APPROVABLE) != 0) jobs_[i].approvable.push_back(ev.seq);
    }
    return events;
  }

  // The job no longer runs where its approvable notices announced work:
  // nothing is lost by approving them, and the maintenance may start early.
  void ApproveNotices(size_t i, double now) {
    if (!EarlyApproval()) return;
    ReadLog(i);  // one not heard yet
    Job& j = jobs_[i];
    bool approved = false;
    for (uint64_t seq : j.approvable) approved |= bus_->Approve(TenantOf(i), seq).ok();
    j.approvable.clear();
    if (approved) StartDueMaintenance(now);
  }

  // When the policy saves on notice, the job saves as soon as it hears and
  // leaves when the save is done; otherwise, or when the save would not be
  // taken before the deadline, it runs until the event stops it. True when
  // it leaves.
  bool PlanMove(size_t i, double now, double lead, double event_time) {
    Job& j = jobs_[i];
    if (lead < 0) return false;  // not told
    const double heard = event_time - lead;
    if (!j.ckpt.NoticeSaveFits(heard, event_time)) return false;
    Push(std::max(now, heard + j.ckpt.stall_s), EventKind::kLeave, i, j.epoch);
    // The save captures the state it started with.
    j.work_done = WorkAt(j, std::max(now, heard));
    j.compute_start = std::numeric_limits<double>::infinity();  // no more work counts
    return true;
  }

  void OnInfra(size_t k, double now) {
    if (!Aim(k) || infra_[k].started) return;
    if (EarlyApproval() && infra_[k].kind == Outage::kMaintenance) {
      StartDueMaintenance(now);  // its start time came
      if (infra_[k].started) return;
    }
    BeginOutage(k, now);
  }

  // The event strikes: the jobs still on its devices stop, and the devices
  // are out until the repair or the maintenance's end.
  void BeginOutage(size_t k, double now) {
    InfraEvent& e = infra_[k];
    e.started = true;
    const std::vector<DeviceRef> devices = DevicesOf(e);
    const Loss loss = e.kind == Outage::kGpuFailure ? Loss::kDevices : Loss::kHost;
    for (size_t i : JobsOn(devices)) Interrupt(i, now, /*saved=*/false, loss);
    if (NoticeLead(e) <= 0) {
      for (DeviceRef d : devices) Drain(d);  // else drained at the notice
    }
    const double down =
        e.kind == Outage::kMaintenance ? model_.maintenance_s.value : model_.repair_s.value;
    Push(now + down, EventKind::kRepair, 0, 0, k);
  }

  // A fixed event strikes where its job runs when first handled (its notice,
  // else the event); false when the job is not running then: it hits nothing.
  bool Aim(size_t k) {
    InfraEvent& e = infra_[k];
    if (e.job == InfraEvent::kNoJob || e.aimed) return true;
    if (e.job >= jobs_.size() || jobs_[e.job].state != JobState::kRunning) return false;
    const Allocation* a = alloc_.Find(jobs_[e.job].allocation);
    e.gpu = a->devices.front();
    e.host = e.gpu.host;
    e.aimed = true;
    return true;
  }

  // The running time until the job's next reclaim, from its own stream.
  void DrawReclaim(Job& j) const {
    std::exponential_distribution<double> gap(model_.preemptions_per_job_hour.value / 3600.0);
    j.preempt_left = gap(j.rng);
  }

  // A reclaimable job's next reclaim: a fresh draw after this run's reclaim
  // (taken, or left ahead of on notice), else what this run left of it.
  void NextReclaim(Job& j, double now) {
    if (!j.trace->preemptible || j.preempt_left <= 0) return;
    if (j.leaving_for_reclaim || now >= j.reclaim_at) {
      DrawReclaim(j);
    } else {
      j.preempt_left = std::max(1.0, j.preempt_left - (now - j.run_start));
    }
    j.leaving_for_reclaim = false;
  }

  // Ends a run. `saved`: its state was saved on notice (work_done is set);
  // otherwise it falls back to the last checkpoint that survives `loss`.
  void Interrupt(size_t i, double now, bool saved, Loss loss) {
    Stop(i, now, saved, loss);
    ApproveNotices(i, now);
  }
  void Stop(size_t i, double now, bool saved, Loss loss) {
    Job& j = jobs_[i];
    if (!saved) {
      const double done = WorkAt(j, now);
      const double kept = std::min(done, CheckpointAt(j, now, j.ckpt.SafeLag(loss)));
      lost_gpu_s_ += (done - kept) * j.trace->gpus;
      j.lost += done - kept;
      j.work_done = kept;
    }
    ++j.interruptions;
    NextReclaim(j, now);
    EndRun(j);
    ++interruptions_;
    j.interrupted_at = now;
    j.queued_at = now;
    j.offer = 0;  // not accepted by now: it lapses
    if (j.reservation != 0) {
      if (replacements_->Ready(j.reservation) != 0) {
        MoveToReservation(i, now);
      } else {
        // Not started yet, or its held devices failed: the engine's time
        // passes now, which starts it or takes it back (AfterEngine).
        j.state = JobState::kWaiting;
        j.awaiting = true;
        awaiting_.insert(i);
        replacements_->Tick(now);
        AfterEngine(now);
      }
      return;
    }
    if (j.sought) ++replacements_->counts().fallbacks;
    j.sought = false;
    Enqueue(i, now);
  }

  // At a notice, the provider offers the job replacement devices (the
  // engine decides at once); the tenant reads the offer with the notice and
  // accepts it then. A tenant told nothing lets it lapse.
  void SeekReplacement(size_t i, double now, double event_time) {
    Job& j = jobs_[i];
    j.sought = true;
    const Replacements::Offered o = replacements_->Offer(i, j.trace->gpus, now, event_time);
    AfterEngine(now);
    if (o.offer == 0) return;  // refused: when the event comes, the job queues
    j.offer = o.offer;
    Push(o.expires, EventKind::kEngine);
  }

  void AcceptOffer(size_t i, uint64_t offer, double now) {
    Job& j = jobs_[i];
    if (!replacements_ || j.reservation != 0) return;
    const Replacements::Accepted a = replacements_->Accept(i, offer, now);
    j.offer = 0;
    if (a.reservation != 0) {
      j.reservation = a.reservation;
      reserved_by_[a.reservation] = i;
      if (a.start > now) Push(a.start, EventKind::kEngine);  // attached then
    }
    AfterEngine(now);
  }

  // The reservation's devices are the job's next run, ahead of the queue.
  void MoveToReservation(size_t i, double now) {
    Job& j = jobs_[i];
    const uint64_t id = replacements_->Ready(j.reservation);
    const Allocation a = *alloc_.Find(id);
    replacements_->Consume(i, j.reservation, now);
    reserved_by_.erase(j.reservation);
    j.reservation = 0;
    j.sought = false;
    j.awaiting = false;
    Start(i, a, now);
  }

  // After the engine ran: a job whose reservation was taken back queues
  // (from when it stopped, if it has), and a job waiting for its
  // reservation to start moves once it has.
  void AfterEngine(double now) {
    for (uint64_t r : replacements_->TakeLost()) {
      auto it = reserved_by_.find(r);
      if (it == reserved_by_.end()) continue;
      const size_t i = it->second;
      reserved_by_.erase(it);
      Job& j = jobs_[i];
      j.reservation = 0;
      if (!j.awaiting) continue;
      j.awaiting = false;
      j.sought = false;
      awaiting_.erase(i);
      ++replacements_->counts().fallbacks;
      Enqueue(i, j.interrupted_at);
    }
    for (auto it = awaiting_.begin(); it != awaiting_.end();) {
      const size_t i = *it;
      if (replacements_->Ready(jobs_[i].reservation) == 0) {
        ++it;
        continue;
      }
      it = awaiting_.erase(it);
      MoveToReservation(i, now);
    }
  }

  // Gives the run's devices back; its pending events no longer apply.
  void EndRun(Job& j) {
    running_.erase(j.allocation);
    Give(j.allocation);
    ++j.epoch;
  }

  // The running jobs on these devices, each once, in device order
  // (reservations are no job's run).
  std::vector<size_t> JobsOn(const std::vector<DeviceRef>& devices) const {
    std::vector<size_t> out;
    for (DeviceRef d : devices) {
      auto it = running_.find(alloc_.Owner(d));
      if (it != running_.end() && std::find(out.begin(), out.end(), it->second) == out.end())
        out.push_back(it->second);
    }
    return out;
  }

  // Allocations through these keep the count of allocated devices.
  bool Take(const char* owner, const scheduler::Request& r, Allocation* a) {
    if (!alloc_.Allocate(owner, r, a).ok()) return false;
    allocated_ += a->devices.size();
    return true;
  }
  void Give(uint64_t id) {
    if (const Allocation* a = alloc_.Find(id)) allocated_ -= a->devices.size();
    alloc_.Release(id);
  }

  // Outages overlap (a GPU fails during its host's maintenance): a device is
  // placeable again when the last one ends.
  void Drain(DeviceRef d) {
    if (outages_[d.host][d.index]++ == 0) alloc_.SetFailed(d, true);
  }
  void Repair(size_t k) {
    for (DeviceRef d : DevicesOf(infra_[k])) {
      if (--outages_[d.host][d.index] == 0) alloc_.SetFailed(d, false);
    }
  }

  // Utilisation, fragmentation and energy are integrated over the arrival
  // window, the steady state: after the last arrival the cluster only drains,
  // and a cohort whose last job ends late would be charged for idle GPUs a
  // real cluster would give to the next jobs.
  void Advance(double t) {
    if (t <= now_) return;
    const double dt = std::max(0.0, std::min(t, last_arrival_) - std::max(now_, first_arrival_));
    now_ = t;
    if (dt == 0) return;
    const uint32_t free = alloc_.TotalFree(DeviceKind::kGpu);
    busy_area_ += dt * static_cast<double>(allocated_);  // reservations included
    idle_area_ += dt * free;
    // Walking every pool at every event would dominate the run: the share
    // is sampled once per simulated minute.
    if (now_ >= fragmentation_at_ + 60) {
      fragmentation_ = Fragmentation(free);
      fragmentation_at_ = now_;
    }
    frag_area_ += dt * fragmentation_;
    span_ += dt;
  }

  double Fragmentation(uint32_t free) const {
    if (free == 0) return 0;
    uint32_t whole = 0;
    for (uint32_t p = 0; p < cluster_.pools().size(); ++p) {
      const scheduler::Pool& pool = cluster_.pools()[p];
      if (pool.kind == DeviceKind::kGpu && alloc_.FreeInPool(p) == pool.devices.size())
        whole += alloc_.FreeInPool(p);
    }
    return 1.0 - static_cast<double>(whole) / free;
  }

  RunResult Result() const {
    RunResult r;
    r.jobs = jct_.size();
    r.jct_s = jct_;
    if (!jct_.empty()) {
      r.jct_mean_s = std::accumulate(jct_.begin(), jct_.end(), 0.0) / jct_.size();
      r.jct_p50_s = Percentile(jct_, 0.5);
      r.jct_p99_s = Percentile(jct_, 0.99);
      r.wait_mean_s = std::accumulate(waits_.begin(), waits_.end(), 0.0) / waits_.size();
    }
    r.makespan_s = last_completion_ - first_arrival_;
    r.lost_gpu_h = lost_gpu_s_ / 3600;
    if (!recoveries_.empty()) {
      r.recovery_mean_s =
          std::accumulate(recoveries_.begin(), recoveries_.end(), 0.0) / recoveries_.size();
    }
    if (span_ > 0) {
      r.utilisation = busy_area_ / span_ / total_gpus_;
      r.fragmentation = frag_area_ / span_;
    }
    r.energy_mwh =
        (busy_area_ * model_.gpu_busy_w.value + idle_area_ * model_.gpu_idle_w.value) / 3.6e9;
    r.interruptions = interruptions_;
    if (replacements_) {
      const ReplacementCounts& c = replacements_->counts();
      r.offers_made = c.offers_made;
      r.offers_accepted = c.offers_accepted;
      r.reservations_honoured = c.honoured;
      r.reservation_fallbacks = c.fallbacks;
    }
    for (const Job& j : jobs_) {
      r.per_job.push_back(
          {j.state == JobState::kDone ? j.jct : -1, j.lost, j.ckpt.interval_s, j.interruptions});
    }
    return r;
  }

  const Cluster& cluster_;
  const Model& model_;
  const Mechanisms mech_;
  Allocator alloc_;
  std::mt19937_64 plan_rng_;
  std::vector<Job> jobs_;
  std::map<uint64_t, size_t> running_;          // allocation -> job
  std::unique_ptr<NoticeBus> bus_;              // cohorts told by harmonaized, or negotiating
  std::unique_ptr<Replacements> replacements_;  // cohorts with reservations
  std::map<uint64_t, size_t> reserved_by_;      // reservation -> job
  std::set<size_t> awaiting_;                   // stopped jobs waiting for their reservation
  service::MaintenancePlan maintenance_plan_;   // cohorts with early approval
  std::map<uint64_t, size_t> maintenance_of_;   // maintenance id -> infrastructure event
  std::vector<InfraEvent> infra_;
  std::vector<std::vector<int>> outages_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t next_order_ = 0;
  std::set<std::pair<double, size_t>> queue_;  // (queued at, job)
  std::vector<double> reference_iteration_s_;
  uint32_t total_gpus_ = 0;
  size_t allocated_ = 0;
  double fragmentation_ = 0;
  double fragmentation_at_ = -1e300;
  double now_ = 0;
  double first_arrival_ = 0;
  double last_arrival_ = 0;
  double last_completion_ = 0;
  size_t completed_ = 0;
  std::vector<double> jct_, waits_, recoveries_;
  double lost_gpu_s_ = 0;
  uint64_t interruptions_ = 0;
  double busy_area_ = 0, idle_area_ = 0, frag_area_ = 0, span_ = 0;
};

}  // namespace

RunResult Simulate(const Cluster& cluster, const std::vector<TraceJob>& jobs, const Model& model,
                   const Mechanisms& mechanisms, uint64_t seed,
                   const std::vector<FixedEvent>* fixed) {
  Simulation sim(cluster, jobs, model, mechanisms, seed, fixed);
  return sim.Run();
}

}  // namespace hz::experiment
