// Checkpoint engine benchmark. Every figure is a ratio against a reference
// measured in the same run, on the same machine and filesystem:
//   save_stall          Save() time vs a plain memcpy of the same bytes (goal <= 1.5)
//   persist_throughput  background persist vs raw O_DIRECT sequential writes (goal >= 0.85)
//   tenant_stall        the tenant's own write()+fsync() of the state vs Save()'s stall
//   two_tenants         two tenants saving at once: each one's persist throughput, Jain's index
// Sizes 64 and 256 MiB by default; --full adds 1 GiB. One JSON object per line.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <liburing.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "hz/checkpoint/engine.h"

namespace {

using namespace hz::checkpoint;
using hz::Status;
using hz::TenantId;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace fs = std::filesystem;

constexpr size_t kMiB = 1u << 20;
constexpr size_t kBlock = 4 * kMiB;
constexpr int kSlices = 8;  // a state is several tensors, not one buffer

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Page-aligned, touched memory (so no measurement pays first-touch faults).
struct Buffer {
  explicit Buffer(size_t n) : len(n) {
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      perror("mmap");
      exit(1);
    }
    data = static_cast<uint8_t*>(p);
    for (size_t i = 0; i < n; i += 8) {
      uint64_t x = i * 0x9e3779b97f4a7c15ull;
      std::memcpy(data + i, &x, std::min<size_t>(8, n - i));
    }
  }
  ~Buffer() { munmap(data, len); }
  uint8_t* data;
  size_t len;
};

std::vector<IoSpan> Slices(const Buffer& b) {
  std::vector<IoSpan> s;
  size_t each = b.len / kSlices;
  for (int i = 0; i < kSlices; ++i) {
    size_t off = each * i;
    size_t len = i == kSlices - 1 ? b.len - off : each;
    s.push_back({b.data + off, len});
  }
  return s;
}

double MemcpySeconds(const std::vector<IoSpan>& slices, Buffer& dst) {
  auto t0 = Clock::now();
  size_t off = 0;
  for (const IoSpan& s : slices) {
    std::memcpy(dst.data + off, s.data, s.len);
    off += s.len;
  }
  return Seconds(Clock::now() - t0);
}

// The reference writers. Each does what the engine's persist does, minus the
// engine: create a fresh file in the same filesystem, write the same bytes
// with O_DIRECT in 4 MiB requests, and end with one fdatasync, so both sides
// end durable. Creating the file is timed (the engine creates its own);
// deleting it is not (the engine's retention removal happens after durable).
//   dd     one pwrite at a time (dd oflag=direct bs=4M conv=fdatasync)
//   uring  fallocate, then io_uring with queue_depth writes in flight, as the
//          engine
// The persist ratio is against the faster of the two in each repetition.
int CreateDirect(const std::string& path) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0640);
  if (fd < 0) {
    perror("open O_DIRECT (the scratch directory must not be on tmpfs)");
    exit(1);
  }
  return fd;
}

double RawDdSeconds(const std::string& path, const Buffer& src) {
  fs::remove(path);
  auto t0 = Clock::now();
  int fd = CreateDirect(path);
  for (size_t off = 0; off < src.len; off += kBlock) {
    size_t n = std::min(kBlock, src.len - off);
    if (pwrite(fd, src.data + off, n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) {
      perror("pwrite");
      exit(1);
    }
  }
  if (fdatasync(fd) != 0) perror("fdatasync");
  double s = Seconds(Clock::now() - t0);
  close(fd);
  fs::remove(path);
  return s;
}

double RawUringSeconds(const std::string& path, const Buffer& src, unsigned depth) {
  fs::remove(path);
  io_uring ring;
  if (io_uring_queue_init(depth, &ring, 0) < 0) {
    perror("io_uring_queue_init");
    exit(1);
  }
  auto t0 = Clock::now();
  int fd = CreateDirect(path);
  // Preallocated, as the engine does: writes inside i_size run concurrently.
  if (fallocate(fd, 0, 0, static_cast<off_t>(src.len)) != 0) perror("fallocate");
  size_t next = 0, in_flight = 0, written = 0;
  while (next < src.len || in_flight > 0) {
    while (next < src.len && in_flight < depth) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (sqe == nullptr) break;  // cannot happen: depth entries, at most depth in flight
      size_t n = std::min(kBlock, src.len - next);
      io_uring_prep_write(sqe, fd, src.data + next, static_cast<unsigned>(n), next);
      next += n;
      ++in_flight;
    }
    io_uring_submit(&ring);
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(&ring, &cqe) != 0) continue;
    if (cqe->res < 0) {
      std::cerr << "raw uring write: " << strerror(-cqe->res) << "\n";
      exit(1);
    }
    written += static_cast<size_t>(cqe->res);
    io_uring_cqe_seen(&ring, cqe);
    --in_flight;
  }
  if (written != src.len) {
    std::cerr << "raw uring: short write\n";
    exit(1);
  }
  if (fdatasync(fd) != 0) perror("fdatasync");
  double s = Seconds(Clock::now() - t0);
  close(fd);
  io_uring_queue_exit(&ring);
  fs::remove(path);
  return s;
}

struct RawRun {
  double dd_s = 0;
  double uring_s = 0;
  double best_s() const { return std::min(dd_s, uring_s); }
};

RawRun RawDirect(const std::string& path, const Buffer& src, unsigned depth) {
  return {RawDdSeconds(path, src), RawUringSeconds(path, src, depth)};
}

// What a tenant does without the service: write the state to a file and
// fsync it before training resumes (torch.save + sync). All of it is stall.
double TenantWriteFsyncSeconds(const std::string& path, const std::vector<IoSpan>& slices) {
  fs::remove(path);
  auto t0 = Clock::now();
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  for (const IoSpan& s : slices) {
    size_t done = 0;
    while (done < s.len) {
      ssize_t n = write(fd, s.data + done, s.len - done);
      if (n <= 0) {
        perror("write");
        exit(1);
      }
      done += static_cast<size_t>(n);
    }
  }
  fsync(fd);
  close(fd);
  double s = Seconds(Clock::now() - t0);
  fs::remove(path);
  return s;
}

void Emit(json j) {
  j["bench"] = "checkpoint";
  std::cout << j.dump() << std::endl;
}

struct EngineRun {
  double stall_s = 0;
  double persist_s = 0;  // Save return to durable
};

EngineRun SaveAndPersist(Engine& eng, const TenantId& tenant, uint64_t step,
                         const std::vector<IoSpan>& slices) {
  EngineRun r;
  SaveResult sr;
  auto t0 = Clock::now();
  Status st = eng.Save({tenant, 1, step, slices, {}}, &sr);
  auto t1 = Clock::now();
  if (!st.ok()) {
    std::cerr << "save failed: " << st << "\n";
    exit(1);
  }
  st = eng.WaitDurable(tenant, 1, step, std::chrono::minutes(10));
  auto t2 = Clock::now();
  if (!st.ok()) {
    std::cerr << "persist failed: " << st << "\n";
    exit(1);
  }
  r.stall_s = Seconds(t1 - t0);
  r.persist_s = Seconds(t2 - t1);
  return r;
}

double Jain(const std::vector<double>& x) {
  double sum = 0, sq = 0;
  for (double v : x) {
    sum += v;
    sq += v * v;
  }
  return sq == 0 ? 0 : sum * sum / (static_cast<double>(x.size()) * sq);
}

void RunSize(const std::string& dir, size_t bytes, int reps, unsigned copy_threads,
             unsigned queue_depth) {
  Buffer state(bytes);
  Buffer dst(bytes);
  auto slices = Slices(state);
  std::string root = dir + "/engine";
  fs::remove_all(root);
  EngineConfig cfg;
  cfg.root = root;
  cfg.chunk_bytes = kBlock;
  cfg.staging_bytes = bytes + 2 * kBlock;
  cfg.memory_tier_bytes = 0;
  cfg.copy_threads = copy_threads;
  cfg.queue_depth = queue_depth;
  std::unique_ptr<Engine> eng;
  if (Status err = Engine::Open(cfg, &eng); !err.ok()) {
    std::cerr << "engine: " << err << "\n";
    exit(1);
  }
  Policy p;
  p.retention = 1;
  p.stall_budget_ms = 600000;
  TenantLimits lim;
  lim.staging_bytes = cfg.staging_bytes;
  lim.disk_bytes = 4 * static_cast<uint64_t>(bytes) + (1u << 30);
  eng->SetLimits(TenantId("tenant1"), lim);
  eng->SetLimits(TenantId("tenant2"), lim);
  eng->SetPolicy(TenantId("tenant1"), 1, p);

  std::vector<double> memcpy_s, stall_s, persist_s, raw_s, dd_s, uring_s, tenant_s;
  std::vector<double> queue_ms, write_ms, commit_ms;
  MemcpySeconds(slices, dst);  // warm-up
  auto tenant_stats = [&] {
    for (const TenantStats& t : eng->GetStats().tenants) {
      if (t.tenant == TenantId("tenant1")) return t;
    }
    return TenantStats{};
  };
  for (int r = 0; r < reps; ++r) {
    memcpy_s.push_back(MemcpySeconds(slices, dst));
    TenantStats before = tenant_stats();
    EngineRun run = SaveAndPersist(*eng, TenantId("tenant1"), r + 1, slices);
    TenantStats after = tenant_stats();
    queue_ms.push_back((after.persist_queue_us - before.persist_queue_us) / 1e3);
    write_ms.push_back((after.persist_write_us - before.persist_write_us) / 1e3);
    commit_ms.push_back((after.persist_commit_us - before.persist_commit_us) / 1e3);
    stall_s.push_back(run.stall_s);
    persist_s.push_back(run.persist_s);
    RawRun raw = RawDirect(dir + "/raw.bin", state, queue_depth);
    dd_s.push_back(raw.dd_s);
    uring_s.push_back(raw.uring_s);
    raw_s.push_back(raw.best_s());
    tenant_s.push_back(TenantWriteFsyncSeconds(dir + "/tenant.bin", slices));
  }
  Stats st = eng->GetStats();
  double gb = static_cast<double>(bytes) / 1e9;
  // Ratios are medians of per-repetition ratios: each pairs an engine run
  // with its reference measured moments apart, which cancels most of the
  // drift of a shared machine.
  std::vector<double> stall_ratio, persist_ratio, tenant_ratio;
  for (int r = 0; r < reps; ++r) {
    stall_ratio.push_back(stall_s[r] / memcpy_s[r]);
    persist_ratio.push_back(raw_s[r] / persist_s[r]);
    tenant_ratio.push_back(tenant_s[r] / stall_s[r]);
  }
  Emit({{"metric", "save_stall"},
        {"size_bytes", bytes},
        {"reps", reps},
        {"stall_ms", Median(stall_s) * 1e3},
        {"memcpy_ms", Median(memcpy_s) * 1e3},
        {"memcpy_gbps", gb / Median(memcpy_s)},
        {"ratio_vs_memcpy", Median(stall_ratio)},
        {"goal", "<= 1.5"},
        {"copy_threads", copy_threads}});
  Emit({{"metric", "persist_throughput"},
        {"size_bytes", bytes},
        {"reps", reps},
        {"engine_gbps", gb / Median(persist_s)},
        {"raw_odirect_gbps", gb / Median(raw_s)},
        {"raw_dd_gbps", gb / Median(dd_s)},
        {"raw_uring_gbps", gb / Median(uring_s)},
        {"ratio_vs_raw", Median(persist_ratio)},
        {"goal", ">= 0.85"},
        {"engine_includes",
         "Save return to durable: queue, mkdir+create+fallocate, CRC32C + O_DIRECT writes, "
         "manifest, one batch of flushes (data fdatasync, manifest and directory fsyncs), "
         "rename"},
        {"raw_includes",
         "create + O_DIRECT 4 MiB writes + one fdatasync; the faster of dd-style (one at a "
         "time) and fallocate + io_uring (queue_depth in flight) per repetition"},
        {"engine_queue_ms", Median(queue_ms)},
        {"engine_write_ms", Median(write_ms)},
        {"engine_commit_ms", Median(commit_ms)},
        {"direct_io", st.direct_io},
        {"registered_buffers", st.registered_buffers},
        {"queue_depth", queue_depth}});
  Emit({{"metric", "tenant_stall"},
        {"size_bytes", bytes},
        {"reps", reps},
        {"tenant_write_fsync_ms", Median(tenant_s) * 1e3},
        {"harmonaize_stall_ms", Median(stall_s) * 1e3},
        {"ratio_tenant_over_harmonaize", Median(tenant_ratio)}});
  eng.reset();
  fs::remove_all(root);

  // Two tenants, each with half the bytes, saving at the same moment.
  cfg.staging_bytes = bytes + 4 * kBlock;
  if (Status err = Engine::Open(cfg, &eng); !err.ok()) {
    std::cerr << "engine: " << err << "\n";
    exit(1);
  }
  eng->SetLimits(TenantId("tenant1"), lim);
  eng->SetLimits(TenantId("tenant2"), lim);
  eng->SetPolicy(TenantId("tenant1"), 1, p);
  eng->SetPolicy(TenantId("tenant2"), 1, p);
  Buffer half_a(bytes / 2), half_b(bytes / 2);
  auto sa = Slices(half_a), sb = Slices(half_b);
  std::vector<double> ta, tb, jain, raw2, sum_ratio;
  for (int r = 0; r < reps; ++r) {
    EngineRun ra, rb;
    std::thread a([&] { ra = SaveAndPersist(*eng, TenantId("tenant1"), r + 1, sa); });
    std::thread b([&] { rb = SaveAndPersist(*eng, TenantId("tenant2"), r + 1, sb); });
    a.join();
    b.join();
    double hg = static_cast<double>(bytes / 2) / 1e9;
    ta.push_back(hg / ra.persist_s);
    tb.push_back(hg / rb.persist_s);
    jain.push_back(Jain({ta.back(), tb.back()}));
    raw2.push_back(RawDirect(dir + "/raw.bin", state, queue_depth).best_s());
    sum_ratio.push_back((ta.back() + tb.back()) / (gb / raw2.back()));
  }
  Emit({{"metric", "two_tenants"},
        {"size_bytes_each", bytes / 2},
        {"reps", reps},
        {"tenant1_gbps", Median(ta)},
        {"tenant2_gbps", Median(tb)},
        {"jain_index", Median(jain)},
        {"raw_odirect_gbps", gb / Median(raw2)},
        {"ratio_sum_vs_raw", Median(sum_ratio)}});
  eng.reset();
  fs::remove_all(root);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"HarmonAIze checkpoint engine benchmark (JSON lines)"};
  bool full = false;
  int reps = 5;
  std::string dir = (fs::current_path() / "checkpoint-bench-scratch").string();
  unsigned copy_threads = 2, queue_depth = 16;
  std::vector<size_t> only_mib;
  app.add_flag("--full", full, "also run 1 GiB");
  app.add_option("--size-mib", only_mib, "run only these sizes (MiB)");
  app.add_option("--reps", reps, "repetitions per measurement (median reported)")
      ->check(CLI::Range(1, 50));
  app.add_option("--dir", dir, "scratch directory on the filesystem under test (not tmpfs)");
  app.add_option("--copy-threads", copy_threads, "snapshot copy threads")->check(CLI::Range(1, 16));
  app.add_option("--queue-depth", queue_depth, "io_uring writes in flight")
      ->check(CLI::Range(1, 256));
  CLI11_PARSE(app, argc, argv);
  fs::create_directories(dir);
  std::vector<size_t> sizes = {64 * kMiB, 256 * kMiB};
  if (full) sizes.push_back(1024 * kMiB);
  if (!only_mib.empty()) {
    sizes.clear();
    for (size_t m : only_mib) sizes.push_back(m * kMiB);
  }
  for (size_t s : sizes) RunSize(dir, s, reps, copy_threads, queue_depth);
  fs::remove_all(dir);
  return 0;
}
