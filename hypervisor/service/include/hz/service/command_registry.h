// The operator commands of the engines ("event.inject", "alloc", ...): the
// control API's commands beyond the service's own. Each component declares
// its commands once, in a table next to their handlers (Engines::Commands,
// Provider::Commands); the service adds those tables here and routes every
// such command by name. A component that is not running still declares its
// commands, which then answer why they are unavailable.
#ifndef HZ_SERVICE_COMMAND_REGISTRY_H_
#define HZ_SERVICE_COMMAND_REGISTRY_H_

#include <functional>
#include <map>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "hz/common/status.h"
#include "hz/common/status_or.h"

namespace hz::service {

// The answer to one operator command: its result, or why it failed (the
// message is what the operator reads).
using CommandResult = hz::StatusOr<nlohmann::json>;

// One command of component T: run answers the request.
template <typename T>
struct CommandSpec {
  const char* name;
  // The request's "tenant", when it is a string, must name a tenant the
  // operator created (checked before run).
  bool names_tenant;
  CommandResult (T::*run)(const nlohmann::json& req);
};

class CommandRegistry {
 public:
  struct Command {
    bool names_tenant = false;
    std::function<CommandResult(const nlohmann::json& req)> run;
  };

  // Adds target's commands (names are unique across the registry).
  template <typename T>
  void Add(T* target, std::span<const CommandSpec<T>> specs) {
    for (const CommandSpec<T>& s : specs) {
      Insert(s.name, {s.names_tenant, [target, run = s.run](const nlohmann::json& req) {
                        return (target->*run)(req);
                      }});
    }
  }

  // Adds the commands of a component that is not running: each answers why.
  template <typename T>
  void AddUnavailable(std::span<const CommandSpec<T>> specs, const std::string& why) {
    for (const CommandSpec<T>& s : specs) {
      Insert(s.name, {s.names_tenant, [why](const nlohmann::json&) -> CommandResult {
                        return Status::State(why);
                      }});
    }
  }

  // The command called name, or null.
  const Command* Find(const std::string& name) const {
    auto it = commands_.find(name);
    return it == commands_.end() ? nullptr : &it->second;
  }

 private:
  void Insert(const char* name, Command c) { commands_.emplace(name, std::move(c)); }

  std::map<std::string, Command> commands_;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_COMMAND_REGISTRY_H_
