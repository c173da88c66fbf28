// Reference: Gloo's ring all-reduce over TCP loopback, fp32 sum, ranks in
// separate processes forked by this launcher, rendezvous through a FileStore
// in a fresh scratch directory (wrapped in a PrefixStore), the tcp device on
// 127.0.0.1. One JSON line per (p, size) from rank 0:
//   ref_gloo_allreduce [--ranks 2,4] [--full]
// Every timed iteration is gloo::barrier; t0; allreduce; t1. The time of an
// iteration is the maximum over ranks (a MAX all-reduce after the loop); the
// result is the median iteration. Every element is checked against p(p+1)/2.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <nlohmann/json.hpp>

#include "ref_sizes.h"

namespace {

template <class T>
void AllreduceMax(const std::shared_ptr<gloo::Context>& ctx, std::vector<T>& v) {
  gloo::AllreduceOptions o(ctx);
  o.setOutput(v.data(), v.size());
  o.setReduceFunction(
      static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<T>));
  gloo::allreduce(o);
}

int RunRank(int rank, int p, const std::string& dir, bool full) {
  gloo::rendezvous::FileStore file_store(dir);
  gloo::rendezvous::PrefixStore store("hz-ref", file_store);
  gloo::transport::tcp::attr attr("127.0.0.1");
  attr.ai_family = AF_INET;
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, p);
  ctx->connectFullMesh(store, dev);
  std::shared_ptr<gloo::Context> base = ctx;
  bool all_ok = true;
  for (const auto& run : hz::coll::bench::RefSizes(full)) {
    const size_t n = run.bytes / sizeof(float);
    std::vector<float> send(n, static_cast<float>(rank + 1)), recv(n, 0.0f);
    std::vector<double> times;
    for (int it = 0; it < run.warmup + run.iters; ++it) {
      gloo::BarrierOptions b(base);
      gloo::barrier(b);
      auto t0 = std::chrono::steady_clock::now();
      gloo::AllreduceOptions o(base);
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      o.setInput(send.data(), n);
      o.setOutput(recv.data(), n);
      o.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      gloo::allreduce(o);
      auto t1 = std::chrono::steady_clock::now();
      if (it >= run.warmup) times.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
    AllreduceMax(base, times);
    const float want = static_cast<float>(p) * (p + 1) / 2;
    std::vector<int> ok = {1};
    for (float x : recv) ok[0] &= x == want;
    ok[0] = -ok[0];  // MAX of -ok is -min(ok)
    AllreduceMax(base, ok);
    const bool good = ok[0] == -1;
    all_ok &= good;
    if (rank == 0) {
      const double t = hz::coll::bench::MedianOf(times);
      const double algbw = static_cast<double>(run.bytes) / t;
      nlohmann::json j = {{"ref", "gloo"},
                          {"op", "allreduce"},
                          {"algorithm", "ring"},
                          {"transport", "tcp-loopback"},
                          {"dtype", "fp32"},
                          {"p", p},
                          {"size", run.bytes},
                          {"iters", run.iters},
                          {"time_us", t * 1e6},
                          {"algbw_GBps", algbw / 1e9},
                          {"busbw_GBps", algbw * 2.0 * (p - 1) / p / 1e9},
                          {"check", good ? "ok" : "FAILED"}};
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
  }
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ranks = {2, 4};
  bool full = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--full") == 0) {
      full = true;
    } else if (std::strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
      ranks.clear();
      std::string list = argv[++i];
      size_t pos = 0;
      while (pos < list.size()) {
        size_t comma = list.find(',', pos);
        if (comma == std::string::npos) comma = list.size();
        int p = std::atoi(list.substr(pos, comma - pos).c_str());
        if (p < 1 || p > 64) {
          std::fprintf(stderr, "bad rank count in --ranks\n");
          return 2;
        }
        ranks.push_back(p);
        pos = comma + 1;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--ranks 2,4,8] [--full]\n", argv[0]);
      return 2;
    }
  }
  int status = 0;
  for (int p : ranks) {
    char tmpl[] = "/tmp/hz-gloo-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    const std::string dir = tmpl;
    std::vector<pid_t> kids;
    for (int r = 0; r < p; ++r) {
      pid_t pid = fork();
      if (pid < 0) {
        std::perror("fork");
        return 1;
      }
      if (pid == 0) {
        int rc = 1;
        try {
          rc = RunRank(r, p, dir, full);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        }
        std::fflush(stdout);
        _exit(rc);
      }
      kids.push_back(pid);
    }
    for (pid_t k : kids) {
      int ws = 0;
      waitpid(k, &ws, 0);
      if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) status = 1;
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return status;
}
