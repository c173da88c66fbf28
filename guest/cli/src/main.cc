// hz: the tenant's command-line view of the HarmonAIze device.
#include <CLI/CLI.hpp>

#include "cli.h"

int main(int argc, char** argv) {
  using namespace hz::cli;
  CLI::App app{"hz: inspect and exercise the HarmonAIze device from a tenant"};
  // Subcommands created from here on inherit both: --device and --json are
  // accepted after a subcommand too (hz status --json), and every --help
  // lists the exit codes.
  app.fallthrough();
  app.footer(
      "Device: --device SPEC (/dev/harmonaizeN or vhost-user:<socket>), else $HZ_DEVICE, else\n"
      "the first /dev/harmonaizeN.\n\n"
      "Exit codes: 0 success; 1 the device refused or failed the operation; 2 bad command\n"
      "line; 3 the device could not be opened; 4 the device does not offer the operation\n"
      "(HZ_ENOTSUP); 5 the self-test computed a wrong result.");
  app.set_version_flag("--version", "hz " HZ_PROJECT_VERSION, "print the version and exit");
  Options o;
  app.add_option("--device", o.device, "device to use");
  app.add_flag("--json", o.json, "machine-readable output (one JSON object per line)");
  app.require_subcommand(1);

  int rc = kOk;
  app.add_subcommand("status", "session, protocol version and granted features")->callback([&] {
    rc = Status(o);
  });
  app.add_subcommand("topology", "the allocation's devices and bandwidth classes")->callback([&] {
    rc = Topology(o);
  });

  auto* events = app.add_subcommand("events", "events waiting now, or --follow");
  bool follow = false;
  std::string topics = "all";
  int wait_ms = 200;
  events->add_flag("--follow,-f", follow, "keep printing events until interrupted");
  events->add_option("--topics", topics, "comma-separated topics (default: all)");
  events->add_option("--wait-ms", wait_ms, "without --follow: how long to wait for the next event")
      ->check(CLI::Range(0, 600000));
  bool approve = false;
  events->add_flag("--approve", approve,
                   "approve each approvable notice printed (an early start, SPEC 7.6.2)");
  events->callback([&] { rc = Events(o, follow, topics, wait_ms, approve); });

  auto* ckpt = app.add_subcommand("checkpoint", "checkpoint streams");
  ckpt->require_subcommand(1);
  uint32_t stream = 0;
  uint64_t save_step = 0;
  std::string restore_step = "latest", file;
  auto* list = ckpt->add_subcommand("list", "checkpoints of a stream");
  list->add_option("--stream", stream, "stream id")->required();
  list->callback([&] { rc = CheckpointList(o, stream); });
  std::string tier = "local_disk";
  uint32_t retention = 2;
  auto* policy = ckpt->add_subcommand("policy", "create a stream or set its policy");
  policy->add_option("--stream", stream, "stream id")->required();
  policy->add_option("--tier", tier, "host_memory, local_disk (default) or peer_host");
  policy->add_option("--retention", retention, "durable checkpoints kept (default 2)")
      ->check(CLI::Range(1, 1000000));
  policy->callback([&] { rc = CheckpointPolicy(o, stream, tier, retention); });
  auto* save = ckpt->add_subcommand("save", "save a file's contents as one slice");
  save->add_option("--stream", stream, "stream id (created if it has no policy)")->required();
  save->add_option("--step", save_step, "step number")->required();
  save->add_option("file", file, "file to save")->required();
  save->callback([&] { rc = CheckpointSave(o, stream, save_step, file); });
  auto* restore = ckpt->add_subcommand("restore", "restore a checkpoint into a file");
  restore->add_option("--stream", stream, "stream id")->required();
  restore->add_option("--step", restore_step, "step number or 'latest' (default)");
  restore->add_option("file", file, "file to write")->required();
  restore->callback([&] { rc = CheckpointRestore(o, stream, restore_step, file); });
  uint64_t delete_step = 0;
  auto* del = ckpt->add_subcommand("delete",
                                   "delete a checkpoint (and, on the peer-host tier, its replica)");
  del->add_option("--stream", stream, "stream id")->required();
  del->add_option("--step", delete_step, "step number")->required();
  del->callback([&] { rc = CheckpointDelete(o, stream, delete_step); });

  app.add_subcommand("selftest", "one-rank collectives, checked")->callback([&] {
    rc = Selftest(o);
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kOk : kUsage;
  }
  return rc;
}
