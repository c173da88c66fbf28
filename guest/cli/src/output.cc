// Output and error reporting shared by the subcommands.
#include <cstdio>
#include <cstdlib>

#include "cli.h"

namespace hz::cli {

void Print(const Options& o, const nlohmann::json& result, const std::string& human) {
  if (o.json) {
    std::printf("%s\n", result.dump().c_str());
  } else {
    std::printf("%s", human.c_str());
  }
  std::fflush(stdout);
}

int Error(const Options& o, const std::string& what, int err) {
  return Error(o, what, err, err == HZ_ENOTSUP ? kNotSupported : kFailed);
}

int Error(const Options& o, const std::string& what, int err, int code) {
  std::string msg = what + ": " + hz_strerror(err);
  if (err == HZ_ENOTSUP) msg += " (the device does not offer this operation)";
  if (o.json) {
    nlohmann::json j = {{"error", msg}, {"code", err}, {"exit", code}};
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  } else {
    std::fprintf(stderr, "hz: %s\n", msg.c_str());
  }
  return code;
}

hz_device_t* Open(const Options& o, int* code) {
  hz_device_t* dev = nullptr;
  const char* spec = o.device.empty() ? nullptr : o.device.c_str();
  int err = hz_open(spec, &dev);
  if (err == HZ_OK) return dev;
  const char* env = std::getenv("HZ_DEVICE");
  std::string where =
      spec ? o.device : (env ? std::string("$HZ_DEVICE=") + env : "first /dev/harmonaizeN");
  *code = Error(o, "cannot open the device (" + where + ")", err, kNoDevice);
  return nullptr;
}

}  // namespace hz::cli
