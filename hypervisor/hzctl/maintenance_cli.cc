#include "maintenance_cli.h"

#include <cstdio>

namespace hzctl {

using json = nlohmann::json;

MaintenanceCli::MaintenanceCli(CLI::App& app) {
  auto* cmd = app.add_subcommand("maintenance", "a host's maintenances")->require_subcommand(1);
  schedule_ = cmd->add_subcommand(
      "schedule", "tell the tenants on the host; start once all approved or at the time");
  schedule_->add_option("--host", host_, "the host (any of the cluster)")->required();
  schedule_->add_option("--at", at_, "start: unix seconds, or +SECONDS from now")->required();
  schedule_->add_option("--duration", duration_s_, "expected duration, seconds")->required();
  schedule_->add_option("--vm", vms_, "only this VM's socket (repeatable)");
  status_ = cmd->add_subcommand("status", "who was told, approved, checkpointed; when it starts");
  cancel_ = cmd->add_subcommand("cancel", "cancel a scheduled maintenance");
  cancel_->add_option("--id", id_, "the maintenance")->required();
  complete_ = cmd->add_subcommand("complete", "end a started maintenance");
  complete_->add_option("--id", id_, "the maintenance")->required();
  // A maintenance lives with its host: these run there (default: this one).
  for (CLI::App* sub : {status_, cancel_, complete_}) {
    sub->add_option("--host", host_, "the host of the cluster (default: this one)");
  }
}

bool MaintenanceCli::Request(json* req) const {
  if (schedule_->parsed()) {
    (*req)["cmd"] = "maintenance.schedule";
    (*req)["host"] = host_;
    (*req)["on_host"] = host_;  // the host's own harmonaized tells its tenants
    const bool relative = !at_.empty() && at_[0] == '+';
    const std::string digits = relative ? at_.substr(1) : at_;
    const bool numeric =
        !digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos;
    // A malformed --at goes as a string: the service refuses it by name.
    const json value = numeric ? json(std::stoull(digits)) : json(at_);
    (*req)[relative ? "in_s" : "at_s"] = value;
    (*req)["duration_s"] = duration_s_;
    if (!vms_.empty()) (*req)["vms"] = vms_;
  } else if (status_->parsed()) {
    (*req)["cmd"] = "maintenance.status";
  } else if (cancel_->parsed() || complete_->parsed()) {
    (*req)["cmd"] = cancel_->parsed() ? "maintenance.cancel" : "maintenance.complete";
    (*req)["maintenance"] = id_;
  } else {
    return false;
  }
  if (!host_.empty()) (*req)["on_host"] = host_;
  return true;
}

bool MaintenanceCli::Print(const std::string& cmd, const json& r) {
  if (cmd != "maintenance.status") return false;
  std::printf("host %s\n", r.value("host", std::string()).c_str());
  for (const json& m : r.value("maintenances", json::array())) {
    std::printf("maintenance %llu: %s, at %llu for %llu s%s\n", m.value("id", 0ull),
                m.value("state", std::string()).c_str(), m.value("at_s", 0ull),
                m.value("duration_s", 0ull),
                m.value("started_early", false) ? ", approved early" : "");
    std::printf("  %-20s %10s %12s %12s\n", "TENANT", "NOTICE", "APPROVED", "CHECKPOINTS");
    for (const json& t : m.value("told", json::array())) {
      const unsigned long long approved = t.value("approved_s", 0ull);
      std::printf("  %-20s %10llu %12s %12llu\n", t.value("tenant", std::string()).c_str(),
                  t.value("seq", 0ull), approved ? std::to_string(approved).c_str() : "no",
                  t.value("checkpoints", 0ull));
    }
    const std::string hook = m.value("hook", std::string());
    if (!hook.empty()) std::printf("  hook: %s\n", hook.c_str());
  }
  return true;
}

}  // namespace hzctl
