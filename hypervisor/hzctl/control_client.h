// hzctl's client of harmonaized's control socket: one JSON request line out,
// one JSON response line back, all within a deadline.
#ifndef HZ_HZCTL_CONTROL_CLIENT_H_
#define HZ_HZCTL_CONTROL_CLIENT_H_

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

namespace hzctl {

// hzctl's exit codes (main.cc's kExitCodes says them in words).
enum Exit { kOk = 0, kRefused = 1, kUsage = 2, kUnreachable = 3, kTimedOut = 4 };

enum class CallResult {
  kOk,           // *resp holds the service's answer
  kUnreachable,  // no connection, a broken one, or an answer that is not JSON
  kTimedOut,     // connected, but no complete answer before the deadline
};

// Sends req to the control socket at path and reads the answer into *resp.
// A daemon that accepts and never answers costs at most `timeout`; *error
// then says what was being waited for.
CallResult Call(const std::string& path, const nlohmann::json& req,
                std::chrono::milliseconds timeout, nlohmann::json* resp, std::string* error);

}  // namespace hzctl

#endif  // HZ_HZCTL_CONTROL_CLIENT_H_
