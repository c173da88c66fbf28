// One rank of a communicator across hosts, as a container tenant: the public
// C API (include/harmonaize/hz.h) over the virtio-user transport on a VM
// socket of the host it runs on. For test_cross_host.py.
//
//   cluster_rank --socket PATH --uid-file FILE --rank R --nranks N
//                [--create-uid] [--count N] [--timeout-ms MS] [--loop] [--cross-host]
//                [--hierarchical] [--lossy] [--unanswered-send]
//                [--verified-loop --progress-file PATH --stop-file PATH
//                 [--hold-at N --resume-file PATH]]
//
// --create-uid: this rank asks its host for the uid and writes it (hex) to
// FILE; the others wait for the file. Then every rank joins, runs all-reduce
// over every dtype and reduction, reduce and reduce-scatter (fp32, fp16,
// bf16), all-gather, all-to-all and broadcast (checking each result exactly,
// the 16-bit floats bit for bit), send and recv and barrier, and prints one
// JSON line.
// --hierarchical: without HZ_COMM_F_DETERMINISTIC (floating-point
// reductions across hosts are then hierarchical); with it, an fp32 sum whose
// result depends on the order is checked against the rank-order fold.
// --lossy: HZ_COMM_F_ALLOW_LOSSY without DETERMINISTIC: an fp32 sum is
// checked against the bound for bfloat16 between hosts (and must be inexact).
// --unanswered-send: only joins and checks that a send nobody receives
// times out (rank 0 to the last rank), then exits.
// --loop: after the checks, all-reduces until an operation fails, and
// reports that failure (a host dying under the communicator).
// --verified-loop: only joins (none of the checks above, so that the ranks
// get going at once), then loops, checking every result: an fp32 sum
// all-reduce of --count elements and a ring shift with send and recv, with
// values that depend on the iteration (a stale or lost result shows). After
// each iteration the number done is written to --progress-file (20 decimal
// digits at offset 0; "{rank}" in PATH stands for the rank, so that ranks
// started with the same options write files of their own). Once a rank sees
// --stop-file, every rank stops after the same iteration (the all-reduce
// carries the stop), and each prints {"ok": true, "iterations": N,
// "p99_iteration_us", "max_iteration_us"} (the longest iteration is the
// longest pause a tenant saw, the p99 the loop's usual pace). A
// failed operation or a wrong result is reported as usual, with the
// iteration. --hold-at N --resume-file PATH: every rank stops posting once
// it has done N iterations, until PATH exists (a communicator left idle).
// Exit status: 0 all checks passed; 1 an operation failed; 2 a wrong result.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "harmonaize/hz.h"
#include "hz_test/uid_file.h"

namespace {

nlohmann::json out;

int Report(int code) {
  std::printf("%s\n", out.dump().c_str());
  std::fflush(stdout);
  return code;
}

int Failed(const char* what, int err) {
  out["failed"] = what;
  out["error"] = hz_strerror(err);
  out["code"] = err;
  return Report(1);
}

// Rank r's value at element i; small integers so that every sum, product,
// minimum and maximum over the ranks is exact in every type.
double Value(uint32_t r, size_t i, enum hz_redop op) {
  if (op == HZ_PROD) return 1 + (i + r) % 2;
  return static_cast<double>(r + 1 + i % 5);
}

template <typename T>
double Expected(uint32_t n, size_t i, enum hz_redop op) {
  double acc = Value(0, i, op);
  for (uint32_t r = 1; r < n; ++r) {
    const double v = Value(r, i, op);
    if (op == HZ_SUM || op == HZ_AVG) acc += v;
    if (op == HZ_PROD) acc *= v;
    if (op == HZ_MIN) acc = std::min(acc, v);
    if (op == HZ_MAX) acc = std::max(acc, v);
  }
  if (op == HZ_AVG) return static_cast<double>(static_cast<T>(acc) / static_cast<T>(n));
  return acc;
}

template <typename T>
int CheckAllReduce(hz_comm_t* comm, T* buf, size_t count, enum hz_dtype dt, enum hz_redop op,
                   uint32_t rank, uint32_t n) {
  for (size_t i = 0; i < count; ++i) buf[i] = static_cast<T>(Value(rank, i, op));
  if (int e = hz_allreduce(comm, buf, buf, count, dt, op); e != 0) return e;
  for (size_t i = 0; i < count; ++i) {
    if (static_cast<double>(buf[i]) != Expected<T>(n, i, op)) {
      out["wrong"] = {{"dtype", dt},
                      {"op", op},
                      {"index", i},
                      {"got", double(buf[i])},
                      {"want", Expected<T>(n, i, op)}};
      return 1;
    }
  }
  return 0;
}

// The 16-bit floats, by their definitions (independent of the device's
// conversions): fp16 as GCC's _Float16, bfloat16 as the upper half of an
// fp32 rounded to nearest even. Big + Tiny is inexact in fp32 (so the order
// of an fp32 fold shows); Step + 1 is inexact in the type (so rounding per
// step instead of once shows); Eps is a small step of products.
struct F16 {
  static uint16_t From(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
  static float To(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }
  static constexpr float kBig = 2048, kTiny = 0x1p-14f, kStep = 2048, kEps = 0x1p-7f;
};
struct BF16 {
  static uint16_t From(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  static float To(uint16_t h) { return std::bit_cast<float>(uint32_t{h} << 16); }
  static constexpr float kBig = 0x1p20f, kTiny = 0x1p-5f, kStep = 256, kEps = 0x1p-5f;
};

// Rank r's 16-bit value at element i. `sensitive` (rank-order reductions):
// values whose result shows any other order or rounding than the rank-order
// fold in fp32 rounded once; otherwise small values every order reduces
// exactly (hierarchical reductions).
template <typename H>
float HalfValue(uint32_t r, size_t i, uint32_t n, enum hz_redop op, bool sensitive) {
  if (op == HZ_PROD)
    return sensitive ? 1 + static_cast<float>((r + i) % 4 + 1) * H::kEps : 1 + (i + r) % 2;
  if (op == HZ_MIN || op == HZ_MAX) {
    if (sensitive && i % 4 == 0) return r % 2 ? -0.0f : 0.0f;  // ties keep the lower rank's
    return static_cast<float>((r * 7 + i) % 11) - 5;
  }
  if (!sensitive || i % 3 == 2) return static_cast<float>(r + 1 + i % 5);
  if (i % 3 == 1) return r == 0 ? H::kStep : 1;
  if (r == 0) return H::kBig;
  if (r == n - 1 && n > 2) return -H::kBig;
  return H::kTiny * static_cast<float>(1 + i % 4);
}

// What the engine computes on one host: the fold in rank order in fp32, avg
// divided there, rounded once (SPEC §7.4.4, §7.4.6).
template <typename H>
uint16_t HalfExpected(uint32_t n, size_t i, enum hz_redop op, bool sensitive) {
  float acc = HalfValue<H>(0, i, n, op, sensitive);
  for (uint32_t r = 1; r < n; ++r) {
    const float v = HalfValue<H>(r, i, n, op, sensitive);
    if (op == HZ_SUM || op == HZ_AVG) acc = acc + v;
    if (op == HZ_PROD) acc = acc * v;
    if (op == HZ_MIN) acc = v < acc ? v : acc;
    if (op == HZ_MAX) acc = acc < v ? v : acc;
  }
  if (op == HZ_AVG) acc = acc / static_cast<float>(n);
  return H::From(acc);
}

template <typename H>
void FillHalves(uint16_t* buf, size_t count, enum hz_redop op, uint32_t rank, uint32_t n,
                bool sensitive) {
  for (size_t i = 0; i < count; ++i) buf[i] = H::From(HalfValue<H>(rank, i, n, op, sensitive));
}

// Elements [first, first + count) of the reduction, at `got`, bit for bit.
template <typename H>
int CheckHalves(const uint16_t* got, size_t first, size_t count, enum hz_dtype dt, enum hz_redop op,
                uint32_t n, bool sensitive, const char* what) {
  for (size_t i = 0; i < count; ++i) {
    const uint16_t want = HalfExpected<H>(n, first + i, op, sensitive);
    if (got[i] != want) {
      out["wrong"] = {{"what", what},       {"dtype", dt},          {"op", op},
                      {"index", first + i}, {"got", H::To(got[i])}, {"want", H::To(want)},
                      {"got_bits", got[i]}, {"want_bits", want}};
      return 1;
    }
  }
  return 0;
}

template <typename H>
int CheckHalfAllReduce(hz_comm_t* comm, uint16_t* buf, size_t count, enum hz_dtype dt,
                       enum hz_redop op, uint32_t rank, uint32_t n, bool sensitive) {
  FillHalves<H>(buf, count, op, rank, n, sensitive);
  if (int e = hz_allreduce(comm, buf, buf, count, dt, op); e != 0) return e;
  return CheckHalves<H>(buf, 0, count, dt, op, n, sensitive, "allreduce");
}

// Reduce to the last rank and reduce-scatter of one 16-bit type, every
// reduction, checked bit for bit.
template <typename H>
int CheckHalfRootedReductions(hz_comm_t* comm, uint16_t* buf, enum hz_dtype dt, uint32_t me,
                              uint32_t n, bool sensitive) {
  const size_t c = 999;
  for (enum hz_redop op : {HZ_SUM, HZ_PROD, HZ_MIN, HZ_MAX, HZ_AVG}) {
    FillHalves<H>(buf, c, op, me, n, sensitive);
    if (int e = hz_reduce(comm, buf, buf + c, c, dt, op, n - 1); e != 0) return e;
    if (me == n - 1) {
      if (int e = CheckHalves<H>(buf + c, 0, c, dt, op, n, sensitive, "reduce"); e != 0) return e;
    }
    FillHalves<H>(buf, c * n, op, me, n, sensitive);
    if (int e = hz_reduce_scatter(comm, buf, buf + c * n, c, dt, op); e != 0) return e;
    if (int e = CheckHalves<H>(buf + c * n, me * c, c, dt, op, n, sensitive, "reduce_scatter");
        e != 0) {
      return e;
    }
  }
  return 0;
}

int RunMatrix(hz_comm_t* comm, void* mem, size_t count, uint32_t rank, uint32_t n, bool sensitive) {
  int checked = 0;
  const enum hz_redop ops[] = {HZ_SUM, HZ_PROD, HZ_MIN, HZ_MAX, HZ_AVG};
  for (size_t c : {size_t{1}, size_t{1000}, count}) {
    for (enum hz_redop op : ops) {
      const int results[] = {
          CheckAllReduce(comm, static_cast<float*>(mem), c, HZ_FP32, op, rank, n),
          CheckAllReduce(comm, static_cast<double*>(mem), c, HZ_FP64, op, rank, n),
          CheckAllReduce(comm, static_cast<int8_t*>(mem), c, HZ_INT8, op, rank, n),
          CheckAllReduce(comm, static_cast<uint8_t*>(mem), c, HZ_UINT8, op, rank, n),
          CheckAllReduce(comm, static_cast<int32_t*>(mem), c, HZ_INT32, op, rank, n),
          CheckAllReduce(comm, static_cast<uint32_t*>(mem), c, HZ_UINT32, op, rank, n),
          CheckAllReduce(comm, static_cast<int64_t*>(mem), c, HZ_INT64, op, rank, n),
          CheckAllReduce(comm, static_cast<uint64_t*>(mem), c, HZ_UINT64, op, rank, n),
          CheckHalfAllReduce<F16>(comm, static_cast<uint16_t*>(mem), c, HZ_FP16, op, rank, n,
                                  sensitive),
          CheckHalfAllReduce<BF16>(comm, static_cast<uint16_t*>(mem), c, HZ_BF16, op, rank, n,
                                   sensitive),
      };
      for (int e : results) {
        if (e == 1) return -1;
        if (e != 0) return e;
        ++checked;
      }
    }
  }
  out["checked"] = checked;
  return 0;
}

// Reduce to the last rank, reduce-scatter, all-gather and all-to-all, each
// checked exactly; 1 for a wrong result, an hz error code otherwise.
int CheckOtherCollectives(hz_comm_t* comm, void* mem, uint32_t me, uint32_t n) {
  const size_t c = 1000;
  float* f = static_cast<float*>(mem);
  for (size_t i = 0; i < c; ++i) f[i] = static_cast<float>(Value(me, i, HZ_SUM));
  if (int e = hz_reduce(comm, f, f + c, c, HZ_FP32, HZ_SUM, n - 1); e != 0) return e;
  for (size_t i = 0; i < c && me == n - 1; ++i) {
    if (f[c + i] != Expected<float>(n, i, HZ_SUM)) return (out["wrong"] = "reduce", 1);
  }
  for (size_t i = 0; i < c * n; ++i) f[i] = static_cast<float>(Value(me, i, HZ_SUM));
  if (int e = hz_reduce_scatter(comm, f, f + c * n, c, HZ_FP32, HZ_SUM); e != 0) return e;
  for (size_t i = 0; i < c; ++i) {
    if (f[c * n + i] != Expected<float>(n, me * c + i, HZ_SUM)) {
      return (out["wrong"] = "reduce_scatter", 1);
    }
  }
  double* d = static_cast<double*>(mem);
  for (int k = 0; k < 3; ++k) d[k] = me * 10 + k;
  if (int e = hz_allgather(comm, d, d + 3, 3, HZ_FP64); e != 0) return e;
  for (uint32_t r = 0; r < n; ++r) {
    for (int k = 0; k < 3; ++k) {
      if (d[3 + r * 3 + k] != r * 10 + k) return (out["wrong"] = "allgather", 1);
    }
  }
  int32_t* x = static_cast<int32_t*>(mem);
  for (uint32_t j = 0; j < n; ++j) {
    for (int k = 0; k < 2; ++k) x[j * 2 + k] = static_cast<int32_t>(me * 100 + j * 10 + k);
  }
  if (int e = hz_alltoall(comm, x, x + 2 * n, 2, HZ_INT32); e != 0) return e;
  for (uint32_t j = 0; j < n; ++j) {
    for (int k = 0; k < 2; ++k) {
      if (x[2 * n + j * 2 + k] != static_cast<int32_t>(j * 100 + me * 10 + k)) {
        return (out["wrong"] = "alltoall", 1);
      }
    }
  }
  return 0;
}

// With HZ_COMM_F_DETERMINISTIC, an fp32 sum is the left fold in rank order
// whatever the placement: values whose partial sums round differently in any
// other order (1e8 + 1 is 1e8 in fp32) give exactly the rank-order result.
int CheckRankOrder(hz_comm_t* comm, float* buf, uint32_t me, uint32_t n) {
  auto value = [](uint32_t r) { return r % 2 ? 1.0f : (r % 4 ? -1e8f : 1e8f); };
  float want = value(0);
  for (uint32_t r = 1; r < n; ++r) want = want + value(r);
  for (int i = 0; i < 64; ++i) buf[i] = value(me);
  if (int e = hz_allreduce(comm, buf, buf, 64, HZ_FP32, HZ_SUM); e != 0) return e;
  for (int i = 0; i < 64; ++i) {
    if (buf[i] != want) {
      out["wrong"] = {{"rank_order", true}, {"got", buf[i]}, {"want", want}};
      return 1;
    }
  }
  return 0;
}

// With HZ_COMM_F_ALLOW_LOSSY across hosts, an fp32 sum crosses hosts as
// bfloat16: within SPEC §7.3.8's bound of the exact sum (with at most n hosts,
// gamma(n) = n u / (1 - n u), u = 2^-8, times the sum of magnitudes, plus
// fp32's own rounding), and not exact for values bfloat16 cannot hold.
int CheckLossy(hz_comm_t* comm, float* buf, uint32_t me, uint32_t n) {
  const size_t c = 4096;
  auto value = [](uint32_t r, size_t i) {
    return 1.0f + static_cast<float>(r + 1) * 0x1p-12f + static_cast<float>(i % 16) * 0x1p-16f;
  };
  for (size_t i = 0; i < c; ++i) buf[i] = value(me, i);
  if (int e = hz_allreduce(comm, buf, buf, c, HZ_FP32, HZ_SUM); e != 0) return e;
  const double u = 0x1p-8, gamma = n * u / (1 - n * u);
  size_t inexact = 0;
  double worst = 0;
  for (size_t i = 0; i < c; ++i) {
    double exact = 0, magnitude = 0;
    for (uint32_t r = 0; r < n; ++r) {
      exact += value(r, i);
      magnitude += std::fabs(value(r, i));
    }
    const double err = std::fabs(buf[i] - exact);
    worst = std::max(worst, err / magnitude);
    if (err > gamma * magnitude + n * 0x1p-24 * magnitude) {
      out["wrong"] = {{"lossy", true}, {"index", i}, {"got", buf[i]}, {"exact", exact}};
      return 1;
    }
    if (err > n * 0x1p-24 * magnitude) ++inexact;
  }
  out["lossy_worst_relative_error"] = worst;
  if (inexact == 0) return (out["wrong"] = "ALLOW_LOSSY left every sum exact: bf16 unused", 1);
  return 0;
}

uint8_t ShiftByte(uint32_t from, size_t bytes, size_t i) {
  return static_cast<uint8_t>(from * 31 + i * 7 + bytes);
}

// A ring shift: every rank posts its recv from the left first, then its send
// to the right (no pair may wait for another, SPEC §7.4.5), of `bytes`.
int CheckRingShift(hz_comm_t* comm, uint8_t* buf, size_t bytes, uint32_t me, uint32_t n) {
  uint8_t* in = buf + bytes;
  const uint32_t left = (me + n - 1) % n, right = (me + 1) % n;
  for (size_t i = 0; i < bytes; ++i) buf[i] = ShiftByte(me, bytes, i);
  std::memset(in, 0, bytes);
  hz_request_t *recv = nullptr, *send = nullptr;
  if (int e = hz_recv_async(comm, in, bytes, HZ_UINT8, left, &recv); e != 0) return e;
  if (int e = hz_send_async(comm, buf, bytes, HZ_UINT8, right, &send); e != 0) return e;
  const int es = hz_wait(send, -1), er = hz_wait(recv, -1);
  if (es != 0 || er != 0) return es != 0 ? es : er;
  for (size_t i = 0; i < bytes; ++i) {
    if (in[i] != ShiftByte(left, bytes, i)) {
      return (out["wrong"] = {{"ring_shift", bytes}, {"index", i}}, 1);
    }
  }
  return 0;
}

// Ring shifts small and of several MiB (more than one staging chunk between
// hosts), and a pair that disagrees on count (EMISMATCH on both sides,
// nothing written) after which the communicator stays usable. (A send to
// itself is refused by libharmonaize before it reaches the device.)
int CheckSendRecv(hz_comm_t* comm, uint8_t* buf, uint32_t me, uint32_t n) {
  for (size_t bytes : {size_t{24}, (size_t{3} << 20) + 5}) {
    if (int e = CheckRingShift(comm, buf, bytes, me, n); e != 0) return e;
  }
  int64_t* x = reinterpret_cast<int64_t*>(buf);
  if (me != 0 && me != n - 1) return 0;
  x[0] = me == 0 ? 4242 : 0;
  x[8] = -1;
  const int e =
      me == 0 ? hz_send(comm, x, 4, HZ_INT64, n - 1) : hz_recv(comm, x + 8, 5, HZ_INT64, 0);
  if (e != HZ_EMISMATCH || x[8] != -1) {
    return (out["wrong"] = {{"mismatch", true}, {"code", e}}, 1);
  }
  const int ok = me == 0 ? hz_send(comm, x, 1, HZ_INT64, n - 1) : hz_recv(comm, x, 1, HZ_INT64, 0);
  if (ok != 0) return ok;
  return x[0] == 4242 ? 0 : (out["wrong"] = "recv", 1);
}

// Rank 0 sends to the last rank, which never receives: the send completes
// with ETIMEDOUT within the communicator's timeout (and a little), and the
// communicator is aborted. The other ranks stay meanwhile (leaving would
// abort the communicator sooner) and check nothing.
int CheckUnansweredSend(hz_comm_t* comm, uint8_t* buf, uint32_t me, uint32_t n,
                        uint32_t timeout_ms) {
  if (me != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms + 4000));
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  const int e = hz_send(comm, buf, 16, HZ_UINT8, n - 1);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  out["unanswered_ms"] = ms;
  if (e != HZ_ETIMEDOUT || ms < timeout_ms * 0.9 || ms > timeout_ms + 3000.0) {
    return (out["wrong"] = {{"unanswered", true}, {"code", e}}, 1);
  }
  return 0;
}

// Rank r's summand at element k of iteration `iter`: small integers, so the
// sum over the ranks is exact in fp32 in any order; it changes with the
// iteration, so a result left from an earlier one shows.
float LoopValue(uint32_t r, uint64_t iter, size_t k) {
  return static_cast<float>(1 + r + (iter * 3 + k + r * 5) % 17);
}

// What rank `from` sends to its right neighbour in iteration `iter`.
uint32_t LoopShiftValue(uint32_t from, uint64_t iter, size_t k) {
  return static_cast<uint32_t>((from + 1) * 2654435761u ^ (iter * 40503u + k));
}

// The number of iterations done, where the test reads it: one fixed-width
// write in place per iteration.
class Progress {
 public:
  explicit Progress(const std::string& path)
      : fd_(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) {}
  ~Progress() {
    if (fd_ >= 0) close(fd_);
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  bool ok() const { return fd_ >= 0; }
  bool Write(uint64_t done) const {
    char text[32];
    const int n = std::snprintf(text, sizeof(text), "%020" PRIu64 "\n", done);
    return pwrite(fd_, text, n, 0) == n;
  }

 private:
  int fd_;
};

// --verified-loop. Element `count` of the all-reduce is the number of ranks
// that saw the stop file before this iteration: every rank learns of a stop
// in the same iteration and leaves after it, so that none waits in a
// collective its peers never join.
struct Hold {
  uint64_t at = 0;  // 0: none
  std::string resume_file;
};

int VerifiedLoop(hz_comm_t* comm, void* mem, size_t count, uint32_t me, uint32_t n,
                 const std::string& progress_file, const std::string& stop_file, const Hold& hold) {
  Progress progress(progress_file);
  if (!progress.ok() || !progress.Write(0)) return Failed("progress_file", HZ_EIO);
  auto* f = static_cast<float*>(mem);
  // The ring shift's buffers take the all-reduce's place once it was checked.
  auto* send = static_cast<uint32_t*>(mem);
  uint32_t* recv = send + count;
  const uint32_t left = (me + n - 1) % n, right = (me + 1) % n;
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  std::vector<int64_t> iteration_us;  // each iteration's time, end to end
  uint64_t iter = 0;
  auto failed = [&](const char* what, int e) {
    out["iterations"] = iter;
    out["ms_in_loop"] =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return Failed(what, e);
  };
  auto wrong = [&](const char* what, size_t k, double got, double want) {
    out["iterations"] = iter;
    out["wrong"] = {
        {"what", what}, {"iteration", iter}, {"index", k}, {"got", got}, {"want", want}};
    return Report(2);
  };
  for (;; ++iter) {
    for (size_t k = 0; k < count; ++k) f[k] = LoopValue(me, iter, k);
    f[count] = access(stop_file.c_str(), F_OK) == 0 ? 1.0f : 0.0f;
    if (int e = hz_allreduce(comm, f, f, count + 1, HZ_FP32, HZ_SUM); e != 0) {
      return failed("loop allreduce", e);
    }
    for (size_t k = 0; k < count; ++k) {
      float want = 0;
      for (uint32_t r = 0; r < n; ++r) want += LoopValue(r, iter, k);
      if (f[k] != want) return wrong("allreduce", k, f[k], want);
    }
    const bool stop = f[count] > 0;
    if (n > 1) {  // a send to itself is refused
      for (size_t k = 0; k < count; ++k) {
        send[k] = LoopShiftValue(me, iter, k);
        recv[k] = 0;
      }
      hz_request_t *rq = nullptr, *sq = nullptr;
      if (int e = hz_recv_async(comm, recv, count, HZ_UINT32, left, &rq); e != 0) {
        return failed("loop recv", e);
      }
      if (int e = hz_send_async(comm, send, count, HZ_UINT32, right, &sq); e != 0) {
        return failed("loop send", e);  // the recv ends with the communicator
      }
      const int es = hz_wait(sq, -1), er = hz_wait(rq, -1);
      if (es != 0 || er != 0) return failed("loop send/recv", es != 0 ? es : er);
      for (size_t k = 0; k < count; ++k) {
        if (recv[k] != LoopShiftValue(left, iter, k)) {
          return wrong("ring_shift", k, recv[k], LoopShiftValue(left, iter, k));
        }
      }
    }
    if (!progress.Write(iter + 1)) return failed("progress_file", HZ_EIO);
    const auto now = std::chrono::steady_clock::now();
    if (iter + 1 != hold.at) {  // a hold is no pause of the service's
      iteration_us.push_back(
          std::chrono::duration_cast<std::chrono::microseconds>(now - last).count());
    }
    last = now;
    if (stop) break;
    while (iter + 1 == hold.at && access(hold.resume_file.c_str(), F_OK) != 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (iter + 1 == hold.at) last = std::chrono::steady_clock::now();
  }
  // A rank that leaves ends the communicator for the others: none leaves
  // while a peer's send or recv with it may still be under way.
  if (int e = hz_barrier(comm); e != 0) return failed("loop barrier", e);
  out["ok"] = true;
  out["iterations"] = iter + 1;
  out["ms_in_loop"] =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // The longest iteration (a pause, such as an upgrade under it) against
  // the loop's usual p99, measured in the same run.
  std::sort(iteration_us.begin(), iteration_us.end());
  if (!iteration_us.empty()) {
    out["p99_iteration_us"] = iteration_us[(iteration_us.size() - 1) * 99 / 100];
    out["max_iteration_us"] = iteration_us.back();
  }
  return Report(0);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cluster_rank"};
  std::string socket, uid_file;
  uint32_t rank = 0, nranks = 0, timeout_ms = 5000;
  size_t count = 1 << 16;
  bool create_uid = false, loop = false, cross_host = false, hierarchical = false, lossy = false;
  app.add_option("--socket", socket)->required();
  app.add_option("--uid-file", uid_file)->required();
  app.add_option("--rank", rank)->required();
  app.add_option("--nranks", nranks)->required();
  app.add_option("--count", count);
  app.add_option("--timeout-ms", timeout_ms);
  app.add_flag("--create-uid", create_uid);
  app.add_flag("--loop", loop);
  app.add_flag("--cross-host", cross_host);
  app.add_flag("--hierarchical", hierarchical);
  app.add_flag("--lossy", lossy);
  bool unanswered = false;
  app.add_flag("--unanswered-send", unanswered);
  bool verified_loop = false;
  std::string progress_file, stop_file;
  auto* progress_opt = app.add_option("--progress-file", progress_file);
  auto* stop_opt = app.add_option("--stop-file", stop_file);
  app.add_flag("--verified-loop", verified_loop)->needs(progress_opt)->needs(stop_opt);
  Hold hold;
  auto* resume_opt = app.add_option("--resume-file", hold.resume_file);
  app.add_option("--hold-at", hold.at)->needs(resume_opt);
  CLI11_PARSE(app, argc, argv);
  out = {{"rank", rank}, {"nranks", nranks}};

  hz_device_t* dev = nullptr;
  if (int e = hz_open(("vhost-user:" + socket).c_str(), &dev); e != 0) return Failed("open", e);
  // Every way out closes the communicator and the device (in that order).
  std::unique_ptr<hz_device_t, void (*)(hz_device_t*)> dev_owner(dev, hz_close);
  hz_uid_t uid{};
  if (create_uid) {
    if (int e = hz_comm_get_uid(dev, &uid); e != 0) return Failed("get_uid", e);
    if (!hz::testing::WriteUidFile(uid_file, uid)) return Failed("uid_file", HZ_EIO);
  } else if (!hz::testing::ReadUidFile(uid_file, std::chrono::seconds(20), &uid)) {
    return Failed("uid_file", HZ_ENOENT);
  }
  hz_comm_config cfg = HZ_COMM_CONFIG_INIT;
  cfg.timeout_ms = timeout_ms;
  if (hierarchical || lossy) cfg.flags &= ~HZ_COMM_F_DETERMINISTIC;
  if (lossy) cfg.flags |= HZ_COMM_F_ALLOW_LOSSY;
  hz_comm_t* comm = nullptr;
  auto destroy = [](hz_comm_t* c) { hz_comm_destroy(c); };
  std::unique_ptr<hz_comm_t, decltype(destroy)> comm_owner(nullptr, destroy);
  if (int e = hz_comm_init(dev, &uid, nranks, rank, &cfg, &comm); e != 0) {
    return Failed("init", e);
  }
  comm_owner.reset(comm);
  void* mem = nullptr;
  // Room for the largest ring shift (its send and recv buffers) too.
  if (int e = hz_mem_alloc(dev, std::max<size_t>(count + 1, 1 << 20) * 8, &mem); e != 0) {
    return Failed("mem_alloc", e);
  }
  if (verified_loop) {
    if (size_t at = progress_file.find("{rank}"); at != std::string::npos) {
      progress_file.replace(at, 6, std::to_string(rank));
    }
    return VerifiedLoop(comm, mem, count, rank, nranks, progress_file, stop_file, hold);
  }
  if (unanswered) {
    if (int e = CheckUnansweredSend(comm, static_cast<uint8_t*>(mem), rank, nranks, timeout_ms);
        e != 0) {
      return e == 1 ? Report(2) : Failed("send", e);
    }
    out["ok"] = true;
    return Report(0);
  }
  // Rank-order reductions (DETERMINISTIC) are checked with values that show
  // any other order or rounding; hierarchical ones with values every order
  // reduces exactly.
  const bool sensitive = !hierarchical && !lossy;
  if (int e = RunMatrix(comm, mem, count, rank, nranks, sensitive); e != 0) {
    return e < 0 ? Report(2) : Failed("allreduce", e);
  }
  if (lossy) {
    if (int e = CheckLossy(comm, static_cast<float*>(mem), rank, nranks); e != 0) {
      return e == 1 ? Report(2) : Failed("allreduce", e);
    }
  } else if (!hierarchical) {
    if (int e = CheckRankOrder(comm, static_cast<float*>(mem), rank, nranks); e != 0) {
      return e == 1 ? Report(2) : Failed("allreduce", e);
    }
  }
  auto* halves = static_cast<uint16_t*>(mem);
  if (int e = CheckHalfRootedReductions<F16>(comm, halves, HZ_FP16, rank, nranks, sensitive);
      e != 0) {
    return e == 1 ? Report(2) : Failed("fp16 reduce", e);
  }
  if (int e = CheckHalfRootedReductions<BF16>(comm, halves, HZ_BF16, rank, nranks, sensitive);
      e != 0) {
    return e == 1 ? Report(2) : Failed("bf16 reduce", e);
  }
  if (int e = CheckOtherCollectives(comm, mem, rank, nranks); e != 0) {
    return e == 1 ? Report(2) : Failed("collectives", e);
  }
  if (int e = CheckSendRecv(comm, static_cast<uint8_t*>(mem), rank, nranks); e != 0) {
    return e == 1 ? Report(2) : Failed("send/recv", e);
  }
  auto* b = static_cast<uint8_t*>(mem);
  std::memset(b, rank == nranks - 1 ? 0xA5 : 0, 4096);
  if (int e = hz_broadcast(comm, b, b, 4096, HZ_UINT8, nranks - 1); e != 0) {
    return Failed("broadcast", e);
  }
  for (int i = 0; i < 4096; ++i) {
    if (b[i] != 0xA5) return Report((out["wrong"] = "broadcast", 2));
  }
  if (int e = hz_barrier(comm); e != 0) return Failed("barrier", e);
  out["ok"] = true;
  if (loop) {
    Report(0);
    out.erase("ok");
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t i = 0;; ++i) {
      if (int e = hz_allreduce(comm, mem, mem, count, HZ_FP32, HZ_SUM); e != 0) {
        out["iterations"] = i;
        out["ms_in_loop"] =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        return Failed("loop", e);
      }
    }
  }
  return Report(0);
}
