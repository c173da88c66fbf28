// `hzctl upgrade [--binary PATH]`: starts harmonaized's live upgrade and
// follows it through the control socket until the new process answers there
// or the old one says why it kept serving.
#ifndef HZ_HZCTL_UPGRADE_CLI_H_
#define HZ_HZCTL_UPGRADE_CLI_H_

#include <chrono>
#include <string>

namespace hzctl {

// Returns hzctl's exit code; prints the outcome (as JSON with as_json).
int Upgrade(const std::string& socket, const std::string& binary, std::chrono::milliseconds timeout,
            bool as_json);

}  // namespace hzctl

#endif  // HZ_HZCTL_UPGRADE_CLI_H_
