// One rank of cluster_allreduce_bench: either through the device (a container
// tenant on its host's VM socket, all-reduce of fp32 sum from registered
// memory, on a communicator without HZ_COMM_F_DETERMINISTIC, so reduced
// hierarchically) or flat Gloo (every rank a member of one Gloo group, the reference:
// what tenants do today across VMs). For each size it runs warm-up
// iterations, then timed ones, each after a barrier, and prints one JSON line
// per size with every iteration's time.
//
//   cluster_bench_rank device --socket PATH --uid-file FILE --rank R --nranks N
//                             [--create-uid] [--lossy] --sizes B,B,.. --iters N [--warmup N]
//   cluster_bench_rank gloo --store ADDR --key KEY --address IP --rank R --nranks N
//                           --sizes B,B,.. --iters N [--warmup N]
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "harmonaize/hz.h"
#include "hz/cluster/inter_host.h"
#include "hz_test/uid_file.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  uint32_t rank = 0, nranks = 0, iters = 5, warmup = 1;
  std::vector<size_t> sizes;
};

// Times `op` over each size; op(bytes) runs one all-reduce, barrier(), one barrier.
int Measure(const Args& a, const std::function<int(size_t)>& op,
            const std::function<int()>& barrier) {
  for (size_t bytes : a.sizes) {
    std::vector<double> us;
    for (uint32_t i = 0; i < a.warmup + a.iters; ++i) {
      if (int e = barrier(); e != 0) return e;
      const auto t0 = Clock::now();
      if (int e = op(bytes); e != 0) return e;
      const double t = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      if (i >= a.warmup) us.push_back(t);
    }
    std::printf("%s\n",
                nlohmann::json{{"rank", a.rank}, {"bytes", bytes}, {"us", us}}.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}

int RunDevice(const Args& a, const std::string& socket, const std::string& uid_file,
              bool create_uid, bool lossy) {
  hz_device_t* dev = nullptr;
  if (int e = hz_open(("vhost-user:" + socket).c_str(), &dev); e != 0) return e;
  hz_uid_t uid{};
  if (create_uid) {
    if (int e = hz_comm_get_uid(dev, &uid); e != 0) return e;
    if (!hz::testing::WriteUidFile(uid_file, uid)) return HZ_EIO;
  } else if (!hz::testing::ReadUidFile(uid_file, std::chrono::seconds(60), &uid)) {
    return HZ_ENOENT;
  }
  hz_comm_config cfg = HZ_COMM_CONFIG_INIT;
  cfg.timeout_ms = 120000;
  // Hierarchical: with HZ_COMM_F_DETERMINISTIC, fp32 across hosts is the
  // rank-order fold of every rank's contribution (SPEC §7.4.6).
  cfg.flags &= ~HZ_COMM_F_DETERMINISTIC;
  if (lossy) cfg.flags |= HZ_COMM_F_ALLOW_LOSSY;  // fp32 crosses hosts as bfloat16
  hz_comm_t* comm = nullptr;
  if (int e = hz_comm_init(dev, &uid, a.nranks, a.rank, &cfg, &comm); e != 0) return e;
  size_t max_bytes = 0;
  for (size_t b : a.sizes) max_bytes = std::max(max_bytes, b);
  void* buf = nullptr;
  if (int e = hz_mem_alloc(dev, max_bytes, &buf); e != 0) return e;
  std::fill_n(static_cast<float*>(buf), max_bytes / 4, 1.0f);
  int rc = Measure(
      a, [&](size_t b) { return hz_allreduce(comm, buf, buf, b / 4, HZ_FP32, HZ_SUM); },
      [&] { return hz_barrier(comm); });
  hz_comm_destroy(comm);
  hz_close(dev);
  return rc;
}

int RunGloo(const Args& a, const std::string& store, const std::string& key,
            const std::string& address) {
  auto addr = hz::cluster::RedisAddress::Parse(store);
  if (!addr.ok()) return 1;
  auto group = hz::cluster::ConnectGlooGroup(
      {*addr, key, address, a.rank, a.nranks, std::chrono::milliseconds(120000)});
  if (!group.ok()) {
    std::fprintf(stderr, "gloo: %s\n", group.status().ToString().c_str());
    return 1;
  }
  size_t max_bytes = 0;
  for (size_t b : a.sizes) max_bytes = std::max(max_bytes, b);
  std::vector<float> buf(max_bytes / 4, 1.0f);
  auto code = [](const hz::Status& s) { return s.ok() ? 0 : 1; };
  return Measure(
      a,
      [&](size_t b) {
        return code((*group)->AllReduce(buf.data(), b / 4, hz::cluster::InterHostType::kF32,
                                        hz::cluster::InterHostOp::kSum,
                                        hz::cluster::InterHostAlgorithm::kRing));
      },
      [&] { return code((*group)->Barrier()); });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cluster_bench_rank"};
  app.require_subcommand(1);
  Args a;
  std::string socket, uid_file, store, key, address;
  bool create_uid = false, lossy = false;
  for (CLI::App* sub : {app.add_subcommand("device"), app.add_subcommand("gloo")}) {
    sub->add_option("--rank", a.rank)->required();
    sub->add_option("--nranks", a.nranks)->required();
    sub->add_option("--sizes", a.sizes)->required()->delimiter(',');
    sub->add_option("--iters", a.iters);
    sub->add_option("--warmup", a.warmup);
  }
  CLI::App* dev = app.get_subcommand("device");
  dev->add_option("--socket", socket)->required();
  dev->add_option("--uid-file", uid_file)->required();
  dev->add_flag("--create-uid", create_uid);
  dev->add_flag("--lossy", lossy);
  CLI::App* gloo = app.get_subcommand("gloo");
  gloo->add_option("--store", store)->required();
  gloo->add_option("--key", key)->required();
  gloo->add_option("--address", address)->required();
  CLI11_PARSE(app, argc, argv);
  const int rc = dev->parsed() ? RunDevice(a, socket, uid_file, create_uid, lossy)
                               : RunGloo(a, store, key, address);
  if (rc != 0) std::fprintf(stderr, "cluster_bench_rank: failed (%d)\n", rc);
  return rc == 0 ? 0 : 1;
}
