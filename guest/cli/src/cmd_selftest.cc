// hz selftest: a one-rank communicator, all-reduces of a few types, a
// broadcast and a barrier, each result checked.
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <vector>

#include "cli.h"

namespace hz::cli {
namespace {

struct Check {
  std::string name;
  int err = HZ_OK;
  bool correct = true;
  double us = 0;
};

// With one rank a reduction returns its input: the check is that every
// element travelled and came back unchanged, for each element size.
template <typename T>
Check AllReduce(hz_comm_t* c, const char* name, hz_dtype dt, hz_redop op) {
  const size_t n = 1021;
  std::vector<T> in(n), out(n);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<T>(static_cast<int>(i % 97) - 40);
  Check k{name};
  auto t0 = std::chrono::steady_clock::now();
  k.err = hz_allreduce(c, in.data(), out.data(), n, dt, op);
  k.us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  k.correct = k.err == HZ_OK && std::memcmp(in.data(), out.data(), n * sizeof(T)) == 0;
  return k;
}

Check Timed(const char* name, const std::function<int()>& fn, const std::function<bool()>& ok) {
  Check k{name};
  auto t0 = std::chrono::steady_clock::now();
  k.err = fn();
  k.us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  k.correct = k.err == HZ_OK && ok();
  return k;
}

}  // namespace

int Selftest(const Options& o) {
  int code = kOk;
  std::unique_ptr<hz_device_t, decltype(&hz_close)> dev(Open(o, &code), &hz_close);
  if (!dev) return code;
  hz_uid_t uid;
  if (int err = hz_comm_get_uid(dev.get(), &uid); err != HZ_OK) return Error(o, "comm uid", err);
  hz_comm_t* comm = nullptr;
  if (int err = hz_comm_init(dev.get(), &uid, 1, 0, nullptr, &comm); err != HZ_OK)
    return Error(o, "one-rank communicator", err);

  std::vector<Check> checks;
  checks.push_back(AllReduce<float>(comm, "allreduce fp32 sum", HZ_FP32, HZ_SUM));
  checks.push_back(AllReduce<double>(comm, "allreduce fp64 max", HZ_FP64, HZ_MAX));
  checks.push_back(AllReduce<int32_t>(comm, "allreduce int32 min", HZ_INT32, HZ_MIN));
  checks.push_back(AllReduce<int64_t>(comm, "allreduce int64 prod", HZ_INT64, HZ_PROD));
  checks.push_back(AllReduce<uint8_t>(comm, "allreduce uint8 sum", HZ_UINT8, HZ_SUM));
  std::vector<int32_t> b(257, 0);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int32_t>(i * 3);
  std::vector<int32_t> br(b.size(), -1);
  checks.push_back(Timed(
      "broadcast int32",
      [&] { return hz_broadcast(comm, b.data(), br.data(), b.size(), HZ_INT32, 0); },
      [&] { return b == br; }));
  checks.push_back(Timed(
      "barrier", [&] { return hz_barrier(comm); }, [] { return true; }));
  int destroy_err = hz_comm_destroy(comm);

  bool all_ok = destroy_err == HZ_OK;
  int first_err = destroy_err;
  nlohmann::json list = nlohmann::json::array();
  std::ostringstream h;
  for (const Check& k : checks) {
    bool ok = k.err == HZ_OK && k.correct;
    all_ok = all_ok && ok;
    if (first_err == HZ_OK && k.err != HZ_OK) first_err = k.err;
    nlohmann::json j = {{"name", k.name}, {"ok", ok}, {"us", k.us}};
    if (k.err != HZ_OK) j["error"] = hz_strerror(k.err);
    list.push_back(j);
    char line[160];
    std::snprintf(line, sizeof(line), "%-24s %s %9.1f us%s%s\n", k.name.c_str(),
                  ok ? "ok  " : "FAIL", k.us, k.err != HZ_OK ? "  " : "",
                  k.err != HZ_OK ? hz_strerror(k.err) : (ok ? "" : "  wrong result"));
    h << line;
  }
  if (destroy_err != HZ_OK) h << "comm destroy: " << hz_strerror(destroy_err) << "\n";
  h << (all_ok ? "selftest passed\n" : "selftest FAILED\n");
  Print(o, {{"ok", all_ok}, {"checks", list}}, h.str());
  if (all_ok) return kOk;
  if (first_err == HZ_ENOTSUP) return kNotSupported;
  return first_err != HZ_OK ? kFailed : kSelftest;
}

}  // namespace hz::cli
