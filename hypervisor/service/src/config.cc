#include "hz/service/config.h"

#include <arpa/inet.h>
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <vector>

#include <toml++/toml.h>

#include "hz/cluster/redis_lease_store.h"
#include "hz/common/thread_priority.h"
#include "protocol/harmonaize.h"
#include "spdlog/fmt/fmt.h"
#include "toml_table_reader.h"

namespace hz::service {

namespace {

constexpr uint64_t kU32 = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kI64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

void ReadControl(TableReader& r, ServiceConfig* c) {
  r.String("socket", &c->control_socket);
  r.Int("max_line_bytes", &c->control_max_line_bytes, 256, 16u << 20);
  r.Int("max_clients", &c->control_max_clients, 1, 4096);
  r.String("socket_owner", &c->control_socket_owner);
  r.String("socket_group", &c->control_socket_group);
}

void ReadVm(TableReader& r, ServiceConfig* c) {
  r.String("socket_dir", &c->vm_socket_dir);
  r.Mode("socket_mode", &c->vm_socket_mode);
  r.String("socket_owner", &c->vm_socket_owner);
  r.String("socket_group", &c->vm_socket_group);
}

void ReadMetrics(TableReader& r, ServiceConfig* c) {
  r.Bool("enabled", &c->metrics_enabled);
  r.String("address", &c->metrics_address);
  r.Int("port", &c->metrics_port, 0, 65535);
  r.Int("max_connections", &c->metrics_max_connections, 1, 65536);
}

void ReadDevice(TableReader& r, ServiceConfig* c) {
  DeviceLimits& d = c->device;
  r.Int("num_request_queues", &d.num_request_queues, 1, HZ_MAX_REQUEST_QUEUES);
  r.Int("queue_size", &d.queue_size, 2, 32768);
  r.Int("max_segments", &d.max_segments, 2, 1024);
  r.Int("max_regions", &d.max_regions, 1, 1u << 20);
  r.Int("max_extents", &d.max_extents, 1, 1u << 20);
  r.Int("max_device_extents", &d.max_device_extents, 1, 1u << 24);
  r.Int("max_region_bytes", &d.max_region_bytes, 1, kI64);
  r.Int("max_args_bytes", &d.max_args_bytes, 4096, 64u << 20);
  r.Int("max_comm_ranks", &d.max_comm_ranks, 1, 1u << 16);
  r.Int("max_comms", &d.max_comms, 1, 1u << 16);
  r.Bool("require_sealed_memory", &d.require_sealed_memory);
  r.Int("min_connect_interval_ms", &d.min_connect_interval_ms, 0, 60000);
  r.Int("chains_per_turn", &d.chains_per_turn, 1, 65536);
  r.Int("turn_time_us", &d.turn_time_us, 0, 1000000);
  r.Int("low_latency_poll_us", &d.low_latency_poll_us, 0, kMaxPollUs);
}

void ReadTenantDefaults(TableReader& r, ServiceConfig* c) {
  r.Int("max_regions", &c->tenant_defaults.max_regions, 0, kU32);
  r.Int("max_region_bytes", &c->tenant_defaults.max_region_bytes, 0, kI64);
  r.Int("max_extents", &c->tenant_defaults.max_extents, 0, kU32);
}

void ReadCheckpoint(TableReader& r, ServiceConfig* c) {
  // At least two 4 MiB chunks; at most 64 GiB of host memory.
  r.Int("staging_bytes", &c->ckpt_staging_bytes, 8u << 20, 64ull << 30);
  r.Int("disk_bandwidth_bytes_per_s", &c->ckpt_disk_bandwidth_bytes_per_s, 0, kI64);
  r.Int("max_stall_budget_ms", &c->ckpt_max_stall_budget_ms, 0, 3600000);
  r.Int("jit_max_attempts", &c->ckpt_jit_max_attempts, 1, 1000000);
  r.Int("tenant_staging_bytes", &c->ckpt_tenant_staging_bytes, 0, 64ull << 30);
  r.Int("tenant_disk_bytes", &c->ckpt_tenant_disk_bytes, 1, kI64);
  r.Int("quiesce_bytes", &c->ckpt_quiesce_bytes, 0, 64ull << 30);
  r.Int("disk_bytes", &c->ckpt_disk_bytes, 0, kI64);
  r.Int("request_threads", &c->ckpt_request_threads, 1, 64);
  r.Int("tenant_request_threads", &c->ckpt_tenant_request_threads, 1, 64);
  r.Nice("thread_nice", &c->ckpt_thread_nice);
}

void ReadCollectives(TableReader& r, ServiceConfig* c) {
  r.Int("unused_uid_lifetime_s", &c->coll_unused_uid_lifetime_s, 60, 7 * 86400);
  r.Int("worker_threads", &c->coll_worker_threads, 0, 256);
  r.Nice("worker_nice", &c->coll_worker_nice);
  r.Int("worker_poll_us", &c->coll_worker_poll_us, 0, kMaxPollUs);
  r.Int("stream_min_bytes", &c->coll_stream_min_bytes, 0, kI64);
  r.Int("single_thread_max_bytes", &c->coll_single_thread_max_bytes, 0, kI64);
}

void ReadConditions(TableReader& r, ServiceConfig* c) {
  r.Int("poll_ms", &c->conditions.poll_ms, 100, 60000);
  r.Int("congestion_window_s", &c->conditions.congestion_window_s, 10, 3600);
  r.Int("congestion_hysteresis_s", &c->conditions.congestion_hysteresis_s, 10, 3600);
}

void ReadMaintenance(TableReader& r, ServiceConfig* c) {
  r.String("hook", &c->maintenance_hook);
  r.Int("hook_timeout_s", &c->maintenance_hook_timeout_s, 1, 86400);
}

void ReadScheduler(TableReader& r, ServiceConfig* c) {
  SchedulerConfig& s = c->scheduler;
  r.Bool("enabled", &s.enabled);
  r.String("sysfs_root", &s.sysfs_root);
  r.String("provider_file", &s.provider_file);
  r.String("libvirt_uri", &s.libvirt_uri);
  r.String("state_file", &s.state_file);
  r.Bool("bind_vfio", &s.bind_vfio);
  r.Bool("hostdev_managed", &s.hostdev_managed);
  r.Bool("sync", &s.sync);
  r.Int("health_poll_ms", &s.health_poll_ms, 0, 3600 * 1000);
}

void ReadNegotiation(TableReader& r, ServiceConfig* c) {
  NegotiationConfig& n = c->negotiation;
  r.Int("window_s", &n.window_s, 10, 7 * 86400);
  r.Int("offer_ttl_s", &n.offer_ttl_s, 10, 86400);
  r.Int("max_lookahead_s", &n.max_lookahead_s, 1, 365 * 86400);
  r.Int("max_duration_s", &n.max_duration_s, 1, 365 * 86400);
  r.Int("max_open_per_tenant", &n.max_open_per_tenant, 1, kMaxOpenNegotiations);
  r.Int("decide_budget", &n.decide_budget, 1024, uint64_t{1} << 30);
  r.Int("decide_interval_ms", &n.decide_interval_ms, 10, 1000);
  r.Int("preemption_notice_s", &n.preemption_notice_s, 30, 86400);
}

void ReadCluster(TableReader& r, ServiceConfig* c) {
  ClusterConfig& k = c->cluster;
  k.enabled = true;
  r.String("store", &k.store);
  r.String("host_name", &k.host_name);
  r.String("data_address", &k.data_address);
  r.Int("lease_ms", &k.lease_ms, 300, 60000);
  r.String("key_prefix", &k.key_prefix);
  r.Int("command_timeout_ms", &k.command_timeout_ms, 1000, 120000);
}

void ReadShutdown(TableReader& r, ServiceConfig* c) {
  r.Int("timeout_ms", &c->shutdown_timeout_ms, 1, 3600 * 1000);
}

// The file's [sections], in the order they are read (the first error wins).
struct Section {
  const char* name;
  void (*read)(TableReader& r, ServiceConfig* c);
};
constexpr Section kSections[] = {
    {"control", ReadControl},
    {"vm", ReadVm},
    {"metrics", ReadMetrics},
    {"device", ReadDevice},
    {"tenant_defaults", ReadTenantDefaults},
    {"checkpoint", ReadCheckpoint},
    {"collectives", ReadCollectives},
    {"conditions", ReadConditions},
    {"maintenance", ReadMaintenance},
    {"scheduler", ReadScheduler},
    {"negotiation", ReadNegotiation},
    {"cluster", ReadCluster},
    {"shutdown", ReadShutdown},
};

}  // namespace

std::string ClusterConfig::HostName() const {
  if (!host_name.empty()) return host_name;
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return {};
  return buf;
}

std::string ServiceConfig::ControlSocketPath() const {
  return control_socket.empty() ? state_dir + "/control.sock" : control_socket;
}

std::string ServiceConfig::SchedulerStatePath() const {
  const std::string& f = scheduler.state_file;
  return !f.empty() && f[0] == '/' ? f : state_dir + "/" + f;
}

std::string ServiceConfig::VmSocketDir() const {
  return vm_socket_dir.empty() ? state_dir + "/vms" : vm_socket_dir;
}

bool ParseConfig(std::string_view text, std::string_view origin, ServiceConfig* config,
                 std::string* error) {
  error->clear();
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    *error = fmt::format("{}:{}:{}: {}", origin, src.begin.line, src.begin.column,
                         std::string(e.description()));
    return false;
  }
  ServiceConfig c = *config;
  TableReader top(root, "", origin, error);
  top.String("state_dir", &c.state_dir);
  top.String("log_level", &c.log_level,
             {"trace", "debug", "info", "warn", "error", "critical", "off"});
  top.String("log_format", &c.log_format, {"text", "json"});
  top.Int("worker_threads", &c.worker_threads, 1, 256);
  top.Int("connection_poll_us", &c.connection_poll_us, 0, kMaxPollUs);
  top.Nice("region_thread_nice", &c.region_thread_nice);
  top.Bool("bulk_idle_class", &c.bulk_idle_class);
  top.Int("bulk_idle_window_ms", &c.bulk_idle_window_ms, 10, 1000);
  top.Bool("fd_store", &c.fd_store);
  for (const Section& section : kSections) {
    if (const toml::table* t = top.Table(section.name)) {
      TableReader r(*t, std::string(section.name) + ".", origin, error);
      section.read(r, &c);
      r.RejectUnknown();
    }
  }
  top.RejectUnknown();
  if (!error->empty()) return false;
  *config = std::move(c);
  return true;
}

bool LoadConfigFile(const std::string& path, ServiceConfig* config, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = fmt::format("{}: cannot open the config file", path);
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    *error = fmt::format("{}: read error", path);
    return false;
  }
  return ParseConfig(ss.str(), path, config, error);
}

bool LookupUser(const std::string& name, uint32_t* uid) {
  passwd entry;
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwnam_r(name.c_str(), &entry, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return false;
  }
  *uid = found->pw_uid;
  return true;
}

bool LookupGroup(const std::string& name, uint32_t* gid) {
  group entry;
  group* found = nullptr;
  std::vector<char> buf(16384);
  if (getgrnam_r(name.c_str(), &entry, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
    return false;
  }
  *gid = found->gr_gid;
  return true;
}

namespace {

bool ValidateCheckpoint(const ServiceConfig& c, std::string* error) {
  if (c.ckpt_tenant_request_threads > c.ckpt_request_threads) {
    *error = fmt::format("checkpoint.tenant_request_threads ({}) exceeds request_threads ({})",
                         c.ckpt_tenant_request_threads, c.ckpt_request_threads);
    return false;
  }
  if (c.ckpt_quiesce_bytes > c.ckpt_staging_bytes ||
      c.ckpt_tenant_staging_bytes > c.ckpt_staging_bytes) {
    *error = "checkpoint.quiesce_bytes and tenant_staging_bytes must not exceed staging_bytes";
    return false;
  }
  return true;
}

bool ValidHostName(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (char ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '.' && ch != '_') {
      return false;
    }
  }
  return true;
}

bool ValidateCluster(const ClusterConfig& k, std::string* error) {
  if (!k.enabled) return true;
  if (hz::StatusOr<cluster::RedisAddress> a = cluster::RedisAddress::Parse(k.store); !a.ok()) {
    *error = fmt::format("cluster.store \"{}\": {}", k.store, a.status().message());
    return false;
  }
  if (!k.host_name.empty() && !ValidHostName(k.host_name)) {
    *error = fmt::format("cluster.host_name \"{}\": 1 to 63 letters, digits, '-', '.' or '_'",
                         k.host_name);
    return false;
  }
  in6_addr addr;
  if (inet_pton(AF_INET, k.data_address.c_str(), &addr) != 1 &&
      inet_pton(AF_INET6, k.data_address.c_str(), &addr) != 1) {
    *error = fmt::format("cluster.data_address \"{}\": expected an IPv4 or IPv6 address",
                         k.data_address);
    return false;
  }
  if (k.key_prefix.size() > 64) {
    *error = "cluster.key_prefix: at most 64 bytes";
    return false;
  }
  return true;
}

}  // namespace

bool ValidateConfig(const ServiceConfig& c, std::string* error) {
  for (const auto& [key, name] :
       {std::pair<const char*, const std::string&>{"control.socket_group", c.control_socket_group},
        {"vm.socket_group", c.vm_socket_group}}) {
    uint32_t gid;
    if (!name.empty() && !LookupGroup(name, &gid)) {
      *error = fmt::format("{}: no group named {}", key, name);
      return false;
    }
  }
  for (const auto& [key, name] :
       {std::pair<const char*, const std::string&>{"control.socket_owner", c.control_socket_owner},
        {"vm.socket_owner", c.vm_socket_owner}}) {
    uint32_t uid;
    if (!name.empty() && !LookupUser(name, &uid)) {
      *error = fmt::format("{}: no user named {}", key, name);
      return false;
    }
  }
  if (c.state_dir.empty()) {
    *error = "state_dir must not be empty";
    return false;
  }
  // sockaddr_un holds 107 path bytes plus the NUL.
  if (c.ControlSocketPath().size() > 107) {
    *error = fmt::format("control socket path is longer than 107 bytes: {}", c.ControlSocketPath());
    return false;
  }
  if (c.negotiation.window_s % 10 != 0) {
    *error =
        fmt::format("negotiation.window_s ({}) must be a multiple of 10", c.negotiation.window_s);
    return false;
  }
  if (c.scheduler.enabled && (c.scheduler.sysfs_root.empty() || c.scheduler.state_file.empty())) {
    *error = "scheduler.sysfs_root and scheduler.state_file must not be empty";
    return false;
  }
  if (c.scheduler.hostdev_managed && (c.scheduler.libvirt_uri.empty() || c.scheduler.bind_vfio)) {
    *error =
        "scheduler.hostdev_managed has libvirt bind the devices: it needs scheduler.libvirt_uri "
        "and scheduler.bind_vfio = false";
    return false;
  }
  if (c.device.max_extents * sizeof(hz_extent) + sizeof(hz_req_hdr) +
          sizeof(hz_region_register_args) >
      c.device.max_args_bytes) {
    *error = fmt::format(
        "device.max_args_bytes ({}) cannot hold a REGION_REGISTER with device.max_extents ({})",
        c.device.max_args_bytes, c.device.max_extents);
    return false;
  }
  if (c.device.max_device_extents < c.device.max_extents) {
    *error = fmt::format(
        "device.max_device_extents ({}) is below device.max_extents ({}): a region of "
        "max_extents extents could never be registered",
        c.device.max_device_extents, c.device.max_extents);
    return false;
  }
  return ValidateCheckpoint(c, error) && ValidateCluster(c.cluster, error);
}

}  // namespace hz::service
