// hzctl: the operator's command line for harmonaized.
//
//   hzctl [--socket PATH] [--json] [--timeout S] tenant create NAME [--weight N] [--priority
//   low|normal|high]
//                                        [--max-regions N] [--max-region-bytes N] [--max-extents N]
//                                        [--max-open-negotiations N] [--disk-bytes N]
//                                        [--staging-bytes N] [--features LIST]
//                                        [--latency-poll-us N]
//         (--features: what HELLO may grant the tenant's sessions, comma-separated
//          collectives,checkpoint,events,negotiation,topology,hints,inline-data,energy, or
//          all or none; default all)
//   hzctl tenant features NAME --features LIST   (from each session's next HELLO)
//   hzctl tenant list | tenant remove NAME [--purge]
//         (--purge: also delete the tenant's checkpoints and events; without it a
//          tenant that has any is not removed)
//   hzctl vm bind --tenant NAME --socket PATH [--domain DOMAIN]
//   hzctl vm unbind --socket PATH [--domain DOMAIN] | vm list
//         (DOMAIN: the VM's libvirt domain; a preemption of the tenant's devices then saves
//          only the VM they are attached to)
//   hzctl vm attach --tenant NAME --domain DOMAIN [--socket PATH] | vm detach --domain DOMAIN
//         (the device in a defined libvirt domain, through harmonaized's libvirt connection)
//   hzctl libvirt-hook DOMAIN OPERATION SUB-OPERATION [EXTRA]   (libvirt's QEMU hook)
//   hzctl comm list | counters | status
//   hzctl event inject --tenant NAME --topic TOPIC [--kind KIND] [--deadline-s N] [--data '{..}']
//         (--deadline-s: seconds from now; --data: further keys of the event, see
//          hz/events/injection.h, e.g. '{"duration_s": 600, "approvable": true}')
//   hzctl event status --tenant NAME   (the log, each binding's cursor, early approvals)
//   hzctl checkpoint list --tenant NAME   (streams, steps, tiers and the engine's decisions)
//   hzctl inventory                       (this host's GPUs and NICs, state and owner)
//   hzctl allocations [--spread]          (allocations with their devices; --spread: those
//                                          this host spread over several hosts, by part)
//   hzctl alloc --tenant NAME [--gpus N] [--nics M] [--locality any|host|group] [--this-host]
//         (in a cluster, what this host cannot hold is spread over the hosts, fewest first,
//          unless --this-host)
//   hzctl release ID | release --spread ID
//   hzctl device fail|degrade BDF [--errors N] | device repair BDF
//   hzctl tenant domain NAME --domain DOMAIN   (the tenant's libvirt domain)
//   hzctl negotiation list                (offers and reservations)
//   hzctl cluster status                  (this host's membership, the live hosts and their
//                                          leases; "single-host" without [cluster])
//   hzctl energy schedule [--window START,END,LEVEL[,SOURCES]]...
//         (replaces this host's energy schedule; none clears it. START, END: unix
//          seconds, or +N seconds from now; LEVEL: normal|constrained|critical or 0-2;
//          SOURCES: power, price, carbon joined by '+', e.g. +0,+3600,constrained,price)
//   hzctl energy status                   (the schedule, the level now, energy slack, congestion)
//   hzctl maintenance schedule --host H --at T|+S --duration D [--vm SOCKET]...
//         (tells every tenant with a VM or device on host H, or on those VMs; starts
//          once all approved early or at T; H is this host's name)
//   hzctl maintenance status | cancel --id N | complete --id N
//
//   hzctl upgrade [--binary PATH]        (live upgrade: PATH, or the program running, takes
//                                          every VM's session over; waits until it serves)
//
//   hzctl --on-host H COMMAND ...   (alloc, release, allocations, inventory, cluster status and
//                                    the maintenance commands run on host H of the cluster)
//
//   hzctl --version
//
// The global options (--socket, --json, --timeout, --on-host) go anywhere on
// the line, as in `hzctl tenant list --json`. Exit codes: kExitCodes below.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "control_client.h"
#include "human_output.h"
#include "libvirt_cli.h"
#include "maintenance_cli.h"
#include "upgrade_cli.h"

using json = nlohmann::json;

namespace {

// Exit codes, for scripts; --help and the man page print this text.
constexpr const char* kExitCodes =
    "Exit codes: 0 success; 1 the service refused the request; 2 bad command line;\n"
    "3 the service could not be reached (or its answer was not JSON); 4 the service\n"
    "accepted the request but did not answer within --timeout.";
using hzctl::kOk, hzctl::kRefused, hzctl::kUsage, hzctl::kUnreachable, hzctl::kTimedOut;

constexpr const char* kRunSocket = "/run/harmonaize/control.sock";
constexpr const char* kStateSocket = "/var/lib/harmonaize/control.sock";

// $HZ_CONTROL_SOCKET, else the runtime directory's socket when the daemon
// made one, else the one in its default state directory.
std::string DefaultSocket() {
  if (const char* env = std::getenv("HZ_CONTROL_SOCKET"); env != nullptr && *env != '\0') {
    return env;
  }
  return access(kRunSocket, F_OK) == 0 ? kRunSocket : kStateSocket;
}

// "a,b,,c" -> ["a", "b", "c"]; the service checks the names.
json SplitList(const std::string& list) {
  json out = json::array();
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// "START,END,LEVEL[,SOURCES]" -> an energy.schedule window; false on a bad one.
bool EnergyWindow(const std::string& text, json* out) {
  std::vector<std::string> parts;
  for (size_t pos = 0;;) {
    size_t comma = text.find(',', pos);
    parts.push_back(text.substr(pos, comma == std::string::npos ? comma : comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (parts.size() < 3 || parts.size() > 4) return false;
  const uint64_t now = static_cast<uint64_t>(time(nullptr));
  for (size_t i = 0; i < 2; ++i) {
    const std::string& t = parts[i];
    const bool rel = !t.empty() && t[0] == '+';
    char* end = nullptr;
    const char* digits = t.c_str() + (rel ? 1 : 0);
    errno = 0;
    unsigned long long v = std::strtoull(digits, &end, 10);
    if (*digits == '\0' || *end != '\0' || errno != 0) return false;
    (*out)[i == 0 ? "start_s" : "end_s"] = rel ? now + v : v;
  }
  const std::string& level = parts[2];
  if (level.size() == 1 && level[0] >= '0' && level[0] <= '9') {
    (*out)["level"] = level[0] - '0';
  } else {
    (*out)["level"] = level;
  }
  json sources = json::array();
  for (size_t pos = 0; parts.size() == 4 && pos <= parts[3].size();) {
    size_t plus = parts[3].find('+', pos);
    if (plus == std::string::npos) plus = parts[3].size();
    sources.push_back(parts[3].substr(pos, plus - pos));
    pos = plus + 1;
  }
  (*out)["sources"] = sources;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hzctl: operate harmonaized"};
  app.require_subcommand(1);
  // Subcommands created from here on inherit both: the global options below
  // are accepted after a subcommand too, and every --help lists exit codes.
  app.fallthrough();
  app.footer(std::string("Control socket: --socket PATH, else $HZ_CONTROL_SOCKET, else\n") +
             kRunSocket + " if it exists, else " + kStateSocket + ".\n\n" + kExitCodes);
  app.set_version_flag("--version", "hzctl " HZ_PROJECT_VERSION, "print the version and exit");
  std::string socket_path = DefaultSocket();
  bool as_json = false;
  app.add_option("-s,--socket", socket_path, "harmonaized's control socket (see below)")
      ->type_name("PATH");
  app.add_flag("--json", as_json, "print the service's JSON answer (the envelope with \"ok\")");
  double timeout_s = 30;
  app.add_option("--timeout", timeout_s, "seconds to wait for the service's answer (default 30)")
      ->type_name("SECONDS")
      ->check(CLI::Range(0.001, 86400.0).description(""));
  std::string on_host;
  app.add_option("--on-host", on_host, "run the command on this host of the cluster")
      ->type_name("HOST");

  std::string name, tenant, vm_socket, priority;
  uint64_t weight = 0, max_regions = 0, max_region_bytes = 0, max_extents = 0, max_open = 0;
  uint64_t disk_bytes = 0, staging_bytes = 0, latency_poll_us = 0;

  auto* tenant_cmd = app.add_subcommand("tenant", "manage tenants")->require_subcommand(1);
  auto* tcreate = tenant_cmd->add_subcommand("create", "create a tenant");
  tcreate->add_option("name", name, "tenant name")->required();
  tcreate->add_option("--weight", weight, "share under contention (1..1000)");
  tcreate->add_option("--priority", priority, "highest priority class: low, normal, high")
      ->check(CLI::IsMember({"low", "normal", "high"}));
  tcreate->add_option("--max-regions", max_regions, "registered regions, all VMs together");
  tcreate->add_option("--max-region-bytes", max_region_bytes, "registered bytes, all VMs together");
  tcreate->add_option("--max-extents", max_extents,
                      "extents of registered regions, all VMs together");
  tcreate->add_option("--max-open-negotiations", max_open,
                      "open negotiations (default: [negotiation] max_open_per_tenant)");
  tcreate->add_option("--disk-bytes", disk_bytes,
                      "checkpoint bytes on disk (default: [checkpoint] tenant_disk_bytes)");
  tcreate->add_option("--staging-bytes", staging_bytes,
                      "checkpoint staging held at once (default: [checkpoint] "
                      "tenant_staging_bytes)");
  tcreate->add_option("--latency-poll-us", latency_poll_us,
                      "how long its low-latency communicators keep the service polling after "
                      "each operation, 0..100000; 0: the flag has no effect (default: [device] "
                      "low_latency_poll_us)");
  std::string features;
  const char* features_help =
      "what HELLO may grant the tenant's sessions: comma-separated collectives, checkpoint, "
      "events, negotiation, topology, hints, inline-data, energy, or all or none";
  tcreate->add_option("--features", features, std::string(features_help) + " (default: all)");
  auto* tfeatures = tenant_cmd->add_subcommand(
      "features", "change what a tenant's sessions may be granted, from their next HELLO");
  tfeatures->add_option("name", name, "tenant name")->required();
  tfeatures->add_option("--features", features, features_help)->required();
  auto* tlist = tenant_cmd->add_subcommand("list", "list tenants");
  auto* tremove = tenant_cmd->add_subcommand(
      "remove",
      "remove a tenant without bound VMs; one that keeps checkpoints or events needs --purge");
  tremove->add_option("name", name, "tenant name")->required();
  bool purge = false;
  tremove->add_flag("--purge", purge,
                    "delete the tenant's checkpoints and events with it (a tenant created later "
                    "under the same name never sees them)");
  std::string domain;
  auto* tdomain = tenant_cmd->add_subcommand("domain", "bind a tenant to its VM's libvirt domain");
  tdomain->add_option("name", name, "tenant name")->required();
  tdomain->add_option("--domain", domain, "libvirt domain name")->required();

  auto* vm_cmd = app.add_subcommand("vm", "bind VM sockets to tenants")->require_subcommand(1);
  auto* vbind = vm_cmd->add_subcommand("bind", "serve a vhost-user socket for a tenant's VM");
  vbind->add_option("--tenant", tenant, "tenant name")->required();
  vbind->add_option("--socket", vm_socket, "socket path (relative: in the VM socket directory)")
      ->required();
  vbind->add_option("--domain", domain, "the VM's libvirt domain (names the VM its devices go to)");
  auto* vunbind = vm_cmd->add_subcommand("unbind", "stop serving a VM socket");
  vunbind->add_option("--socket", vm_socket, "socket path")->required();
  vunbind->add_option("--domain", domain, "only if bound for this libvirt domain");
  auto* vlist = vm_cmd->add_subcommand("list", "bound sockets and connected VMs");
  hzctl::LibvirtCli libvirt(app, *vm_cmd);

  auto* comm_cmd = app.add_subcommand("comm", "communicators")->require_subcommand(1);
  comm_cmd->add_subcommand("list", "communicators in the collective engine");
  auto* counters = app.add_subcommand("counters", "request and engine counters");

  std::string topic, kind, event_json;
  uint64_t deadline_s = 0;
  auto* event_cmd = app.add_subcommand("event", "tenant events")->require_subcommand(1);
  auto* einject = event_cmd->add_subcommand("inject", "publish an event to a tenant");
  einject->add_option("--tenant", tenant, "tenant name")->required();
  einject->add_option("--topic", topic, "maintenance, preemption, failure, capacity, ...")
      ->required();
  einject->add_option("--kind", kind, "kind within the topic (default: the topic's first)");
  einject->add_option("--deadline-s", deadline_s, "deadline, in seconds from now");
  einject->add_option("--data", event_json, "further fields of the event, as a JSON object");
  auto* estatus = event_cmd->add_subcommand("status", "a tenant's event log, cursors, approvals");
  estatus->add_option("--tenant", tenant, "tenant name")->required();

  std::vector<std::string> energy_windows;
  auto* energy_cmd = app.add_subcommand("energy", "this host's energy")->require_subcommand(1);
  auto* eschedule = energy_cmd->add_subcommand("schedule", "replace the energy schedule");
  eschedule->add_option("--window", energy_windows, "START,END,LEVEL[,SOURCES] (repeatable)");
  auto* energy_status = energy_cmd->add_subcommand("status", "the schedule, level and slack");

  hzctl::MaintenanceCli maintenance(app);

  auto* ckpt_cmd = app.add_subcommand("checkpoint", "tenant checkpoints")->require_subcommand(1);
  auto* clist = ckpt_cmd->add_subcommand("list", "a tenant's streams, checkpoints and decisions");
  clist->add_option("--tenant", tenant, "tenant name")->required();
  app.add_subcommand("status", "service status");
  std::string upgrade_binary;
  auto* upgrade =
      app.add_subcommand("upgrade", "upgrade harmonaized live: every VM keeps its device");
  upgrade->add_option("--binary", upgrade_binary, "the new program (default: the one running)")
      ->type_name("PATH");

  auto* inventory = app.add_subcommand("inventory", "this host's GPUs and NICs");
  auto* allocations = app.add_subcommand("allocations", "allocations and their devices");
  bool spread = false, this_host = false;
  allocations->add_flag("--spread", spread, "the allocations spread over several hosts");
  uint64_t gpus = 0, nics = 0, alloc_id = 0, errors = 0;
  std::string locality, bdf;
  auto* alloc = app.add_subcommand("alloc", "allocate devices to a tenant");
  alloc->add_option("--tenant", tenant, "tenant name")->required();
  alloc->add_option("--gpus", gpus, "GPUs");
  alloc->add_option("--nics", nics, "NICs");
  alloc->add_option("--locality", locality, "any, host or group")
      ->check(CLI::IsMember({"any", "host", "group"}));
  alloc->add_flag("--this-host", this_host, "never spread over other hosts of the cluster");
  auto* release = app.add_subcommand("release", "release an allocation");
  auto* release_id = release->add_option("id", alloc_id, "allocation id");
  release->add_option("--spread", alloc_id, "a spread allocation's id: every part")
      ->excludes(release_id);
  auto* device_cmd = app.add_subcommand("device", "device health")->require_subcommand(1);
  auto* dfail = device_cmd->add_subcommand("fail", "a device is lost: detach, notify, replace");
  dfail->add_option("bdf", bdf, "PCI address")->required();
  dfail->add_option("--errors", errors, "error count to report");
  auto* ddegrade = device_cmd->add_subcommand("degrade", "a device reports non-fatal errors");
  ddegrade->add_option("bdf", bdf, "PCI address")->required();
  ddegrade->add_option("--errors", errors, "error count to report");
  auto* drepair = device_cmd->add_subcommand("repair", "a failed device can be placed again");
  drepair->add_option("bdf", bdf, "PCI address")->required();
  auto* neg_cmd = app.add_subcommand("negotiation", "negotiation")->require_subcommand(1);
  auto* nlist = neg_cmd->add_subcommand("list", "open offers and reservations");
  auto* cluster_cmd = app.add_subcommand("cluster", "several hosts")->require_subcommand(1);
  auto* cstatus =
      cluster_cmd->add_subcommand("status", "this host's membership and the live hosts");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kOk : kUsage;
  }
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  if (libvirt.HookGiven()) {
    return libvirt.RunHook([&](const json& r, json* resp, std::string* error) {
      return hzctl::Call(socket_path, r, timeout, resp, error);
    });
  }

  if (upgrade->parsed()) return hzctl::Upgrade(socket_path, upgrade_binary, timeout, as_json);

  json req;
  std::string cmd;
  if (tcreate->parsed()) {
    cmd = "tenant.create";
    req["name"] = name;
    if (weight) req["weight"] = weight;
    if (!priority.empty()) req["priority"] = priority;
    if (tcreate->count("--max-regions")) req["max_regions"] = max_regions;
    if (tcreate->count("--max-region-bytes")) req["max_region_bytes"] = max_region_bytes;
    if (tcreate->count("--max-extents")) req["max_extents"] = max_extents;
    if (tcreate->count("--max-open-negotiations")) req["max_open_negotiations"] = max_open;
    if (tcreate->count("--disk-bytes")) req["disk_bytes"] = disk_bytes;
    if (tcreate->count("--staging-bytes")) req["staging_bytes"] = staging_bytes;
    if (tcreate->count("--latency-poll-us")) req["latency_poll_us"] = latency_poll_us;
    if (tcreate->count("--features")) req["features"] = SplitList(features);
  } else if (tfeatures->parsed()) {
    cmd = "tenant.features";
    req["name"] = name;
    req["features"] = SplitList(features);
  } else if (tlist->parsed()) {
    cmd = "tenant.list";
  } else if (tdomain->parsed()) {
    cmd = "tenant.domain";
    req["tenant"] = name;
    req["domain"] = domain;
  } else if (inventory->parsed()) {
    cmd = "inventory";
  } else if (allocations->parsed()) {
    cmd = spread ? "allocation.spread" : "allocation.list";
  } else if (alloc->parsed()) {
    cmd = "alloc";
    req["tenant"] = tenant;
    req["gpus"] = gpus;
    req["nics"] = nics;
    if (!locality.empty()) req["locality"] = locality;
    if (this_host) req["this_host_only"] = true;
  } else if (release->parsed()) {
    cmd = "release";
    if (release->count("--spread") == 0 && release_id->count() == 0) {
      std::fprintf(stderr, "hzctl: release: give an allocation id or --spread ID\n");
      return kUsage;
    }
    req[release->count("--spread") ? "spread" : "allocation"] = alloc_id;
  } else if (dfail->parsed() || ddegrade->parsed() || drepair->parsed()) {
    cmd = dfail->parsed() ? "device.fail" : ddegrade->parsed() ? "device.degrade" : "device.repair";
    req["bdf"] = bdf;
    if (!drepair->parsed() && (dfail->count("--errors") || ddegrade->count("--errors"))) {
      req["errors"] = errors;
    }
  } else if (nlist->parsed()) {
    cmd = "negotiation.list";
  } else if (cstatus->parsed()) {
    cmd = "cluster.status";
  } else if (tremove->parsed()) {
    cmd = "tenant.remove";
    req["name"] = name;
    if (purge) req["purge"] = true;
  } else if (vbind->parsed()) {
    cmd = "vm.bind";
    req["tenant"] = tenant;
    req["socket"] = vm_socket;
    if (!domain.empty()) req["domain"] = domain;
  } else if (vunbind->parsed()) {
    cmd = "vm.unbind";
    req["socket"] = vm_socket;
    if (!domain.empty()) req["domain"] = domain;
  } else if (vlist->parsed()) {
    cmd = "vm.list";
  } else if (comm_cmd->parsed()) {
    cmd = "comm.list";
  } else if (counters->parsed()) {
    cmd = "counters";
  } else if (clist->parsed()) {
    cmd = "checkpoint.list";
    req["tenant"] = tenant;
  } else if (estatus->parsed()) {
    cmd = "event.status";
    req["tenant"] = tenant;
  } else if (eschedule->parsed()) {
    cmd = "energy.schedule";
    req["windows"] = json::array();
    for (const std::string& w : energy_windows) {
      json window;
      if (!EnergyWindow(w, &window)) {
        std::fprintf(stderr, "hzctl: --window %s: expected START,END,LEVEL[,SOURCES]\n", w.c_str());
        return kUsage;
      }
      req["windows"].push_back(window);
    }
  } else if (energy_status->parsed()) {
    cmd = "energy.status";
  } else if (maintenance.Request(&req) || libvirt.Request(&req)) {
    cmd = req["cmd"];
  } else if (einject->parsed()) {
    cmd = "event.inject";
    json ev = json::object();
    if (!event_json.empty()) {
      ev = json::parse(event_json, nullptr, /*allow_exceptions=*/false);
      if (!ev.is_object()) {
        std::fprintf(stderr, "hzctl: --data must be a JSON object\n");
        return kUsage;
      }
    }
    ev["topic"] = topic;
    if (!kind.empty()) ev["kind"] = kind;
    if (einject->count("--deadline-s")) ev["in_s"] = deadline_s;
    req["tenant"] = tenant;
    req["event"] = ev;
  } else {
    cmd = "status";
  }
  req["cmd"] = cmd;
  if (!on_host.empty()) req["on_host"] = on_host;

  json resp;
  std::string error;
  switch (hzctl::Call(socket_path, req, timeout, &resp, &error)) {
    case hzctl::CallResult::kOk:
      break;
    case hzctl::CallResult::kUnreachable:
      std::fprintf(stderr, "hzctl: %s\n", error.c_str());
      return kUnreachable;
    case hzctl::CallResult::kTimedOut:
      std::fprintf(stderr, "hzctl: %s\n", error.c_str());
      return kTimedOut;
  }
  if (as_json) {
    std::printf("%s\n", resp.dump(2).c_str());
    return resp.value("ok", false) ? kOk : kRefused;
  }
  if (!resp.value("ok", false)) {
    std::fprintf(stderr, "hzctl: %s\n", resp.value("error", std::string("failed")).c_str());
    return kRefused;
  }
  hzctl::PrintHuman(cmd, resp["result"]);
  return kOk;
}
