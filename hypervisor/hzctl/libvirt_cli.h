// hzctl vm attach | vm detach: the device added to, or taken from, a defined
// libvirt domain by harmonaized (vm.attach, vm.detach), and
// hzctl libvirt-hook: libvirt's QEMU hook, which binds the socket of a
// domain that has the device when the domain is prepared, and unbinds it
// when the domain is released.
#ifndef HZ_HZCTL_LIBVIRT_CLI_H_
#define HZ_HZCTL_LIBVIRT_CLI_H_

#include <functional>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "control_client.h"

namespace hzctl {

class LibvirtCli {
 public:
  // One control request: the answer, or why there is none.
  using Caller = std::function<CallResult(const nlohmann::json& req, nlohmann::json* resp,
                                          std::string* error)>;

  LibvirtCli(CLI::App& app, CLI::App& vm_cmd);
  // The request when vm attach or vm detach was given; false otherwise.
  bool Request(nlohmann::json* req) const;
  bool HookGiven() const { return hook_->parsed(); }
  // Reads the domain's XML from stdin and binds or unbinds its socket; an
  // Exit code. A domain without the device is left alone, and the service
  // is not asked.
  int RunHook(const Caller& call) const;
  // A human view of vm.attach and vm.detach; false for another command.
  static bool Print(const std::string& cmd, const nlohmann::json& result);

 private:
  CLI::App* attach_;
  CLI::App* detach_;
  CLI::App* hook_;
  std::string tenant_;
  std::string domain_;
  std::string socket_;
  std::string operation_;
  std::string sub_operation_;
  std::string extra_;
};

}  // namespace hzctl

#endif  // HZ_HZCTL_LIBVIRT_CLI_H_
