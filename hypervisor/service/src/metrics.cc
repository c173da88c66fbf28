#include "hz/service/metrics.h"

#include <set>

#include "hz/service/request.h"
#include "metrics_families.h"
#include "protocol/harmonaize_opcodes.h"

namespace hz::service {

namespace {

// Slot 0 counts unknown opcodes; slot i > 0 counts hz_opcode_names[i - 1].
constexpr size_t kSlotsUsed = HZ_NUM_OPCODES + 1;
static_assert(kSlotsUsed <= Metrics::kOpcodeSlots);

constexpr const char* kFamilyNames[Metrics::kFamilies] = {
    "session",  "region",      "communicator", "collective", "checkpoint", "event",
    "topology", "negotiation", "hint",         "energy",     "unknown"};

const char* SlotName(size_t slot) {
  return slot == 0 ? "UNKNOWN" : hz_opcode_names[slot - 1].name;
}

size_t FamilyIndex(uint16_t opcode) {
  const size_t high = opcode >> 8;
  return high < Metrics::kFamilies - 1 ? high : Metrics::kFamilies - 1;
}

}  // namespace

const char* OpcodeFamilyName(uint16_t opcode) {
  return kFamilyNames[FamilyIndex(opcode)];
}

size_t Metrics::Slot(uint16_t opcode) {
  for (size_t i = 1; i < kSlotsUsed; ++i) {
    if (hz_opcode_names[i - 1].opcode == opcode) return i;
  }
  return 0;
}

void Metrics::CountRequest(uint16_t opcode, uint32_t status) {
  if (status > HZ_S_MAX) status = HZ_S_MAX;
  requests_[Slot(opcode)][status].fetch_add(1, std::memory_order_relaxed);
}

void Metrics::AddBytes(uint16_t opcode, uint64_t n) {
  bytes_[Slot(opcode)].fetch_add(n, std::memory_order_relaxed);
}

void Metrics::ObserveLatency(uint16_t opcode, std::chrono::nanoseconds elapsed) {
  const size_t f = FamilyIndex(opcode);
  const double seconds = std::chrono::duration<double>(elapsed).count();
  size_t b = 0;
  while (b < kLatencyBounds.size() && seconds > kLatencyBounds[b]) ++b;
  latency_[f][b].fetch_add(1, std::memory_order_relaxed);
  const uint64_t ns = elapsed.count() > 0 ? static_cast<uint64_t>(elapsed.count()) : 0;
  latency_sum_ns_[f].fetch_add(ns, std::memory_order_relaxed);
}

std::shared_ptr<TenantRequestCounters> Metrics::ForTenant(const std::string& tenant) {
  std::lock_guard<std::mutex> lock(tenants_mu_);
  auto& c = tenants_[tenant];
  if (!c) c = std::make_shared<TenantRequestCounters>();
  return c;
}

uint64_t Metrics::requests(uint16_t opcode, uint32_t status) const {
  if (status > HZ_S_MAX) status = HZ_S_MAX;
  return requests_[Slot(opcode)][status].load(std::memory_order_relaxed);
}

uint64_t Metrics::bytes(uint16_t opcode) const {
  return bytes_[Slot(opcode)].load(std::memory_order_relaxed);
}

void Metrics::CollectRequests(prometheus::Registry* r) const {
  // Every known opcode with every status is exported, zeros included, so an
  // alert on increase() sees the first error of a kind; an unknown opcode or
  // status appears once it has been counted.
  auto& requests =
      CounterFamily(r, "hz_requests_total", "Requests completed, by opcode and status.");
  for (size_t i = 0; i < kSlotsUsed; ++i) {
    for (uint32_t s = 0; s <= HZ_S_MAX; ++s) {
      uint64_t v = requests_[i][s].load(std::memory_order_relaxed);
      if (v == 0 && (i == 0 || s == HZ_S_MAX)) continue;
      SetCounter(requests, {{"opcode", SlotName(i)}, {"status", StatusName(s)}},
                 static_cast<double>(v));
    }
  }
  auto& bytes = CounterFamily(r, "hz_request_bytes_total",
                              "Payload bytes of completed data requests, by opcode.");
  for (size_t i = 1; i < kSlotsUsed; ++i) {
    uint16_t op = hz_opcode_names[i - 1].opcode;
    const uint64_t v = bytes_[i].load(std::memory_order_relaxed);
    if (v == 0 && ClassifyOpcode(op) != OpClass::kData) continue;
    SetCounter(bytes, {{"opcode", SlotName(i)}}, static_cast<double>(v));
  }
  AddCounter(r, "hz_requests_dropped_total",
             "Chains without room for a status, completed with used length 0.",
             static_cast<double>(dropped()));
}

void Metrics::CollectLatency(prometheus::Registry* r) const {
  auto& family = prometheus::BuildHistogram()
                     .Name("hz_request_duration_seconds")
                     .Help(
                         "Time from the device taking a request off its queue to completing "
                         "it, by opcode family.")
                     .Register(*r);
  const prometheus::Histogram::BucketBoundaries bounds(kLatencyBounds.begin(),
                                                       kLatencyBounds.end());
  for (size_t f = 0; f < kFamilies; ++f) {
    std::vector<double> counts;
    for (const auto& b : latency_[f]) counts.push_back(static_cast<double>(b.load()));
    const double sum = static_cast<double>(latency_sum_ns_[f].load()) / 1e9;
    family.Add({{"family", kFamilyNames[f]}}, bounds).ObserveMultiple(counts, sum);
  }
}

void Metrics::CollectTenants(const std::vector<std::string>& names, prometheus::Registry* r) const {
  auto& requests = CounterFamily(r, "hz_tenant_requests_total",
                                 "Requests the tenant's VMs made, by outcome (ok or error).");
  auto& bytes = CounterFamily(r, "hz_tenant_request_bytes_total",
                              "Payload bytes of the tenant's completed data requests.");
  const std::set<std::string> live(names.begin(), names.end());
  std::lock_guard<std::mutex> lock(tenants_mu_);
  std::erase_if(tenants_, [&](const auto& t) { return !live.contains(t.first); });
  for (const std::string& name : live) {
    auto& c = tenants_[name];
    if (!c) c = std::make_shared<TenantRequestCounters>();
    const uint64_t all = c->requests.load(), errors = c->errors.load();
    SetCounter(requests, {{"tenant", name}, {"outcome", "ok"}},
               static_cast<double>(all - std::min(all, errors)));
    SetCounter(requests, {{"tenant", name}, {"outcome", "error"}}, static_cast<double>(errors));
    SetCounter(bytes, {{"tenant", name}}, static_cast<double>(c->bytes.load()));
  }
}

void Metrics::CollectTurns(const MetricsSnapshot& snap, prometheus::Registry* r) {
  auto& seconds = CounterFamily(r, "hz_vdev_turn_seconds_total",
                                "Connection-thread time the tenant's VMs were charged for their "
                                "turns, over all connection threads; under contention tenants are "
                                "charged in proportion to their weights.");
  auto& turns = CounterFamily(r, "hz_vdev_turns_total",
                              "Turns the tenant's VMs ran on the connection threads.");
  for (const std::string& name : snap.tenant_names) {
    TenantTurns t;
    if (auto it = snap.tenant_turns.find(name); it != snap.tenant_turns.end()) t = it->second;
    SetCounter(seconds, {{"tenant", name}}, static_cast<double>(t.nanoseconds) / 1e9);
    SetCounter(turns, {{"tenant", name}}, static_cast<double>(t.turns));
  }
}

void Metrics::Collect(const MetricsSnapshot& snap, prometheus::Registry* r) const {
  CollectRequests(r);
  CollectLatency(r);
  CollectTenants(snap.tenant_names, r);
  CollectTurns(snap, r);
  AddGauge(r, "hz_vms_bound", "VM sockets bound to a tenant.", snap.vms_bound);
  AddGauge(r, "hz_vms_connected", "VM front-ends connected.", snap.vms_connected);
  AddGauge(r, "hz_tenants", "Tenants known to the service.", snap.tenants);
  AddGauge(r, "hz_regions", "Registered memory regions.", snap.regions);
  AddGauge(r, "hz_region_bytes", "Bytes of registered memory regions.", snap.region_bytes);
  AddGauge(r, "hz_device_communicators", "Communicator handles held by VMs.",
           snap.device_communicators);
  AddGauge(r, "hz_draining", "1 while the service is stopping.", snap.draining ? 1 : 0);
  if (snap.engine == nullptr) return;
  const BackendStats& e = *snap.engine;
  AddGauge(r, "hz_communicators", "Live communicators in the collective engine.", e.communicators);
  auto& algorithms = CounterFamily(r, "hz_collective_algorithm_total",
                                   "Collectives executed, by the algorithm the engine chose.");
  for (const auto& [name, v] : e.algorithms) SetCounter(algorithms, {{"algorithm", name}}, v);
  auto& ops = CounterFamily(r, "hz_collective_ops_total", "Collectives executed, by operation.");
  for (const auto& [name, v] : e.ops) SetCounter(ops, {{"op", name}}, v);
  auto& op_bytes = CounterFamily(r, "hz_collective_bytes_total",
                                 "Payload bytes of executed collectives, by operation.");
  for (const auto& [name, v] : e.op_bytes) SetCounter(op_bytes, {{"op", name}}, v);
  AddCounter(r, "hz_collective_streamed_total",
             "Collectives whose outputs were written with non-temporal stores "
             "([collectives] stream_min_bytes).",
             e.streamed);
  AddCounter(r, "hz_collective_worker_polls_total",
             "Times a collective worker polled for its next task before sleeping "
             "([collectives] worker_poll_us).",
             e.worker_polls);
  AddCounter(r, "hz_collective_worker_polled_tasks_total",
             "Tasks a collective worker took at the end of a poll, without a wake-up.",
             e.worker_polled_tasks);
  AddCounter(r, "hz_communicator_aborts_total", "Communicators aborted.", e.aborts);
  AddCounter(r, "hz_communicator_timeouts_total", "Communicators aborted by timeout.", e.timeouts);
  AddCounter(r, "hz_collective_mismatches_total", "Collectives whose ranks disagreed.",
             e.mismatches);
  auto& weights = GaugeFamily(r, "hz_coll_tenant_weight",
                              "The weight the collective engine gives the tenant's communicators "
                              "(hzctl tenant create --weight).");
  for (const auto& [tenant, w] : snap.coll_weights) SetGauge(weights, {{"tenant", tenant}}, w);
}

std::string Metrics::Format(const MetricsSnapshot& snap) const {
  prometheus::Registry r;
  Collect(snap, &r);
  return SerializeMetrics(r);
}

void CollectBuildInfo(prometheus::Registry* r) {
  SetGauge(GaugeFamily(r, "hz_build_info", "The harmonaized build; the value is always 1."),
           {{"version", HZ_PROJECT_VERSION}}, 1);
}

}  // namespace hz::service
