// `hzctl vm attach` and `vm detach`: the device in a libvirt domain's
// definition (hz/libvirt/domain_definitions.h) and its socket bound here.
// The libvirt hook (hzctl libvirt-hook) binds and unbinds the socket at the
// domain's start and end with vm.bind and vm.unbind.
#include <filesystem>

#include "hz/service/service.h"
#include "spdlog/spdlog.h"

namespace hz::service {

namespace fs = std::filesystem;
namespace lv = hz::libvirt;

namespace {

// A domain name that can name its socket file as it is.
bool IsFileNameSafe(const std::string& name) {
  if (name.empty() || name.size() > 96 || name[0] == '.') return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.' || c == '+';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

hz::Status Service::OpenDefinitions(lv::DomainDefinitions** out) {
  std::lock_guard<std::mutex> lock(libvirt_mu_);
  if (libvirt_ && !libvirt_->Alive()) {
    spdlog::warn("event=libvirt_reconnect uri={}", libvirt_->uri());
    definitions_.reset();
    libvirt_.reset();
  }
  if (!libvirt_) {
    const std::string& uri = config_.scheduler.libvirt_uri;
    if (uri.empty()) {
      return hz::Status::NotSupported(
          "libvirt is not configured: set [scheduler] libvirt_uri (e.g. qemu:///system)");
    }
    if (hz::Status s = lv::Connection::Open(uri, &libvirt_); !s.ok()) return s;
    definitions_ = std::make_unique<lv::DomainDefinitions>(libvirt_.get());
  }
  *out = definitions_.get();
  return hz::Status::Ok();
}

hz::StatusOr<std::string> Service::AttachSocketPath(const VmAttachRequest& req) const {
  std::string name = req.socket;
  if (name.empty()) {
    if (!IsFileNameSafe(req.domain)) {
      return hz::Status::InvalidArgument("domain '" + req.domain.substr(0, 64) +
                                         "' cannot name a socket file: give the socket path");
    }
    name = req.domain + ".sock";
  }
  // QEMU opens the path from its own working directory.
  std::error_code ec;
  fs::path path = fs::absolute(ResolveSocketPath(name), ec);
  if (ec) return hz::Status::InvalidArgument("socket path " + name + ": " + ec.message());
  return path.lexically_normal().string();
}

hz::StatusOr<VmAttachment> Service::AttachVm(const VmAttachRequest& req) {
  if (draining_) return hz::Status::Shutdown("the service is stopping");
  if (req.domain.empty() || req.domain.size() > 256) {
    return hz::Status::InvalidArgument("a domain name of 1 to 256 bytes is needed");
  }
  if (!tenants_.Find(req.tenant)) return hz::Status::NotFound("no tenant " + req.tenant);
  hz::StatusOr<std::string> socket = AttachSocketPath(req);
  if (!socket.ok()) return socket.status();
  lv::DomainDefinitions* definitions = nullptr;
  if (hz::Status s = OpenDefinitions(&definitions); !s.ok()) return s;
  lv::DomainDevice device;
  device.tenant = req.tenant;
  device.socket = *socket;
  // QEMU's device has the queues this service serves ([device]).
  device.shape = {config_.device.num_request_queues, config_.device.queue_size};
  lv::DefinitionChange change;
  if (hz::Status s = definitions->Attach(req.domain, device, &change); !s.ok()) return s;
  hz::StatusOr<std::string> bound = BindVm(req.tenant, *socket, req.domain);
  if (!bound.ok()) {
    // The definition must not name a socket nobody serves.
    lv::DefinitionChange undo;
    hz::Status u = definitions->Detach(req.domain, &undo);
    return hz::Status(
        bound.status().code(),
        bound.status().message() +
            (u.ok() ? "; the domain's definition is left as it was"
                    : "; taking the device out of the definition again failed: " + u.ToString()));
  }
  spdlog::info("event=vm_attached domain={} tenant={} socket={} running={}", req.domain, req.tenant,
               *socket, change.running);
  return VmAttachment{req.domain, req.tenant, *socket, change.running, true};
}

hz::StatusOr<VmAttachment> Service::DetachVm(const std::string& domain) {
  if (draining_) return hz::Status::Shutdown("the service is stopping");
  lv::DomainDefinitions* definitions = nullptr;
  if (hz::Status s = OpenDefinitions(&definitions); !s.ok()) return s;
  lv::DefinitionChange change;
  if (hz::Status s = definitions->Detach(domain, &change); !s.ok()) return s;
  VmAttachment out{domain, change.device.tenant, change.device.socket, change.running, false};
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.bound = bindings_.count(out.socket) != 0;
  }
  // A running domain keeps its device until it stops; the hook unbinds then.
  if (!change.running && out.bound) {
    hz::Status u = UnbindVm(change.device.socket, domain);
    if (!u.ok() && u.code() != hz::StatusCode::kNotFound) {
      return hz::Status(u.code(), "the device is out of the definition of '" + domain +
                                      "', but its socket stays bound: " + u.message());
    }
    out.bound = false;
  }
  spdlog::info("event=vm_detached domain={} tenant={} socket={} running={}", domain, out.tenant,
               out.socket, out.running);
  return out;
}

}  // namespace hz::service
