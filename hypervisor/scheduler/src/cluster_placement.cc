#include "hz/scheduler/cluster_placement.h"

#include <map>

#include "hz/scheduler/cluster.h"

namespace hz::scheduler {

using json = nlohmann::json;

namespace {

Status Bad(const std::string& host, const std::string& what) {
  return Status::InvalidArgument("placement record of host " + host + ": " + what);
}

// An integer field in [lo, hi], or `def` when absent.
bool IntField(const json& j, const char* key, int lo, int hi, int def, int* out) {
  auto it = j.find(key);
  if (it == j.end()) {
    *out = def;
    return true;
  }
  if (!it->is_number_integer()) return false;
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

json DeviceJson(const Device& d, bool free) {
  json j = {{"bdf", d.bdf}, {"kind", KindName(d.kind)}, {"free", free}};
  if (d.numa_node >= 0) j["numa"] = d.numa_node;
  if (!d.switch_bdf.empty()) j["switch"] = d.switch_bdf;
  if (d.island >= 0) j["island"] = d.island;
  if (d.rail >= 0) j["rail"] = d.rail;
  return j;
}

Status ParseDevice(const std::string& host, const json& j, Device* d, bool* free) {
  if (!j.is_object()) return Bad(host, "a device is not an object");
  auto bdf = j.find("bdf");
  if (bdf == j.end() || !bdf->is_string() || !IsBdf(bdf->get<std::string>())) {
    return Bad(host, "a device has no PCI address");
  }
  d->bdf = bdf->get<std::string>();
  const json kind = j.value("kind", json());
  if (kind == "gpu" || kind == "nic") {
    d->kind = kind == "gpu" ? DeviceKind::kGpu : DeviceKind::kNic;
  } else {
    return Bad(host, "device " + d->bdf + ": kind must be gpu or nic");
  }
  auto sw = j.find("switch");
  if (sw != j.end()) {
    if (!sw->is_string() || !IsBdf(sw->get<std::string>())) {
      return Bad(host, "device " + d->bdf + ": switch must be a PCI address");
    }
    d->switch_bdf = sw->get<std::string>();
  }
  if (!IntField(j, "numa", 0, 1023, -1, &d->numa_node) ||
      !IntField(j, "island", 0, 1023, -1, &d->island) ||
      !IntField(j, "rail", 0, 1023, -1, &d->rail)) {
    return Bad(host, "device " + d->bdf + ": numa, island and rail must be small integers");
  }
  if (d->island >= 0 && d->kind != DeviceKind::kGpu) {
    return Bad(host, "device " + d->bdf + ": only GPUs are in NVLink islands");
  }
  auto f = j.find("free");
  if (f == j.end() || !f->is_boolean()) return Bad(host, "device " + d->bdf + ": free must be set");
  *free = f->get<bool>();
  return Status::Ok();
}

}  // namespace

json PlacementRecordJson(const PlacementRecord& r) {
  json devices = json::array();
  for (size_t i = 0; i < r.host.devices.size(); ++i) {
    devices.push_back(DeviceJson(r.host.devices[i], i < r.free.size() && r.free[i]));
  }
  json out = {{"devices", std::move(devices)}, {"cordoned", r.cordoned}};
  if (!r.any_tenant) out["tenants"] = r.tenants;
  return out;
}

StatusOr<PlacementRecord> ParsePlacementRecord(const std::string& host, const json& j) {
  if (!j.is_object()) return Bad(host, "not an object");
  auto devices = j.find("devices");
  if (devices == j.end() || !devices->is_array()) return Bad(host, "no device list");
  if (devices->size() > kMaxPlacementDevices) return Bad(host, "too many devices");
  PlacementRecord r;
  r.host.name = host;
  std::map<std::string, std::pair<Device, bool>> by_bdf;  // an inventory is in bdf order
  for (const json& dj : *devices) {
    Device d;
    bool free = false;
    if (Status s = ParseDevice(host, dj, &d, &free); !s.ok()) return s;
    const std::string bdf = d.bdf;
    if (!by_bdf.emplace(bdf, std::pair{std::move(d), free}).second) {
      return Bad(host, "device " + bdf + " is listed twice");
    }
  }
  for (auto& [bdf, device] : by_bdf) {
    r.host.devices.push_back(std::move(device.first));
    r.free.push_back(device.second);
  }
  auto cordoned = j.find("cordoned");
  if (cordoned == j.end() || !cordoned->is_boolean()) return Bad(host, "cordoned must be set");
  r.cordoned = cordoned->get<bool>();
  if (auto tenants = j.find("tenants"); tenants != j.end()) {
    if (!tenants->is_array()) return Bad(host, "tenants must be a list of names");
    r.any_tenant = false;
    for (const json& t : *tenants) {
      if (!t.is_string()) return Bad(host, "tenants must be a list of names");
      r.tenants.insert(t.get<std::string>());
    }
  }
  return r;
}

StatusOr<std::vector<HostPart>> PlanAcrossHosts(const std::vector<PlacementRecord>& hosts,
                                                const std::string& tenant, const Request& request) {
  // A model of the hosts that may take part, each device not free marked
  // failed: the Allocator then places among the free ones exactly as it
  // does on one host.
  std::vector<HostInventory> model;
  std::vector<const PlacementRecord*> taking;
  for (const PlacementRecord& r : hosts) {
    if (r.cordoned || (!r.any_tenant && r.tenants.count(tenant) == 0)) continue;
    model.push_back(r.host);
    taking.push_back(&r);
  }
  const Cluster cluster(std::move(model));
  Allocator allocator(&cluster);
  for (uint32_t h = 0; h < taking.size(); ++h) {
    for (uint32_t i = 0; i < taking[h]->host.devices.size(); ++i) {
      if (!taking[h]->free[i]) allocator.SetFailed({h, i}, true);
    }
  }
  std::vector<DeviceRef> devices;
  if (!allocator.Place(request, &devices)) {
    return Status::Limit("the free devices of the cluster's hosts cannot hold " +
                         std::to_string(request.gpus) + " GPU(s) and " +
                         std::to_string(request.nics) + " NIC(s) for tenant " + tenant);
  }
  std::map<uint32_t, Request> parts;  // by model host, in the callers' order
  for (DeviceRef d : devices) {
    Request& part = parts[d.host];
    part.locality = request.locality;
    (cluster.device(d).kind == DeviceKind::kGpu ? part.gpus : part.nics) += 1;
  }
  std::vector<HostPart> out;
  for (const auto& [h, part] : parts) out.push_back({taking[h]->host.name, part});
  return out;
}

}  // namespace hz::scheduler
