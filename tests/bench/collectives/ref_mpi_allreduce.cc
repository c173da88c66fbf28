// Reference: Open MPI's MPI_Allreduce, fp32 sum over shared memory, one JSON
// line per size from rank 0. Run with
//   mpirun --allow-run-as-root [--oversubscribe] -np P ref_mpi_allreduce [--full]
// Every timed iteration is barrier; t0; allreduce; t1. The time of an
// iteration is the maximum over ranks; the result is the median iteration.
// Every element is checked against p(p+1)/2 after the loop.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "ref_sizes.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  bool full = argc > 1 && std::strcmp(argv[1], "--full") == 0;
  bool all_ok = true;
  for (const auto& run : hz::coll::bench::RefSizes(full)) {
    const size_t n = run.bytes / sizeof(float);
    std::vector<float> send(n, static_cast<float>(rank + 1)), recv(n, 0.0f);
    std::vector<double> times;
    for (int it = 0; it < run.warmup + run.iters; ++it) {
      MPI_Barrier(MPI_COMM_WORLD);
      auto t0 = std::chrono::steady_clock::now();
      MPI_Allreduce(send.data(), recv.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
      auto t1 = std::chrono::steady_clock::now();
      if (it >= run.warmup) times.push_back(std::chrono::duration<double>(t1 - t0).count());
    }
    std::vector<double> max_times(times.size());
    MPI_Reduce(times.data(), max_times.data(), static_cast<int>(times.size()), MPI_DOUBLE, MPI_MAX,
               0, MPI_COMM_WORLD);
    const float want = static_cast<float>(p) * (p + 1) / 2;
    int ok = 1;
    for (float x : recv) ok &= x == want;
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    all_ok &= all != 0;
    if (rank == 0) {
      const double t = hz::coll::bench::MedianOf(max_times);
      const double algbw = static_cast<double>(run.bytes) / t;
      nlohmann::json j = {{"ref", "openmpi"},
                          {"op", "allreduce"},
                          {"dtype", "fp32"},
                          {"p", p},
                          {"size", run.bytes},
                          {"iters", run.iters},
                          {"time_us", t * 1e6},
                          {"algbw_GBps", algbw / 1e9},
                          {"busbw_GBps", algbw * 2.0 * (p - 1) / p / 1e9},
                          {"check", all ? "ok" : "FAILED"}};
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
