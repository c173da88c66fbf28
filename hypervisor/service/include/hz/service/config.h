// harmonaized's configuration: built-in defaults that need no file at all,
// optionally overridden by a TOML file and then by the command line.
#ifndef HZ_SERVICE_CONFIG_H_
#define HZ_SERVICE_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace hz::service {

// What one VM's device offers and accepts (config space, HELLO result).
struct DeviceLimits {
  uint16_t num_request_queues = 4;          // queues 2.. ; at most HZ_MAX_REQUEST_QUEUES
  uint16_t queue_size = 256;                // largest ring the device accepts
  uint16_t max_segments = 64;               // descriptors per chain
  uint32_t max_regions = 256;               // live regions per device
  uint32_t max_extents = 4096;              // extents per region
  uint64_t max_region_bytes = 64ull << 30;  // bytes per region
  uint32_t max_args_bytes = 1u << 20;       // readable header + args + data
  uint32_t max_comm_ranks = 64;             // ranks per communicator
  uint32_t max_comms = 64;                  // live communicators per device
  // Guest memory fds must be sealed against shrinking. A front-end that
  // shrinks a mapped file would otherwise crash the service with SIGBUS.
  // QEMU's memory-backend-memfd and libharmonaize's arena are sealed; turn
  // this off only for trusted VMs on file-backed (hugetlbfs) memory.
  bool require_sealed_memory = true;
};

// Per-tenant quotas, summed over all VMs bound to the tenant. A tenant created
// without explicit limits gets these.
struct TenantLimits {
  uint32_t max_regions = 1024;
  uint64_t max_region_bytes = 256ull << 30;  // total registered bytes
};

struct ServiceConfig {
  std::string state_dir = "/var/lib/harmonaize";
  std::string control_socket;  // empty: <state_dir>/control.sock
  std::string vm_socket_dir;   // empty: <state_dir>/vms
  uint32_t control_max_line_bytes = 64 * 1024;
  uint32_t control_max_clients = 32;

  bool metrics_enabled = true;
  std::string metrics_address = "127.0.0.1";
  uint16_t metrics_port = 9464;  // 0: pick a free port (tests)

  uint32_t worker_threads = 2;  // vhost-user connection executors
  std::string log_level = "info";
  std::string log_format = "text";  // text (key=value) or json

  uint32_t shutdown_timeout_ms = 10000;  // longest wait for in-flight work

  DeviceLimits device;
  TenantLimits tenant_defaults;

  // [checkpoint]: the staging pool every save is copied into, and the disk
  // bandwidth persists share (0: unthrottled).
  uint64_t ckpt_staging_bytes = 256ull << 20;
  uint64_t ckpt_disk_bandwidth_bytes_per_s = 0;

  // The paths with their defaults filled in.
  std::string ControlSocketPath() const;
  std::string VmSocketDir() const;
};

// Applies the TOML document in `text` on top of *config. Unknown keys, wrong
// types and out-of-range values are errors. `origin` names the source in
// error messages. Returns false and sets *error (one clear line) on failure.
bool ParseConfig(std::string_view text, std::string_view origin, ServiceConfig* config,
                 std::string* error);

// Reads and applies a TOML file.
bool LoadConfigFile(const std::string& path, ServiceConfig* config, std::string* error);

// Checks cross-field consistency after all sources were applied.
bool ValidateConfig(const ServiceConfig& config, std::string* error);

}  // namespace hz::service

#endif  // HZ_SERVICE_CONFIG_H_
