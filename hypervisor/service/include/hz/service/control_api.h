// The operator API: one JSON object per line in, one JSON object per line
// out. ControlApi parses and validates commands and calls a ControlTarget
// (the Service); it never throws and never trusts its input.
//
// Request:  {"cmd": "tenant.create", "name": "t1", ...}   ("id" is echoed back)
// Response: {"ok": true, "result": ...} or {"ok": false, "error": "why"}
#ifndef HZ_SERVICE_CONTROL_API_H_
#define HZ_SERVICE_CONTROL_API_H_

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz/common/status.h"
#include "hz/common/status_or.h"
#include "hz/service/coll_backend.h"
#include "hz/service/command_registry.h"
#include "hz/service/hz_device.h"
#include "hz/service/tenants.h"

namespace hz::service {

struct VmView {
  std::string socket_path;
  std::string tenant;
  std::string domain;  // the libvirt domain of the VM; empty: not told
  bool listening = false;
  size_t thread = 0;                // the connection thread serving it
  std::vector<DeviceInfo> devices;  // the live connection, if any
};

// `hzctl vm attach`: the device added to a defined libvirt domain.
struct VmAttachRequest {
  std::string tenant;
  std::string domain;
  std::string socket;  // empty: <domain>.sock in the VM socket directory
};

struct VmAttachment {
  std::string domain;
  std::string tenant;
  std::string socket;    // absolute, as QEMU opens it
  bool running = false;  // the domain runs: the change comes with its next start
  bool bound = false;    // the socket is served now
};

class ControlTarget {
 public:
  virtual ~ControlTarget() = default;
  virtual hz::Status CreateTenant(const TenantSpec& spec) = 0;
  // Refused while a VM is bound, and while the tenant keeps data
  // (checkpoints, events) unless purge says to delete it.
  virtual hz::Status RemoveTenant(const std::string& name, bool purge) = 0;
  // The HZ_F_* bits the tenant's sessions may be granted from their next HELLO.
  virtual hz::Status SetTenantFeatures(const std::string& name, uint64_t features) = 0;
  // The socket path as bound (a relative one is under the VM socket
  // directory). `domain`: the VM's libvirt domain (empty: not told), which
  // names the VM that a tenant's devices are attached to.
  virtual hz::StatusOr<std::string> BindVm(const std::string& tenant,
                                           const std::string& socket_path,
                                           const std::string& domain) = 0;
  // With a domain, only a socket bound for that domain is unbound (the
  // libvirt hook never takes a socket that was bound again since).
  virtual hz::Status UnbindVm(const std::string& socket_path, const std::string& domain) = 0;
  // The device added to, or taken from, a libvirt domain's definition
  // (hz/libvirt/domain_definitions.h), with its socket bound or unbound.
  virtual hz::StatusOr<VmAttachment> AttachVm(const VmAttachRequest& /*req*/) {
    return hz::Status::NotSupported("libvirt domains are not managed here");
  }
  virtual hz::StatusOr<VmAttachment> DetachVm(const std::string& /*domain*/) {
    return hz::Status::NotSupported("libvirt domains are not managed here");
  }
  // A live upgrade of the service to binary (empty: the same program),
  // started in the background; the result says what was started.
  virtual hz::StatusOr<nlohmann::json> StartUpgrade(const std::string& /*binary*/) {
    return hz::Status::NotSupported("this service cannot be upgraded live");
  }
  virtual std::vector<std::shared_ptr<Tenant>> Tenants() const = 0;
  virtual std::vector<VmView> Vms() const = 0;
  virtual std::vector<CommSummary> Communicators() const = 0;
  virtual nlohmann::json Status() const = 0;
  virtual nlohmann::json Counters() const = 0;
  virtual TenantLimits DefaultTenantLimits() const = 0;
  // Commands of the macro-level engines (events, checkpoints, the provider;
  // see command_registry.h): nothing when cmd is not one of theirs.
  virtual std::optional<CommandResult> EngineCommand(const std::string& /*cmd*/,
                                                     const nlohmann::json& /*req*/) {
    return std::nullopt;
  }
};

// What the operator reads for a failure: its message, or its code's name
// when it has none.
std::string OperatorError(const hz::Status& status);

class ControlApi {
 public:
  explicit ControlApi(ControlTarget* target) : target_(target) {}
  // Handles one request line; returns the response object.
  nlohmann::json Handle(const std::string& line);

  static nlohmann::json DeviceJson(const DeviceInfo& d);

 private:
  nlohmann::json Dispatch(const std::string& cmd, const nlohmann::json& req);
  // The service's own commands; each returns its result or throws.
  nlohmann::json Ping(const nlohmann::json& req);
  nlohmann::json GetStatus(const nlohmann::json& req);
  nlohmann::json CreateTenant(const nlohmann::json& req);
  nlohmann::json ListTenants(const nlohmann::json& req);
  nlohmann::json RemoveTenant(const nlohmann::json& req);
  nlohmann::json SetTenantFeatures(const nlohmann::json& req);
  nlohmann::json BindVm(const nlohmann::json& req);
  nlohmann::json UnbindVm(const nlohmann::json& req);
  nlohmann::json AttachVm(const nlohmann::json& req);
  nlohmann::json DetachVm(const nlohmann::json& req);
  nlohmann::json ListVms(const nlohmann::json& req);
  nlohmann::json ListComms(const nlohmann::json& req);
  nlohmann::json GetCounters(const nlohmann::json& req);
  nlohmann::json Upgrade(const nlohmann::json& req);

  ControlTarget* target_;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_CONTROL_API_H_
