// hz status and hz topology.
#include <memory>
#include <sstream>

#include "cli.h"

namespace hz::cli {
namespace {

const char* kFeatureNames[] = {"collectives", "checkpoint", "events",      "negotiation",
                               "topology",    "hints",      "inline-data", "energy"};

const char* BwName(unsigned bw) {
  static const char* names[] = {"none", "low", "medium", "high", "ultra"};
  return bw < 5 ? names[bw] : "unknown";
}

using DevicePtr = std::unique_ptr<hz_device_t, decltype(&hz_close)>;

}  // namespace

int Status(const Options& o) {
  int code = kOk;
  DevicePtr dev(Open(o, &code), &hz_close);
  if (!dev) return code;
  struct hz_device_info info {};
  int err = hz_device_get_info(dev.get(), &info);
  if (err != HZ_OK) return Error(o, "device info", err);
  nlohmann::json features = nlohmann::json::array();
  for (unsigned i = 0; i < 64; ++i) {
    if ((info.features & (1ull << i)) == 0) continue;
    features.push_back(i < std::size(kFeatureNames) ? kFeatureNames[i] : "bit" + std::to_string(i));
  }
  std::string version =
      std::to_string(info.version_major) + "." + std::to_string(info.version_minor);
  nlohmann::json j = {{"transport", info.transport},
                      {"path", info.path},
                      {"version", version},
                      {"request_queues", info.num_request_queues},
                      {"features", features},
                      {"session_id", info.session_id},
                      {"max_regions", info.max_regions},
                      {"max_comm_ranks", info.max_comm_ranks}};
  std::ostringstream h;
  h << "device:          " << info.path << " (" << info.transport << ")\n"
    << "protocol:        " << version << "\n"
    << "session:         " << info.session_id << "\n"
    << "request queues:  " << info.num_request_queues << "\n"
    << "features:       ";
  for (const auto& f : features) h << " " << f.get<std::string>();
  h << "\nmax regions:     " << info.max_regions << "\nmax comm ranks:  " << info.max_comm_ranks
    << "\n";
  Print(o, j, h.str());
  return kOk;
}

int Topology(const Options& o) {
  int code = kOk;
  DevicePtr dev(Open(o, &code), &hz_close);
  if (!dev) return code;
  hz_topology* t = nullptr;
  if (int err = hz_topology_get(dev.get(), &t); err != HZ_OK) return Error(o, "topology", err);
  const hz_topo_header& hd = t->header;
  nlohmann::json groups = nlohmann::json::array(), devices = nlohmann::json::array();
  std::ostringstream h;
  h << hd.num_devices << " devices in " << hd.num_groups << " groups on " << hd.num_hosts
    << " hosts; across groups: " << BwName(hd.cross_group_bw)
    << ", across hosts: " << BwName(hd.cross_host_bw) << "\n";
  for (unsigned i = 0; i < hd.num_groups; ++i) {
    const hz_topo_group& g = t->groups[i];
    groups.push_back({{"group", g.group},
                      {"gpus", g.gpus},
                      {"nics", g.nics},
                      {"intra_bw", BwName(g.intra_bw)},
                      {"host", g.host}});
    h << "  group " << g.group << ": " << g.gpus << " GPUs, " << g.nics << " NICs, "
      << BwName(g.intra_bw) << " bandwidth, host " << unsigned{g.host} << "\n";
  }
  for (unsigned i = 0; i < hd.num_devices; ++i) {
    const hz_topo_device& d = t->devices[i];
    const char* kind = d.kind == HZ_DEV_GPU ? "gpu" : d.kind == HZ_DEV_NIC ? "nic" : "unknown";
    devices.push_back({{"index", d.index}, {"kind", kind}, {"group", d.group}});
    h << "  " << kind << " " << d.index << " in group " << d.group << "\n";
  }
  nlohmann::json j = {{"num_hosts", hd.num_hosts},
                      {"cross_group_bw", BwName(hd.cross_group_bw)},
                      {"cross_host_bw", BwName(hd.cross_host_bw)},
                      {"groups", groups},
                      {"devices", devices}};
  hz_topology_free(t);
  Print(o, j, h.str());
  return kOk;
}

}  // namespace hz::cli
