// harmonaized's configuration: built-in defaults that need no file at all,
// optionally overridden by a TOML file and then by the command line.
#ifndef HZ_SERVICE_CONFIG_H_
#define HZ_SERVICE_CONFIG_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hz::service {

// The longest polling window any key may set: 100 ms of a thread's CPU.
inline constexpr uint32_t kMaxPollUs = 100000;

// What one VM's device offers and accepts (config space, HELLO result).
struct DeviceLimits {
  uint16_t num_request_queues = 4;  // queues 2.. ; at most HZ_MAX_REQUEST_QUEUES
  uint16_t queue_size = 256;        // largest ring the device accepts
  uint16_t max_segments = 64;       // descriptors per chain
  uint32_t max_regions = 256;       // live regions per device
  uint32_t max_extents = 4096;      // extents per region
  // Extents of all live regions together. Each costs the service about 70
  // bytes of memory (index entry, copy, translation), so this bounds what one
  // VM's regions can hold of it.
  uint32_t max_device_extents = 16384;
  uint64_t max_region_bytes = 64ull << 30;  // bytes per region
  uint32_t max_args_bytes = 1u << 20;       // readable header + args + data
  uint32_t max_comm_ranks = 64;             // ranks per communicator
  uint32_t max_comms = 64;                  // live communicators per device
  // Guest memory fds must be sealed against shrinking. A front-end that
  // shrinks a mapped file would otherwise crash the service with SIGBUS.
  // QEMU's memory-backend-memfd and libharmonaize's arena are sealed; turn
  // this off only for trusted VMs on file-backed (hugetlbfs) memory.
  bool require_sealed_memory = true;
  // A VM socket takes on a new connection at most once per this interval
  // (later ones wait): a VM reconnecting in a loop would otherwise take the
  // connection thread it shares with other VMs. 0: no pacing.
  uint32_t min_connect_interval_ms = 50;
  // Requests one kick of a ring serves before the rest wait behind the
  // other work of its connection thread (other VMs' kicks among it).
  uint32_t chains_per_turn = 4;
  // Microseconds one kick's turn may run before the rest of its requests
  // wait for a later turn: with requests that each cost much, the count
  // above would let one VM hold the thread that much longer. 0: no bound.
  uint32_t turn_time_us = 50;
  // A communicator created with HZ_COMM_F_LOW_LATENCY (SPEC §7.3.2) keeps its
  // device's connection thread polling this long after each of its
  // operations is posted or completed, instead of sleeping: a rank's next
  // small collective then needs no wake-up. It costs the thread's CPU while
  // it polls, and stops by itself once the communicator goes quiet. A
  // tenant's latency_poll_us replaces it; 0: the flag has no effect.
  uint32_t low_latency_poll_us = 200;
};

// Per-tenant quotas, summed over all VMs bound to the tenant. A tenant created
// without explicit limits gets these.
struct TenantLimits {
  uint32_t max_regions = 1024;
  uint64_t max_region_bytes = 256ull << 30;  // total registered bytes
  uint32_t max_extents = 65536;              // extents of all registered regions
};

// [scheduler]: the provider scheduler (inventory, allocation, vfio, libvirt
// attach, device health). The defaults need no GPU: a host without any has an
// empty inventory, and every request for devices is simply refused.
struct SchedulerConfig {
  bool enabled = true;
  std::string sysfs_root = "/sys";
  std::string provider_file;                  // optional provider inventory (TOML)
  std::string libvirt_uri;                    // empty: devices are not attached to VMs
  std::string state_file = "scheduler.json";  // relative paths are under state_dir
  bool bind_vfio = true;                      // bind allocated devices to vfio-pci
  bool hostdev_managed = false;    // libvirt binds them instead (managed='yes'; needs libvirt_uri)
  bool sync = true;                // fsync the state file on every change
  uint32_t health_poll_ms = 5000;  // AER counters of assigned devices; 0: off
};

// The most open negotiations one tenant may be allowed, by
// [negotiation] max_open_per_tenant or by its own limit.
inline constexpr uint32_t kMaxOpenNegotiations = 1u << 16;

// [negotiation]: reservation windows, offers and the decision point.
struct NegotiationConfig {
  uint64_t window_s = 60;  // a multiple of 10
  uint64_t offer_ttl_s = 30;
  uint64_t max_lookahead_s = 7 * 86400;
  uint64_t max_duration_s = 86400;
  uint32_t max_open_per_tenant = 64;  // open negotiations per tenant (NEG_REQUEST: ELIMIT)
  // Window steps one decision point may spend on queued requests, shared
  // equally by the tenants with requests queued (a tenant's requests past
  // its share wait for the next decision point). Bounds how long a decision
  // point keeps the control thread.
  uint64_t decide_budget = uint64_t{1} << 21;
  // How often queued requests are decided and reservations start or end
  // (SPEC §9.3 asks for at least once a second).
  uint32_t decide_interval_ms = 1000;
  // A reservation's holder gets PREEMPTION/SCHEDULED this long before its
  // end (SPEC §9.6 asks for at least 30 s).
  uint64_t preemption_notice_s = 120;
};

// [cluster]: this host as one of several (membership through the cluster
// store). Without the section the service runs on its own, as a single host.
struct ClusterConfig {
  bool enabled = false;      // the file has a [cluster] section
  std::string store;         // Redis: "host:port" or "unix:/path" (required)
  std::string host_name;     // unique in the cluster; empty: the system's host name
  std::string data_address;  // this host's IP address on the data network (required)
  // A host that stops renewing its lease (it died, or lost the store) is
  // dropped by the others within about lease_ms and a third of it.
  uint32_t lease_ms = 3000;
  // Prefix of every key the service writes: several clusters may share a store.
  std::string key_prefix = "harmonaize/";
  // The longest wait for another host to run an operator command
  // (hz/cluster/host_commands.h): a part of a spread allocation, another
  // host's maintenance.
  uint32_t command_timeout_ms = 10000;

  // host_name, or the system's host name when it is empty.
  std::string HostName() const;
  // How long one call to the store may take before the store counts as
  // unreachable: a quarter lease, so that a round (renew and list) ends well
  // within the lease it renews.
  std::chrono::milliseconds StoreTimeout() const {
    return std::chrono::milliseconds(lease_ms / 4 > 50 ? lease_ms / 4 : 50);
  }
};

struct ServiceConfig {
  std::string state_dir = "/var/lib/harmonaize";
  std::string control_socket;  // empty: <state_dir>/control.sock
  std::string vm_socket_dir;   // empty: <state_dir>/vms
  uint32_t control_max_line_bytes = 64 * 1024;
  uint32_t control_max_clients = 32;
  // Connecting to a Unix socket needs write permission on it. The control
  // socket is 0600, or 0660 owned by this group when one is named; its user
  // is the service's unless one is named.
  std::string control_socket_owner;
  std::string control_socket_group;
  // A VM socket is its tenant's identity: whoever may connect to it acts as
  // that tenant. Mode (owner read and write at least), user and group
  // (empty: the service's own) of every VM socket: e.g. libvirt-qemu, the
  // user QEMU runs as under libvirt.
  uint32_t vm_socket_mode = 0660;
  std::string vm_socket_owner;
  std::string vm_socket_group;

  bool metrics_enabled = true;
  std::string metrics_address = "127.0.0.1";
  uint16_t metrics_port = 9464;  // 0: pick a free port (tests)
  // Open metrics connections; more are closed at once, so that clients of
  // the metrics port cannot take all of the process's descriptors.
  uint32_t metrics_max_connections = 64;

  uint32_t worker_threads = 2;  // vhost-user connection executors
  // After handling anything, a connection thread keeps checking for more
  // (without sleeping) for this long before it blocks: a rank's next request
  // then needs no wake-up. 0: block at once. 50 us covers a rank's turn-around
  // between a barrier and its collective (service_allreduce_bench, p=2 1 MiB:
  // 8.1-9.1 GB/s against 5.8-8.3 without) at a small cost to ranks that share
  // the CPUs (p=8 on 2 CPUs: unchanged).
  uint32_t connection_poll_us = 50;
  // Nice value of the thread that prepares every VM's region registrations.
  // A registration is a VM's setup, never on another tenant's path: at 19
  // it takes only CPU the request-serving threads leave (noisy_neighbour_bench
  // region_max, another tenant's TOPOLOGY_GET p99: 1.1-1.8x its unloaded
  // value at 19, 2.8-3.1x at 10). Each bulk thread's nice value may also be
  // "idle" in the file, kIdleClassNice here: the kernel's idle class.
  uint32_t region_thread_nice = 19;
  // Bulk threads with a nice value (the three above and below) wait in the
  // kernel's idle class and take their nice value only while they starve:
  // runnable for most of a window of bulk_idle_window_ms while getting almost
  // none of a CPU, then for 20 windows (idle_class_guard.h). Needs
  // CAP_SYS_NICE or an RLIMIT_NICE that allows the nice values (the unit
  // sets LimitNICE=+10); without, or when false, they run at their values.
  bool bulk_idle_class = true;
  uint32_t bulk_idle_window_ms = 50;
  std::string log_level = "info";
  std::string log_format = "text";  // text (key=value) or json

  uint32_t shutdown_timeout_ms = 10000;  // longest wait for in-flight work
  // Survive a crash under systemd: keep every VM's connection, memory and
  // rings, with a journal of each session, in the unit's fd store (the unit
  // needs FileDescriptorStoreMax=), and serve them on after the restart.
  bool fd_store = false;

  DeviceLimits device;
  TenantLimits tenant_defaults;

  // [checkpoint]: the staging pool every save is copied into, and the disk
  // bandwidth persists share (0: unthrottled).
  uint64_t ckpt_staging_bytes = 256ull << 20;
  uint64_t ckpt_disk_bandwidth_bytes_per_s = 0;
  // The longest a save may wait for staging memory, whatever stall budget a
  // guest's policy asks for; and the copies a just-in-time save makes per
  // stream and notice before it gives up on a tenant whose state keeps
  // changing under it.
  uint32_t ckpt_max_stall_budget_ms = 60000;
  uint32_t ckpt_jit_max_attempts = 64;
  // Shares between tenants (each weighted by the tenant's weight): a
  // tenant's staging memory (0: its weighted share of the pool) and disk
  // bytes; what all quiescence registrations may reserve together (0: half
  // the pool); all checkpoints on disk (0: half the state directory's file
  // system); request threads, and how many of them one tenant may use.
  uint64_t ckpt_tenant_staging_bytes = 0;
  uint64_t ckpt_tenant_disk_bytes = 64ull << 30;
  uint64_t ckpt_quiesce_bytes = 0;
  uint64_t ckpt_disk_bytes = 0;
  uint32_t ckpt_request_threads = 4;
  // Two per tenant: one VM's save may wait for staging that another VM of
  // the same tenant frees with its own request.
  uint32_t ckpt_tenant_request_threads = 2;
  // Nice value of the checkpoint engine's threads (requests, copies,
  // writes), above the connection threads' as the collective workers'.
  uint32_t ckpt_thread_nice = 10;

  // [collectives]: a communicator uid no COMM_INIT used for this long is
  // forgotten once its tenant holds its quota of uids (SPEC §7.3.1).
  uint32_t coll_unused_uid_lifetime_s = 3600;
  // [collectives]: worker threads for reductions (0: one per core), and
  // their nice value: above the connection threads', so that one tenant's
  // large operations leave the CPU to every tenant's small requests.
  uint32_t coll_worker_threads = 0;
  uint32_t coll_worker_nice = 10;
  // [collectives]: how long a worker in the idle class polls for its next
  // task before it sleeps, while its last wait was no longer (0: never), so
  // that back-to-back operations start without a wake-up.
  uint32_t coll_worker_poll_us = 1000;
  // [collectives]: operations touching at least this many bytes (read plus
  // written) write their outputs with non-temporal stores; 0: never. Unset:
  // the engine's default (hz::coll::DefaultStreamMinBytes).
  std::optional<uint64_t> coll_stream_min_bytes;
  // [collectives]: operations moving at most this many bytes run on one
  // thread (hz::coll::EngineOptions::single_thread_max_bytes, its default
  // when unset); 0: every operation past the inline size is split.
  std::optional<uint64_t> coll_single_thread_max_bytes;

  // [conditions]: how often the host's energy schedule and congestion are
  // looked at, and the congestion window and hysteresis (SPEC §8.3.5, §8.5).
  struct Conditions {
    uint32_t poll_ms = 1000;
    uint32_t congestion_window_s = 10;
    uint32_t congestion_hysteresis_s = 10;
  } conditions;

  // [maintenance]: the operator's hook, run as `hook start|complete ID HOST`
  // when a maintenance starts and completes, and how long it may take.
  std::string maintenance_hook;
  uint32_t maintenance_hook_timeout_s = 60;

  SchedulerConfig scheduler;
  NegotiationConfig negotiation;
  ClusterConfig cluster;

  // The paths with their defaults filled in.
  std::string ControlSocketPath() const;
  std::string SchedulerStatePath() const;
  std::string VmSocketDir() const;
};

// Applies the TOML document in `text` on top of *config. Unknown keys, wrong
// types and out-of-range values are errors. `origin` names the source in
// error messages. Returns false and sets *error (one clear line) on failure.
bool ParseConfig(std::string_view text, std::string_view origin, ServiceConfig* config,
                 std::string* error);

// Reads and applies a TOML file.
bool LoadConfigFile(const std::string& path, ServiceConfig* config, std::string* error);

// The id of the group `name`; false when there is none.
bool LookupGroup(const std::string& name, uint32_t* gid);
// The uid of user `name` (getpwnam); false when there is none.
bool LookupUser(const std::string& name, uint32_t* uid);

// Checks cross-field consistency after all sources were applied.
bool ValidateConfig(const ServiceConfig& config, std::string* error);

}  // namespace hz::service

#endif  // HZ_SERVICE_CONFIG_H_
