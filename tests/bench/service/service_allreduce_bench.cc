// All-reduce through the real harmonaized: p rank processes on virtio-user
// (as container tenants), fp32 sum, separate send and recv regions.
//
// Every result is a JSON object on its own line, with ratios against
// references measured in the same run:
//   - a STREAM-style copy, the best of memcpy and non-temporal stores on one
//     thread and on every CPU (memory bandwidth); the memory-traffic bound of
//     an all-reduce reads p inputs and writes p outputs: 2 * p * B bytes;
//   - from 16 MiB, one_pass_allreduce.h's kernel over p arrays of the size:
//     each input read once, the sum streamed to every output in one pass, the
//     fewest bytes in the simplest order. one_pass_ratio_to_memory_bound is
//     how much of the bound it reaches here, with 2p memory streams at once
//     where the copy has two (best against best); ratio_to_one_pass is how
//     close the service comes to it (median against median);
//   - Open MPI's and Gloo's all-reduce (the programs of tests/bench/collectives),
//     when they were built;
//   - with --low-latency, how long one process takes to hand a CPU to another
//     by yielding (process_turn.h): time_in_process_turns is how many such
//     hand-overs an operation's time is worth.
// Beside each time, the CPU-seconds per timed iteration (a barrier and the
// all-reduce) of the service (all its threads) and of the tenant (all ranks
// together), so that a latency bought with spinning shows; and at the end the
// service's CPU use over a window in which 8 tenants are connected and idle.
//
// Timing follows nccl-tests: per iteration, barrier, t0, all-reduce, t1; the
// iteration's time is the maximum over ranks, the result the median.
// busbw = algbw * 2 (p - 1) / p.
//
// Each rank count runs in rounds (3 by default): the copy, Open MPI and Gloo,
// then the service, back to back. Ratios are taken within a round and the
// line of a size reports their median, with every round's ratios beside it.
//
//   service_allreduce_bench [--full] [--ranks 2,4,8] [--iters-scale X]
//                           [--rounds N]
//                           [--sizes 1M,16M]   (only these sizes)
//                           [--no-references]  (skip Open MPI and Gloo; profiling)
//                           [--io-threads N]   (the daemon's --worker-threads, default 2)
//                           [--poll-us N]      (its --connection-poll-us, default its own)
//                           [--low-latency]    (communicators with HZ_COMM_F_LOW_LATENCY)
//                           [--tenant-spin-us N] (ranks' waits spin N us before they sleep,
//                                               as the library's HZ_LATENCY_POLL_US, at most
//                                               the device's polling window, none where it
//                                               does not poll; 0..100000)
//                           [--latency-poll-us N] (the daemon's [device] low_latency_poll_us:
//                                               how long it polls a low-latency rank's
//                                               queue; 0: it does not, the ranks kick)
//                           [--idle-s S]       (the idle window, default 10; 0: none)
//                           [--no-idle-class]  (bulk threads at their nice values:
//                                               bulk_idle_class = false)
//                           [--worker-poll-us N] (the daemon's [collectives] worker_poll_us:
//                                               how long its workers poll for their next
//                                               task; 0: they sleep at once)
//                           [--stream-min N]   (the daemon's [collectives] stream_min_bytes;
//                                               0: no non-temporal stores)
//                           [--single-thread-max N] (the daemon's [collectives]
//                                               single_thread_max_bytes; 0: split every
//                                               operation past the inline size)
//                           [--copy-bytes N]   (the STREAM copy's arrays; default four
//                                               times the last-level cache, 64M or more)
//                           [--extent-bytes N] (every send and recv region registered in
//                                               extents of N bytes, as a guest's pages; the
//                                               device takes 4096 a region: 16 MiB at 4096)
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cpu_time.h"
#include "hz_client.h"
#include "latency_spin.h"
#include "memory_references.h"
#include "process_turn.h"
#include "ref_sizes.h"
#include "service_harness.h"

namespace {

using hz::bench::CopyArrays;
using hz::bench::MemoryBandwidthGBps;
using hz::bench::OnePassReferences;
using hz::testing::GuestBuffer;
using hz::testing::HzClient;
using hz::testing::Pipe;
using hz::testing::ServiceProcess;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

// Warm-up and timed iterations per size: the reference programs' own counts
// where they measure the size, so both results are medians of as many
// iterations; elsewhere about 64 MiB of data.
hz::coll::bench::SizeRun Runs(size_t bytes, double scale) {
  for (const auto& r : hz::coll::bench::RefSizes(/*full=*/true)) {
    if (r.bytes == bytes) {
      return {bytes, r.warmup, std::max(5, static_cast<int>(r.iters * scale))};
    }
  }
  double it = (64.0 * (1 << 20)) / static_cast<double>(bytes) * scale;
  return {bytes, 1, static_cast<int>(std::clamp(it, 5.0, 200.0))};
}

// One job's results per size: the median time, and CPU-seconds per timed
// iteration of the service and of all ranks together.
struct JobResult {
  std::vector<double> medians, service_cpu, tenant_cpu;
  // The device's polling window as rank 0 read it (none: it did not say).
  std::optional<uint32_t> device_window_us;
};

// How a job's ranks run: iteration counts scaled by scale, communicators
// low-latency or not, waits that spin tenant_spin_us first, and every
// send and recv buffer registered in extents of extent_bytes (0: one), as a
// guest's buffer arrives: one per page it does not have contiguous.
struct JobOptions {
  double scale = 1.0;
  bool low_latency = false;
  long tenant_spin_us = 0;
  uint64_t extent_bytes = 0;
};

// Runs one p-rank job over all sizes.
JobResult RunJob(ServiceProcess& svc, int p, const std::vector<size_t>& sizes,
                 const JobOptions& o) {
  const double scale = o.scale;
  std::string tenant = "bench" + std::to_string(p);
  std::vector<std::string> vms = svc.TenantWithVms(tenant, p);
  if (static_cast<int>(vms.size()) != p) return {};
  const pid_t svc_pid = svc.pid();
  size_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  int max_iters = 0;
  for (size_t s : sizes) max_iters = std::max(max_iters, Runs(s, scale).iters);
  // times[size][iter][rank], shared with the rank processes.
  size_t slots = sizes.size() * max_iters * p;
  // Then CPU-seconds over each size's timed iterations: cpu[size][rank], and
  // the service's at cpu[size][p] (measured by rank 0).
  // Last, the device's polling window as rank 0 read it (-1: not reported).
  const size_t cpu_slots = sizes.size() * (p + 1);
  const size_t map_bytes = (slots + cpu_slots + 1) * sizeof(double);
  auto* times = static_cast<double*>(
      mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  double* const cpu = times + slots;
  double* const window = cpu + cpu_slots;
  *window = -1;  // until rank 0 reads it
  std::vector<Pipe> pipes(p);
  std::vector<int> codes = hz::testing::RunRanks(p, [&](int rank) {
    HzClient c;
    if (!c.Connect(vms[rank], 2 * max_bytes + (16 << 20)) || c.Hello() != HZ_S_OK) return 2;
    hz_comm_uid uid{};
    if (rank == 0) {
      if (c.NewUid(&uid) != HZ_S_OK) return 3;
      for (int i = 1; i < p; ++i) pipes[i].Send(&uid, sizeof(uid));
    } else if (!pipes[rank].Receive(&uid, sizeof(uid), 60000)) {
      return 4;
    }
    uint64_t comm = 0;
    const uint32_t comm_flags =
        HZ_COMM_F_DETERMINISTIC | (o.low_latency ? uint32_t{HZ_COMM_F_LOW_LATENCY} : 0u);
    if (c.InitComm(uid, p, rank, &comm, 120000, comm_flags) != HZ_S_OK) return 5;
    // As the tenant library waits for a low-latency communicator's
    // operations with HZ_LATENCY_POLL_US set: within the device's window.
    const std::optional<uint32_t> device_window = hz::lib::DeviceWindow(c.config());
    c.set_spin(hz::lib::SpinWithin(o.tenant_spin_us, device_window));
    if (rank == 0) *window = device_window ? static_cast<double>(*device_window) : -1;
    GuestBuffer s, r;
    if (o.extent_bytes != 0 &&
        (max_bytes + o.extent_bytes - 1) / o.extent_bytes > c.config().max_extents) {
      std::fprintf(stderr,
                   "--extent-bytes %llu: a %zu-byte buffer needs more than the device's %u "
                   "extents per region\n",
                   static_cast<unsigned long long>(o.extent_bytes), max_bytes,
                   static_cast<unsigned>(c.config().max_extents));
      return 10;
    }
    const auto reg = [&](uint32_t flags, GuestBuffer* b) {
      return o.extent_bytes == 0 ? c.Register(max_bytes, 1, flags, b)
                                 : c.RegisterInExtents(max_bytes, o.extent_bytes, flags, b);
    };
    if (reg(HZ_REGION_F_READ, &s) != HZ_S_OK || reg(HZ_REGION_F_WRITE, &r) != HZ_S_OK) {
      return 6;
    }
    std::vector<float> ones(max_bytes / 4, 1.0f);
    s.Write(0, ones.data(), max_bytes);
    uint64_t seq = 0;
    for (size_t si = 0; si < sizes.size(); ++si) {
      size_t bytes = sizes[si];
      const hz::coll::bench::SizeRun run = Runs(bytes, scale);
      double self0 = 0, svc0 = 0;
      for (int it = -run.warmup; it < run.iters; ++it) {
        if (it == 0) {
          self0 = hz::bench::SelfCpuSeconds();
          if (rank == 0) svc0 = hz::bench::ProcessCpuSeconds(svc_pid);
        }
        hz_coll_args b{};
        b.comm = comm;
        b.seq = seq++;
        if (c.Coll(2, HZ_OP_BARRIER, b) != HZ_S_OK) return 7;
        hz_coll_args a{};
        a.comm = comm;
        a.seq = seq++;
        a.count = bytes / 4;
        a.dtype = HZ_FP32;
        a.redop = HZ_SUM;
        a.send = hz::testing::SliceOf(s, 0, bytes);
        a.recv = hz::testing::SliceOf(r, 0, bytes);
        auto t0 = Clock::now();
        if (c.Coll(2, HZ_OP_ALLREDUCE, a) != HZ_S_OK) return 8;
        double t = hz::bench::SecondsSince(t0);
        if (it >= 0) times[(si * max_iters + it) * p + rank] = t;
      }
      cpu[si * (p + 1) + rank] = hz::bench::SelfCpuSeconds() - self0;
      if (rank == 0) cpu[si * (p + 1) + p] = hz::bench::ProcessCpuSeconds(svc_pid) - svc0;
      float check = 0;
      r.Read(bytes - 4, &check, 4);
      if (check != static_cast<float>(p)) return 9;
    }
    return 0;
  });
  JobResult out;
  bool ok = std::all_of(codes.begin(), codes.end(), [](int c) { return c == 0; });
  for (size_t si = 0; ok && si < sizes.size(); ++si) {
    const int iters = Runs(sizes[si], scale).iters;
    double ranks_cpu = 0;
    for (int rank = 0; rank < p; ++rank) ranks_cpu += cpu[si * (p + 1) + rank];
    out.tenant_cpu.push_back(ranks_cpu / iters);
    out.service_cpu.push_back(cpu[si * (p + 1) + p] / iters);
    std::vector<double> per_iter;
    for (int it = 0; it < iters; ++it) {
      double m = 0;
      for (int rank = 0; rank < p; ++rank) m = std::max(m, times[(si * max_iters + it) * p + rank]);
      per_iter.push_back(m);
    }
    std::sort(per_iter.begin(), per_iter.end());
    out.medians.push_back(per_iter[per_iter.size() / 2]);
  }
  if (!ok) {
    std::fprintf(stderr, "p=%d: rank exit codes:", p);
    for (int c : codes) std::fprintf(stderr, " %d", c);
    std::fprintf(stderr, "\n");
  }
  if (*window >= 0) out.device_window_us = static_cast<uint32_t>(*window);
  munmap(times, map_bytes);
  for (const std::string& vm : vms) svc.Control({{"cmd", "vm.unbind"}, {"socket", vm}});
  return out;
}

// The service's CPU use while `tenants` tenants are connected (a VM each,
// HELLO done) and send nothing, over `window_s` seconds after a second to
// settle. Polling that never stops shows here.
json IdleCpu(ServiceProcess& svc, int tenants, double window_s) {
  std::vector<std::unique_ptr<HzClient>> clients;
  std::vector<std::string> sockets;
  for (int t = 0; t < tenants; ++t) {
    std::vector<std::string> vm = svc.TenantWithVms("idle" + std::to_string(t), 1);
    if (vm.size() != 1) return {{"bench", "service_idle"}, {"error", "cannot bind a VM"}};
    sockets.push_back(vm[0]);
    clients.push_back(std::make_unique<HzClient>());
    if (!clients.back()->Connect(vm[0], 16 << 20) || clients.back()->Hello() != HZ_S_OK) {
      return {{"bench", "service_idle"}, {"error", "a tenant could not connect"}};
    }
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double svc0 = hz::bench::ProcessCpuSeconds(svc.pid());
  const double self0 = hz::bench::SelfCpuSeconds();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(window_s));
  const double wall = hz::bench::SecondsSince(t0);
  const double service = hz::bench::ProcessCpuSeconds(svc.pid()) - svc0;
  const double tenant = hz::bench::SelfCpuSeconds() - self0;
  clients.clear();
  for (const std::string& s : sockets) svc.Control({{"cmd", "vm.unbind"}, {"socket", s}});
  return {{"bench", "service_idle"},
          {"tenants", tenants},
          {"window_s", wall},
          {"service_cpu_s", service},
          {"service_cpu_share", service / wall},
          {"tenant_cpu_s", tenant}};
}

// Runs a reference program of tests/bench/collectives (JSON lines); returns
// bytes -> busbw for the sizes it measured. Empty when unavailable.
[[maybe_unused]] std::vector<std::pair<size_t, double>> Reference(const std::string& cmd) {
  std::vector<std::pair<size_t, double>> out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char line[4096];
  while (fgets(line, sizeof(line), f) != nullptr) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    // The reference programs print {"size": bytes, "busbw_GBps": ...}.
    const char* size_key = j.contains("size") ? "size" : "bytes";
    const char* bw_key = j.contains("busbw_GBps") ? "busbw_GBps" : "busbw_gbps";
    if (j.contains(size_key) && j[size_key].is_number() && j.contains(bw_key) &&
        j[bw_key].is_number() && j.value("check", std::string("ok")) == "ok") {
      out.push_back({j[size_key].get<size_t>(), j[bw_key].get<double>()});
    }
  }
  pclose(f);
  return out;
}

double Lookup(const std::vector<std::pair<size_t, double>>& ref, size_t bytes) {
  for (const auto& [b, v] : ref) {
    if (b == bytes) return v;
  }
  return 0;
}

// One size's measurements, one entry per round.
struct SizeRounds {
  std::vector<double> time_s, to_memory, mpi_gbps, to_mpi, gloo_gbps, to_gloo;
  std::vector<double> to_one_pass, one_pass_to_memory;
  std::vector<double> service_cpu_s, tenant_cpu_s;  // per iteration
  std::vector<double> process_turn_us, in_turns;    // with --low-latency
};

json MedianOrNull(const std::vector<double>& v) {
  return v.empty() ? json(nullptr) : json(hz::coll::bench::MedianOf(v));
}

// The result line of one size: medians over the rounds, and every round's
// ratios as measured.
json Summary(int p, size_t bytes, const JobOptions& o, const SizeRounds& r) {
  const double t = hz::coll::bench::MedianOf(r.time_s);
  const double algbw = bytes / t / 1e9;
  return {{"bench", "service_allreduce"},
          {"dtype", "fp32"},
          {"op", "sum"},
          {"ranks", p},
          {"bytes", bytes},
          {"low_latency", o.low_latency},
          {"tenant_spin_us", o.tenant_spin_us},
          {"extent_bytes", o.extent_bytes},
          {"rounds", r.time_s.size()},
          {"time_us", t * 1e6},
          {"algbw_gbps", algbw},
          {"busbw_gbps", algbw * 2.0 * (p - 1) / p},
          {"service_cpu_s_per_iteration", MedianOrNull(r.service_cpu_s)},
          {"tenant_cpu_s_per_iteration", MedianOrNull(r.tenant_cpu_s)},
          {"mpi_busbw_gbps", MedianOrNull(r.mpi_gbps)},
          {"gloo_busbw_gbps", MedianOrNull(r.gloo_gbps)},
          {"ratio_to_memory_bound", MedianOrNull(r.to_memory)},
          {"ratio_to_mpi", MedianOrNull(r.to_mpi)},
          {"ratio_to_gloo", MedianOrNull(r.to_gloo)},
          {"ratio_to_one_pass", MedianOrNull(r.to_one_pass)},
          {"one_pass_ratio_to_memory_bound", MedianOrNull(r.one_pass_to_memory)},
          {"process_turn_us", MedianOrNull(r.process_turn_us)},
          {"time_in_process_turns", MedianOrNull(r.in_turns)},
          {"round_ratios_to_memory_bound", r.to_memory},
          {"round_ratios_to_one_pass", r.to_one_pass},
          {"round_ratios_to_mpi", r.to_mpi},
          {"round_ratios_to_gloo", r.to_gloo},
          {"round_times_in_process_turns", r.in_turns}};
}

// "4K", "1M", "16M" or a plain byte count; 0 when it is none of these.
size_t ParseBytes(const char* text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || v == 0 || v > (1ull << 40)) return 0;
  switch (*end) {
    case '\0':
      return v;
    case 'K':
      return end[1] == '\0' ? v << 10 : 0;
    case 'M':
      return end[1] == '\0' ? v << 20 : 0;
    default:
      return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool full = false;
  std::vector<int> ranks = {2, 4, 8};
  std::string io_threads = "2";
  std::string poll_us;  // empty: the daemon's default
  std::vector<size_t> only_sizes;
  bool references = true;
  int rounds = 3;
  double idle_s = 10;
  JobOptions job_options;
  bool idle_class = true;            // the daemon's bulk_idle_class
  long long stream_min = -1;         // -1: the daemon's default
  long long single_thread_max = -1;  // likewise
  long worker_poll_us = -1;          // -1: the daemon's default
  long latency_poll_us = -1;         // likewise
  size_t copy_bytes = 0;             // 0: STREAM's rule
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--full") {
      full = true;
    } else if (a == "--ranks" && i + 1 < argc) {
      ranks.clear();
      for (char* t = std::strtok(argv[++i], ","); t; t = std::strtok(nullptr, ",")) {
        ranks.push_back(std::atoi(t));
      }
    } else if (a == "--iters-scale" && i + 1 < argc) {
      job_options.scale = std::atof(argv[++i]);
    } else if (a == "--io-threads" && i + 1 < argc) {
      io_threads = argv[++i];
    } else if (a == "--poll-us" && i + 1 < argc) {
      poll_us = argv[++i];
    } else if (a == "--sizes" && i + 1 < argc) {
      for (char* t = std::strtok(argv[++i], ","); t; t = std::strtok(nullptr, ",")) {
        only_sizes.push_back(ParseBytes(t));
        if (only_sizes.back() == 0) {
          std::fprintf(stderr, "--sizes: '%s' is not a size (4K, 1M, 16777216 ...)\n", t);
          return 2;
        }
      }
    } else if (a == "--idle-s" && i + 1 < argc) {
      idle_s = std::atof(argv[++i]);
      if (idle_s < 0 || idle_s > 3600) {
        std::fprintf(stderr, "--idle-s: 0 to 3600\n");
        return 2;
      }
    } else if (a == "--low-latency") {
      job_options.low_latency = true;
    } else if (a == "--tenant-spin-us" && i + 1 < argc) {
      job_options.tenant_spin_us = std::atol(argv[++i]);
      if (job_options.tenant_spin_us < 0 ||
          job_options.tenant_spin_us > hz::lib::kMaxLatencySpinUs) {
        std::fprintf(stderr, "--tenant-spin-us: 0 to %ld\n", hz::lib::kMaxLatencySpinUs);
        return 2;
      }
    } else if (a == "--extent-bytes" && i + 1 < argc) {
      const long long e = std::atoll(argv[++i]);
      if (e < 0 || e % 64 != 0) {
        std::fprintf(stderr, "--extent-bytes: a multiple of 64 (0: one extent)\n");
        return 2;
      }
      job_options.extent_bytes = static_cast<uint64_t>(e);
    } else if (a == "--copy-bytes" && i + 1 < argc) {
      copy_bytes = ParseBytes(argv[++i]);
      if (copy_bytes < (1u << 20)) {
        std::fprintf(stderr, "--copy-bytes: 1M or more\n");
        return 2;
      }
    } else if (a == "--no-references") {
      references = false;
    } else if (a == "--no-idle-class") {
      idle_class = false;
    } else if (a == "--stream-min" && i + 1 < argc) {
      stream_min = std::atoll(argv[++i]);
      if (stream_min < 0) {
        std::fprintf(stderr, "--stream-min: a byte count, 0 or more\n");
        return 2;
      }
    } else if (a == "--single-thread-max" && i + 1 < argc) {
      single_thread_max = std::atoll(argv[++i]);
      if (single_thread_max < 0) {
        std::fprintf(stderr, "--single-thread-max: a byte count, 0 or more\n");
        return 2;
      }
    } else if (a == "--worker-poll-us" && i + 1 < argc) {
      worker_poll_us = std::atol(argv[++i]);
      if (worker_poll_us < 0 || worker_poll_us > 100000) {
        std::fprintf(stderr, "--worker-poll-us: 0 to 100000\n");
        return 2;
      }
    } else if (a == "--latency-poll-us" && i + 1 < argc) {
      latency_poll_us = std::atol(argv[++i]);
      if (latency_poll_us < 0 || latency_poll_us > 100000) {
        std::fprintf(stderr, "--latency-poll-us: 0 to 100000\n");
        return 2;
      }
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
      if (rounds < 1 || rounds > 99) {
        std::fprintf(stderr, "--rounds: 1 to 99\n");
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--full] [--ranks 2,4,8] [--sizes 1M,16M] [--no-references]\n"
                   "          [--rounds N] [--iters-scale X] [--io-threads N] [--poll-us N]\n"
                   "          [--idle-s S] [--low-latency] [--tenant-spin-us N] [--no-idle-class]\n"
                   "          [--stream-min N] [--single-thread-max N] [--worker-poll-us N]\n"
                   "          [--latency-poll-us N] [--copy-bytes N] [--extent-bytes N]\n",
                   argv[0]);
      return 2;
    }
  }
  std::vector<size_t> sizes;
  if (full) {
    for (size_t s = 4 << 10; s <= (256u << 20); s *= 4) sizes.push_back(s);
  } else {
    sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20};  // references stop at 16 MiB
  }
  if (!only_sizes.empty()) sizes = only_sizes;

  // STREAM's rule: each array at least four times the last-level cache, so
  // that the copy measures memory, not cache. (A virtual machine may report
  // its host's whole cache, gigabytes to fill: --copy-bytes sets the size.)
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const size_t stream_bytes = copy_bytes != 0
                                  ? copy_bytes
                                  : std::max<size_t>(full ? (256u << 20) : (64u << 20),
                                                     l3 > 0 ? 4 * static_cast<size_t>(l3) : 0);
  CopyArrays copy_arrays(stream_bytes);

  ServiceProcess svc;
  std::vector<std::string> daemon_args = {"--worker-threads", io_threads};
  if (!poll_us.empty()) daemon_args.insert(daemon_args.end(), {"--connection-poll-us", poll_us});
  std::string config;
  if (!idle_class) config += "bulk_idle_class = false\n";
  if (stream_min >= 0 || single_thread_max >= 0 || worker_poll_us >= 0) {
    config += "[collectives]\n";
  }
  if (stream_min >= 0) config += "stream_min_bytes = " + std::to_string(stream_min) + "\n";
  if (single_thread_max >= 0) {
    config += "single_thread_max_bytes = " + std::to_string(single_thread_max) + "\n";
  }
  if (worker_poll_us >= 0) config += "worker_poll_us = " + std::to_string(worker_poll_us) + "\n";
  if (latency_poll_us >= 0) {
    config += "[device]\nlow_latency_poll_us = " + std::to_string(latency_poll_us) + "\n";
  }
  if (!config.empty()) daemon_args.insert(daemon_args.end(), {"--config", svc.WriteConfig(config)});
  if (!svc.Start(daemon_args)) {
    std::fprintf(stderr, "cannot start harmonaized\n");
    return 1;
  }
  for (int p : ranks) {
    std::vector<size_t> job_sizes = sizes;
    // Eight ranks on a small machine: keep the default run short.
    if (p >= 8 && !full && only_sizes.empty()) job_sizes = {4 << 10, 1 << 20, 16 << 20};
    // Each round measures the references and then the service, back to
    // back, and every ratio is taken within a round: a neighbour that slows
    // this machine for a while then moves both sides of a ratio, not one.
    // The result is each ratio's median over the rounds.
    std::vector<SizeRounds> results(job_sizes.size());
    std::optional<uint32_t> device_window_us;
    OnePassReferences one_pass_refs(p, job_sizes);
    bool failed = false;
    for (int round = 0; round < rounds && !failed; ++round) {
      const double copy_gbps = MemoryBandwidthGBps(copy_arrays);
      std::printf("%s\n", json({{"reference", "stream_copy"},
                                {"ranks", p},
                                {"round", round},
                                {"gbps", copy_gbps},
                                {"bytes", stream_bytes}})
                              .dump()
                              .c_str());
      const auto one_pass = one_pass_refs.Measure();
      for (const auto& [bytes, t] : one_pass) {
        std::printf("%s\n", json({{"reference", "one_pass_allreduce"},
                                  {"ranks", p},
                                  {"round", round},
                                  {"bytes", bytes},
                                  {"best_us", t.best * 1e6},
                                  {"median_us", t.median * 1e6}})
                                .dump()
                                .c_str());
      }
      // The latency sizes' scheduler floor (process_turn.h).
      const double turn_us = job_options.low_latency ? hz::bench::ProcessTurnUs() : 0;
      if (turn_us > 0) {
        std::printf("%s\n", json({{"reference", "process_turn"},
                                  {"ranks", p},
                                  {"round", round},
                                  {"turn_us", turn_us}})
                                .dump()
                                .c_str());
      }
      std::fflush(stdout);
      std::vector<std::pair<size_t, double>> mpi, gloo;
#ifdef HZ_REF_MPI_ALLREDUCE
      if (references)
        mpi = Reference("mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(p) +
                        " " + HZ_REF_MPI_ALLREDUCE + (full ? " --full" : "") + " 2>/dev/null");
#endif
#ifdef HZ_REF_GLOO_ALLREDUCE
      if (references)
        gloo = Reference(std::string(HZ_REF_GLOO_ALLREDUCE) + " --ranks " + std::to_string(p) +
                         (full ? " --full" : "") + " 2>/dev/null");
#endif
      const JobResult job = RunJob(svc, p, job_sizes, job_options);
      const std::vector<double>& med = job.medians;
      device_window_us = job.device_window_us;
      if (med.size() != job_sizes.size()) {
        std::printf("%s\n",
                    json({{"bench", "service_allreduce"}, {"ranks", p}, {"error", "job failed"}})
                        .dump()
                        .c_str());
        failed = true;
        break;
      }
      for (size_t i = 0; i < job_sizes.size(); ++i) {
        SizeRounds& r = results[i];
        const size_t bytes = job_sizes[i];
        const double busbw = bytes / med[i] / 1e9 * 2.0 * (p - 1) / p;
        r.time_s.push_back(med[i]);
        r.service_cpu_s.push_back(job.service_cpu[i]);
        r.tenant_cpu_s.push_back(job.tenant_cpu[i]);
        const double bound_s = 2.0 * p * bytes / (copy_gbps * 1e9);
        r.to_memory.push_back(bound_s / med[i]);
        if (turn_us > 0) {
          r.process_turn_us.push_back(turn_us);
          r.in_turns.push_back(med[i] * 1e6 / turn_us);
        }
        for (const auto& [b, t] : one_pass) {
          if (b != bytes) continue;
          r.to_one_pass.push_back(t.median / med[i]);
          r.one_pass_to_memory.push_back(bound_s / t.best);
        }
        if (double m = Lookup(mpi, bytes); m > 0) {
          r.mpi_gbps.push_back(m);
          r.to_mpi.push_back(busbw / m);
        }
        if (double g = Lookup(gloo, bytes); g > 0) {
          r.gloo_gbps.push_back(g);
          r.to_gloo.push_back(busbw / g);
        }
      }
    }
    if (failed) continue;
    for (size_t i = 0; i < job_sizes.size(); ++i) {
      json line = Summary(p, job_sizes[i], job_options, results[i]);
      line["bulk_idle_class"] = idle_class;
      if (stream_min >= 0) line["stream_min_bytes"] = stream_min;
      if (single_thread_max >= 0) line["single_thread_max_bytes"] = single_thread_max;
      if (worker_poll_us >= 0) line["worker_poll_us"] = worker_poll_us;
      // The window the device reported, whether set here or its default
      // (null: it did not say), and the spin the ranks kept within it.
      line["device_latency_poll_us"] = device_window_us ? json(*device_window_us) : json(nullptr);
      line["tenant_spin_used_us"] =
          hz::lib::SpinWithin(job_options.tenant_spin_us, device_window_us).count();
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
    }
  }
  if (idle_s > 0) {
    std::printf("%s\n", IdleCpu(svc, 8, idle_s).dump().c_str());
    std::fflush(stdout);
  }
  return svc.Terminate() == 0 ? 0 : 1;
}
