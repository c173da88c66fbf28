// One member of an inter-host group (ConnectGlooGroup), for the multi-host
// tests: run in each host's network namespace, it forms the group through the
// cluster store, runs every operation of InterHostGroup on data whose result
// it can check exactly, and prints one JSON line.
//
//   gloo_group_probe --store ADDR --key KEY --address IP --rank R --size N
//                    [--count N] [--timeout-ms MS] [--stop-after-connect]
//
// --stop-after-connect: after forming the group the member stops (SIGSTOP to
// itself), as a hung host would; the others' next operation must fail.
// Exit status: 0 all checks passed; 1 an operation failed (the JSON says
// which and why); 2 a wrong result; 3 usage.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "hz/cluster/inter_host.h"

namespace {

using hz::cluster::InterHostAlgorithm;
using hz::cluster::InterHostOp;
using hz::cluster::InterHostType;

int Report(nlohmann::json j, int code) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  return code;
}

double Ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}

// Member r contributes r + 1 + (i % 7) at element i: every sum is an exact
// small integer in fp32.
std::vector<float> Contribution(uint32_t rank, size_t count) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(rank + 1 + i % 7);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gloo_group_probe"};
  std::string store, key, address;
  uint32_t rank = 0, size = 0, timeout_ms = 5000;
  size_t count = 1 << 16;
  bool stop_after_connect = false;
  app.add_option("--store", store)->required();
  app.add_option("--key", key)->required();
  app.add_option("--address", address)->required();
  app.add_option("--rank", rank)->required();
  app.add_option("--size", size)->required();
  app.add_option("--count", count);
  app.add_option("--timeout-ms", timeout_ms);
  app.add_flag("--stop-after-connect", stop_after_connect);
  CLI11_PARSE(app, argc, argv);

  nlohmann::json out = {{"rank", rank}, {"size", size}};
  hz::StatusOr<hz::cluster::RedisAddress> addr = hz::cluster::RedisAddress::Parse(store);
  if (!addr.ok()) return Report({{"error", addr.status().ToString()}}, 3);
  const auto t0 = std::chrono::steady_clock::now();
  auto group = hz::cluster::ConnectGlooGroup(
      {*addr, key, address, rank, size, std::chrono::milliseconds(timeout_ms)});
  if (!group.ok()) {
    out["failed"] = "connect";
    out["error"] = group.status().ToString();
    out["ms"] = Ms(t0);
    return Report(out, 1);
  }
  if (stop_after_connect) {
    Report({{"rank", rank}, {"connected", true}}, 0);
    raise(SIGSTOP);
  }
  auto fail = [&](const char* op, const hz::Status& s) {
    out["failed"] = op;
    out["error"] = s.ToString();
    out["ms"] = Ms(t0);
    return Report(out, 1);
  };
  const uint64_t tri = uint64_t{size} * (size + 1) / 2;  // sum of r + 1 over members
  for (InterHostAlgorithm algo : hz::cluster::kInterHostAlgorithms) {
    std::vector<float> v = Contribution(rank, count);
    const auto t = std::chrono::steady_clock::now();
    hz::Status s =
        (*group)->AllReduce(v.data(), v.size(), InterHostType::kF32, InterHostOp::kSum, algo);
    if (!s.ok()) return fail("allreduce", s);
    for (size_t i = 0; i < count; ++i) {
      if (v[i] != static_cast<float>(tri + size * (i % 7))) {
        out["wrong"] = "allreduce";
        out["index"] = i;
        return Report(out, 2);
      }
    }
    out[std::string(hz::cluster::InterHostAlgorithmName(algo)) + "_ms"] = Ms(t);
  }
  int64_t mx = rank * 10;
  if (hz::Status s = (*group)->AllReduce(&mx, 1, InterHostType::kI64, InterHostOp::kMax,
                                         InterHostAlgorithm::kRing);
      !s.ok() || mx != int64_t{size - 1} * 10) {
    return s.ok() ? Report((out["wrong"] = "max", out), 2) : fail("max", s);
  }
  std::vector<char> b(4096, static_cast<char>(rank == size - 1 ? 'R' : 'x'));
  if (hz::Status s = (*group)->Broadcast(b.data(), b.size(), size - 1); !s.ok()) {
    return fail("broadcast", s);
  }
  if (b != std::vector<char>(4096, 'R')) return Report((out["wrong"] = "broadcast", out), 2);
  uint32_t mine = rank * 3 + 1;
  std::vector<uint32_t> all(size);
  if (hz::Status s = (*group)->AllGather(&mine, all.data(), sizeof(mine)); !s.ok()) {
    return fail("allgather", s);
  }
  for (uint32_t r = 0; r < size; ++r) {
    if (all[r] != r * 3 + 1) return Report((out["wrong"] = "allgather", out), 2);
  }
  if (hz::Status s = (*group)->Barrier(); !s.ok()) return fail("barrier", s);
  out["ok"] = true;
  out["ms"] = Ms(t0);
  return Report(out, 0);
}
