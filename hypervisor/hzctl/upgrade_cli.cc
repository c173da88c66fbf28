#include "upgrade_cli.h"

#include <cstdio>
#include <thread>

#include <nlohmann/json.hpp>

#include "control_client.h"

namespace hzctl {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// How often the service's status is asked for while the upgrade runs.
constexpr auto kPoll = std::chrono::milliseconds(100);

int Report(bool as_json, const json& out, int code) {
  if (as_json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else if (code == kOk) {
    std::printf("upgraded: process %lld handed over to process %lld\n",
                out["from"].get<long long>(), out["pid"].get<long long>());
  } else {
    std::fprintf(stderr, "hzctl: upgrade: %s\n", out.value("error", std::string("failed")).c_str());
  }
  return code;
}

}  // namespace

int Upgrade(const std::string& socket, const std::string& binary, std::chrono::milliseconds timeout,
            bool as_json) {
  json req = {{"cmd", "upgrade"}};
  if (!binary.empty()) req["binary"] = binary;
  json resp;
  std::string error;
  switch (Call(socket, req, timeout, &resp, &error)) {
    case CallResult::kOk:
      break;
    case CallResult::kUnreachable:
      return Report(as_json, {{"ok", false}, {"error", error}}, kUnreachable);
    case CallResult::kTimedOut:
      return Report(as_json, {{"ok", false}, {"error", error}}, kTimedOut);
  }
  if (!resp.value("ok", false)) return Report(as_json, resp, kRefused);
  const json from = resp["result"]["pid"];
  // The old process answers until it leaves; the new one answers on the same
  // socket from then on. A call that fails in between is asked again.
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    std::this_thread::sleep_for(kPoll);
    json status;
    if (Call(socket, {{"cmd", "status"}}, timeout, &status, &error) != CallResult::kOk ||
        !status.value("ok", false)) {
      continue;
    }
    const json& s = status["result"];
    if (s.value("pid", json()) != from) {
      return Report(as_json, {{"ok", true}, {"from", from}, {"pid", s["pid"]}}, kOk);
    }
    const json upgrade = s.value("upgrade", json::object());
    if (upgrade.value("state", std::string()) == "failed") {
      return Report(as_json,
                    {{"ok", false},
                     {"error", upgrade.value("error", std::string("failed")) + "; process " +
                                   from.dump() + " still serves"}},
                    kRefused);
    }
  }
  return Report(as_json, {{"ok", false}, {"error", "the upgrade did not finish in time"}},
                kTimedOut);
}

}  // namespace hzctl
