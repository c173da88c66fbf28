// hzctl maintenance ...: the maintenance workflow's commands (harmonaized's
// maintenance.schedule, .status, .cancel, .complete).
#ifndef HZ_HZCTL_MAINTENANCE_CLI_H_
#define HZ_HZCTL_MAINTENANCE_CLI_H_

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace hzctl {

class MaintenanceCli {
 public:
  explicit MaintenanceCli(CLI::App& app);
  // The request when one of its subcommands was given; false otherwise.
  bool Request(nlohmann::json* req) const;
  // A human view of maintenance.status; false for another command.
  static bool Print(const std::string& cmd, const nlohmann::json& result);

 private:
  CLI::App* schedule_;
  CLI::App* status_;
  CLI::App* cancel_;
  CLI::App* complete_;
  std::string host_;
  std::string at_;
  uint64_t duration_s_ = 0;
  std::vector<std::string> vms_;
  uint64_t id_ = 0;
};

}  // namespace hzctl

#endif  // HZ_HZCTL_MAINTENANCE_CLI_H_
