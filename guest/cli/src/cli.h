// The hz command: shared pieces of its subcommands.
#ifndef HZ_GUEST_CLI_SRC_CLI_H_
#define HZ_GUEST_CLI_SRC_CLI_H_

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "harmonaize/hz.h"

namespace hz::cli {

// Exit codes (also listed by --help).
enum Exit {
  kOk = 0,
  kFailed = 1,        // the device refused or failed the operation
  kUsage = 2,         // bad command line
  kNoDevice = 3,      // the device could not be opened
  kNotSupported = 4,  // the device does not offer the operation (HZ_ENOTSUP)
  kSelftest = 5,      // the self-test computed a wrong result
};

struct Options {
  std::string device;  // empty: $HZ_DEVICE, else the first /dev/harmonaizeN
  bool json = false;
};

// Prints a result: result.dump() with --json, else the human text.
void Print(const Options& o, const nlohmann::json& result, const std::string& human);
// Reports err from `what` (stderr, or a JSON error object on stdout) and
// returns the exit code for it.
int Error(const Options& o, const std::string& what, int err);
// The same with the exit code given; the JSON object's "exit" is that code,
// the status the process ends with.
int Error(const Options& o, const std::string& what, int err, int code);
// Opens the device or reports why not (exit code in *code).
hz_device_t* Open(const Options& o, int* code);

int Status(const Options& o);
int Topology(const Options& o);
int Events(const Options& o, bool follow, const std::string& topics, int wait_ms, bool approve);
int CheckpointList(const Options& o, uint32_t stream);
int CheckpointDelete(const Options& o, uint32_t stream, uint64_t step);
int CheckpointPolicy(const Options& o, uint32_t stream, const std::string& tier,
                     uint32_t retention);
int CheckpointSave(const Options& o, uint32_t stream, uint64_t step, const std::string& file);
int CheckpointRestore(const Options& o, uint32_t stream, const std::string& step,
                      const std::string& file);
int Selftest(const Options& o);

}  // namespace hz::cli

#endif  // HZ_GUEST_CLI_SRC_CLI_H_
