#include "libvirt_cli.h"

#include <cstdio>

#include "hz/common/status.h"
#include "hz/libvirt/domain_device.h"

namespace hzctl {

using json = nlohmann::json;

namespace {

// libvirt passes the domain's XML on the hook's stdin; more than a domain
// definition may be is refused unread.
bool ReadStdin(std::string* out) {
  out->clear();
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) {
    out->append(buf, n);
    if (out->size() > hz::libvirt::kMaxDomainXmlBytes) return false;
  }
  return true;
}

bool StatusIs(const json& resp, hz::StatusCode code) {
  return resp.value("status", -1) == static_cast<int>(code);
}

}  // namespace

LibvirtCli::LibvirtCli(CLI::App& app, CLI::App& vm_cmd) {
  attach_ = vm_cmd.add_subcommand(
      "attach",
      "add the device to a defined libvirt domain (shared memfd memory, the vhost-user "
      "device) and bind its socket; a running domain gets it at its next start");
  attach_->add_option("--tenant", tenant_, "tenant name")->required();
  attach_->add_option("--domain", domain_, "libvirt domain name")->required();
  attach_->add_option("--socket", socket_,
                      "socket path (default: DOMAIN.sock in the VM socket directory)");
  detach_ = vm_cmd.add_subcommand(
      "detach",
      "take the device out of a libvirt domain's definition, as attach added it, and unbind "
      "its socket (a running domain keeps both until it stops)");
  detach_->add_option("--domain", domain_, "libvirt domain name")->required();
  hook_ = app.add_subcommand(
      "libvirt-hook",
      "libvirt's QEMU hook (/etc/libvirt/hooks/qemu.d/harmonaize runs it): with the domain's "
      "XML on stdin, binds the socket of a domain that has the device at 'prepare begin' "
      "and unbinds it at 'release end'");
  hook_->add_option("domain", domain_, "the domain, as libvirt passes it")->required();
  hook_->add_option("operation", operation_, "prepare, start, started, stopped, release, ...")
      ->required();
  hook_->add_option("sub-operation", sub_operation_, "begin or end")->required();
  hook_->add_option("extra", extra_, "libvirt's extra argument");
}

bool LibvirtCli::Request(json* req) const {
  if (attach_->parsed()) {
    (*req)["cmd"] = "vm.attach";
    (*req)["tenant"] = tenant_;
    (*req)["domain"] = domain_;
    if (!socket_.empty()) (*req)["socket"] = socket_;
    return true;
  }
  if (detach_->parsed()) {
    (*req)["cmd"] = "vm.detach";
    (*req)["domain"] = domain_;
    return true;
  }
  return false;
}

int LibvirtCli::RunHook(const Caller& call) const {
  const bool prepare = operation_ == "prepare" && sub_operation_ == "begin";
  const bool release = operation_ == "release" && sub_operation_ == "end";
  std::string xml;
  const bool whole = ReadStdin(&xml);  // read in every case: libvirt writes it all
  if (!prepare && !release) return kOk;
  if (!whole) {
    std::fprintf(stderr, "hzctl libvirt-hook: %s: the domain XML is larger than 16 MiB\n",
                 domain_.c_str());
    return prepare ? kUsage : kOk;
  }
  hz::StatusOr<hz::libvirt::DomainDevice> device = hz::libvirt::FindDevice(xml);
  if (device.status().code() == hz::StatusCode::kNotFound) return kOk;  // not ours
  if (!device.ok()) {
    std::fprintf(stderr, "hzctl libvirt-hook: %s: %s\n", domain_.c_str(),
                 device.status().ToString().c_str());
    return prepare ? kUsage : kOk;
  }
  json req = {{"socket", device->socket}, {"domain", domain_}};
  if (prepare) {
    req["cmd"] = "vm.bind";
    req["tenant"] = device->tenant;
  } else {
    req["cmd"] = "vm.unbind";
  }
  json resp;
  std::string error;
  const CallResult r = call(req, &resp, &error);
  const char* what = prepare ? "binding" : "unbinding";
  if (r != CallResult::kOk) {
    // libvirt shows this line when it refuses to start the domain.
    std::fprintf(stderr, "hzctl libvirt-hook: %s: %s %s: harmonaized: %s\n", domain_.c_str(), what,
                 device->socket.c_str(), error.c_str());
    return r == CallResult::kTimedOut ? kTimedOut : kUnreachable;
  }
  if (resp.value("ok", false) || (release && StatusIs(resp, hz::StatusCode::kNotFound))) {
    return kOk;
  }
  std::fprintf(stderr, "hzctl libvirt-hook: %s: %s %s: %s\n", domain_.c_str(), what,
               device->socket.c_str(), resp.value("error", std::string("failed")).c_str());
  return kRefused;
}

bool LibvirtCli::Print(const std::string& cmd, const json& r) {
  if (cmd != "vm.attach" && cmd != "vm.detach") return false;
  const std::string domain = r.value("domain", std::string());
  const std::string socket = r.value("socket", std::string());
  const bool running = r.value("running", false);
  if (cmd == "vm.attach") {
    std::printf("%s: device added for tenant %s, socket %s (bound)\n", domain.c_str(),
                r.value("tenant", std::string()).c_str(), socket.c_str());
    if (running) std::printf("%s runs: the device comes with its next start\n", domain.c_str());
  } else {
    std::printf("%s: device removed, socket %s %s\n", domain.c_str(), socket.c_str(),
                r.value("bound", false) ? "still bound" : "unbound");
    if (running) {
      std::printf("%s runs: it keeps the device until it stops; the hook unbinds it then\n",
                  domain.c_str());
    }
  }
  return true;
}

}  // namespace hzctl
