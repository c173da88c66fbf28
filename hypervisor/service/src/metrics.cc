#include "hz/service/metrics.h"

#include "hz/service/request.h"
#include "protocol/harmonaize_opcodes.h"
#include "spdlog/fmt/fmt.h"

namespace hz::service {

namespace {

// Slot 0 counts unknown opcodes; slot i > 0 counts hz_opcode_names[i - 1].
constexpr size_t kSlotsUsed = HZ_NUM_OPCODES + 1;
static_assert(kSlotsUsed <= Metrics::kOpcodeSlots);

const char* SlotName(size_t slot) {
  return slot == 0 ? "UNKNOWN" : hz_opcode_names[slot - 1].name;
}

void Header(std::string* out, const char* name, const char* type, const char* help) {
  *out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// Label values here are fixed identifiers, but escape anyway so a future
// free-form value can never break the exposition format.
std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

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

uint64_t Metrics::requests(uint16_t opcode, uint32_t status) const {
  if (status > HZ_S_MAX) status = HZ_S_MAX;
  return requests_[Slot(opcode)][status].load(std::memory_order_relaxed);
}

uint64_t Metrics::bytes(uint16_t opcode) const {
  return bytes_[Slot(opcode)].load(std::memory_order_relaxed);
}

std::string Metrics::Format(const MetricsSnapshot& snap) const {
  std::string out;
  Header(&out, "hz_requests_total", "counter", "Requests completed, by opcode and status.");
  for (size_t i = 0; i < kSlotsUsed; ++i) {
    for (uint32_t s = 0; s <= HZ_S_MAX; ++s) {
      uint64_t v = requests_[i][s].load(std::memory_order_relaxed);
      if (v == 0) continue;
      out += fmt::format("hz_requests_total{{opcode=\"{}\",status=\"{}\"}} {}\n", SlotName(i),
                         StatusName(s), v);
    }
  }
  Header(&out, "hz_request_bytes_total", "counter",
         "Payload bytes of completed data requests, by opcode.");
  for (size_t i = 1; i < kSlotsUsed; ++i) {
    uint64_t v = bytes_[i].load(std::memory_order_relaxed);
    if (v == 0) continue;
    out += fmt::format("hz_request_bytes_total{{opcode=\"{}\"}} {}\n", SlotName(i), v);
  }
  Header(&out, "hz_requests_dropped_total", "counter",
         "Chains without room for a status, completed with used length 0.");
  out += fmt::format("hz_requests_dropped_total {}\n", dropped());

  Header(&out, "hz_vms_bound", "gauge", "VM sockets bound to a tenant.");
  out += fmt::format("hz_vms_bound {}\n", snap.vms_bound);
  Header(&out, "hz_vms_connected", "gauge", "VM front-ends connected.");
  out += fmt::format("hz_vms_connected {}\n", snap.vms_connected);
  Header(&out, "hz_tenants", "gauge", "Tenants known to the service.");
  out += fmt::format("hz_tenants {}\n", snap.tenants);
  Header(&out, "hz_regions", "gauge", "Registered memory regions.");
  out += fmt::format("hz_regions {}\n", snap.regions);
  Header(&out, "hz_region_bytes", "gauge", "Bytes of registered memory regions.");
  out += fmt::format("hz_region_bytes {}\n", snap.region_bytes);
  Header(&out, "hz_device_communicators", "gauge", "Communicator handles held by VMs.");
  out += fmt::format("hz_device_communicators {}\n", snap.device_communicators);
  Header(&out, "hz_draining", "gauge", "1 while the service is stopping.");
  out += fmt::format("hz_draining {}\n", snap.draining ? 1 : 0);

  if (snap.engine != nullptr) {
    const BackendStats& e = *snap.engine;
    Header(&out, "hz_communicators", "gauge", "Live communicators in the collective engine.");
    out += fmt::format("hz_communicators {}\n", e.communicators);
    Header(&out, "hz_collective_algorithm_total", "counter",
           "Collectives executed, by the algorithm the engine chose.");
    for (const auto& [name, v] : e.algorithms) {
      out += fmt::format("hz_collective_algorithm_total{{algorithm=\"{}\"}} {}\n", Escape(name), v);
    }
    Header(&out, "hz_collective_ops_total", "counter", "Collectives executed, by operation.");
    for (const auto& [name, v] : e.ops) {
      out += fmt::format("hz_collective_ops_total{{op=\"{}\"}} {}\n", Escape(name), v);
    }
    Header(&out, "hz_collective_bytes_total", "counter",
           "Payload bytes of executed collectives, by operation.");
    for (const auto& [name, v] : e.op_bytes) {
      out += fmt::format("hz_collective_bytes_total{{op=\"{}\"}} {}\n", Escape(name), v);
    }
    Header(&out, "hz_communicator_aborts_total", "counter", "Communicators aborted.");
    out += fmt::format("hz_communicator_aborts_total {}\n", e.aborts);
    Header(&out, "hz_communicator_timeouts_total", "counter", "Communicators aborted by timeout.");
    out += fmt::format("hz_communicator_timeouts_total {}\n", e.timeouts);
    Header(&out, "hz_collective_mismatches_total", "counter", "Collectives whose ranks disagreed.");
    out += fmt::format("hz_collective_mismatches_total {}\n", e.mismatches);
    Header(&out, "hz_coll_tenant_weight", "gauge",
           "The weight the collective engine gives the tenant's communicators (hzctl tenant "
           "create --weight).");
    for (const auto& [tenant, w] : snap.coll_weights) {
      out += fmt::format("hz_coll_tenant_weight{{tenant=\"{}\"}} {}\n", Escape(tenant), w);
    }
  }
  return out;
}

}  // namespace hz::service
