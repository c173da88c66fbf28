// hz-validation-job: one "training job" of the validation run (validate.py).
// Two ranks, each on its own VM socket of harmonaized (virtio-user), iterate
// a modelled compute step (a sleep) and a real all-reduce through the
// device. Rank 0 checkpoints every --ckpt-every iterations since it started,
// either as a standard tenant (its own write+fsync of the state to a file)
// or as a cooperative one (the provider's CKPT save), and restores from the
// newest checkpoint when it starts. Notices of maintenance: a cooperative job
// waits for them on the event queue's descriptor and saves as soon as one
// comes, then leaves (exit 3); a standard job polls the queue at 1 Hz and only
// records when it learned.
//
// stdout: one JSON line per fact, {"ev": ..., "t": CLOCK_MONOTONIC seconds}:
// up, restored {step, restore_s}, it {step}, ckpt {step, stall_s}, notice,
// left, done.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harmonaize/hz.h"

namespace {

constexpr size_t kCount = 256;  // floats per rank in each all-reduce
constexpr uint32_t kStream = 1;
constexpr int kPollMs = 1000;  // a standard tenant's notice poll (Azure, GCE: 1 Hz)
constexpr int kExitLeft = 3;   // left on a notice, state saved

struct Options {
  std::vector<std::string> socks;
  std::string mode = "standard";
  std::string ckpt_file;
  uint64_t iterations = 0;
  uint64_t ckpt_every = 0;
  uint64_t ckpt_bytes = 1 << 20;
  int compute_ms = 100;
};

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void Say(const std::string& fields) {
  std::printf("{\"t\": %.6f, %s}\n", Now(), fields.c_str());
  std::fflush(stdout);
}

void Die(const char* what, int rc) {
  std::fprintf(stderr, "hz-validation-job: %s: %s\n", what, hz_strerror(rc));
  std::exit(1);
}

// The job's state: the step first, then the payload.
struct State {
  void* buf = nullptr;  // registered memory: the provider reads it
  uint64_t bytes = 0;
  uint64_t Step() const { return *static_cast<uint64_t*>(buf); }
  void SetStep(uint64_t s) { *static_cast<uint64_t*>(buf) = s; }
};

bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// The standard tenant's save: a new file, written, fsynced and renamed over
// the old one, so the last durable checkpoint is always whole.
void SaveFile(const Options& o, const State& s) {
  const std::string tmp = o.ckpt_file + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || !WriteAll(fd, s.buf, s.bytes) || fsync(fd) != 0) Die("write+fsync", HZ_EIO);
  close(fd);
  if (rename(tmp.c_str(), o.ckpt_file.c_str()) != 0) Die("rename", HZ_EIO);
}

bool RestoreFile(const Options& o, State* s) {
  int fd = open(o.ckpt_file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t got = 0;
  char* p = static_cast<char*>(s->buf);
  while (got < s->bytes) {
    ssize_t r = read(fd, p + got, s->bytes - got);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  close(fd);
  return got == s->bytes;
}

class Job {
 public:
  explicit Job(Options o) : o_(std::move(o)), cooperative_(o_.mode == "cooperative") {}

  int Run() {
    Open();
    Restore();
    std::thread peer([this] { PeerLoop(); });
    peer.detach();  // it ends with the process
    for (uint64_t step = state_.Step(), since = 0; step < o_.iterations;) {
      if (Compute()) return LeaveOnNotice(step);
      AllReduce(comm_[0], step);
      state_.SetStep(++step);
      Say("\"ev\": \"it\", \"step\": " + std::to_string(step));
      if (++since == o_.ckpt_every) {  // the model saves at the very end too
        Checkpoint(step);
        since = 0;
      }
    }
    Say("\"ev\": \"done\"");
    std::_Exit(0);  // the peer rank may still wait in its last all-reduce
  }

 private:
  void Open() {
    for (size_t r = 0; r < 2; ++r) {
      const std::string spec = "vhost-user:" + o_.socks[r];
      if (int rc = hz_open(spec.c_str(), &dev_[r]); rc != HZ_OK) Die("hz_open", rc);
    }
    hz_uid_t uid{};
    if (int rc = hz_comm_get_uid(dev_[0], &uid); rc != HZ_OK) Die("hz_comm_get_uid", rc);
    std::thread join([&] {
      if (int rc = hz_comm_init(dev_[1], &uid, 2, 1, nullptr, &comm_[1]); rc != HZ_OK)
        Die("hz_comm_init", rc);
    });
    if (int rc = hz_comm_init(dev_[0], &uid, 2, 0, nullptr, &comm_[0]); rc != HZ_OK)
      Die("hz_comm_init", rc);
    join.join();
    const int rc = hz_event_subscribe(dev_[0], HZ_TOPIC_MASK(HZ_TOPIC_MAINTENANCE), HZ_SEQ_CURSOR);
    if (rc != HZ_OK) Die("hz_event_subscribe", rc);
    if (cooperative_) {
      // Kept on local disk: the provider copies the state and persists it
      // in the background; the two newest are kept.
      hz_ckpt_policy p{0, 2, HZ_TIER_LOCAL_DISK, 1000, 0};
      if (int r = hz_ckpt_set_policy(dev_[0], kStream, &p); r != HZ_OK)
        Die("hz_ckpt_set_policy", r);
    }
    state_.bytes = o_.ckpt_bytes;
    if (int r = hz_mem_alloc(dev_[0], state_.bytes, &state_.buf); r != HZ_OK)
      Die("hz_mem_alloc", r);
    std::memset(state_.buf, 0x5a, state_.bytes);
    state_.SetStep(0);
    Say("\"ev\": \"up\"");
  }

  void Restore() {
    const double t0 = Now();
    bool found;
    if (cooperative_) {
      hz_buf slice{state_.buf, state_.bytes};
      size_t meta_len = 0;
      hz_ckpt_info info{};
      const int rc =
          hz_ckpt_restore(dev_[0], kStream, HZ_STEP_LATEST, &slice, 1, nullptr, &meta_len, &info);
      if (rc != HZ_OK && rc != HZ_ENOENT) Die("hz_ckpt_restore", rc);
      found = rc == HZ_OK;
    } else {
      found = RestoreFile(o_, &state_);
    }
    if (!found) state_.SetStep(0);
    peer_start_ = state_.Step();
    char line[128];
    std::snprintf(line, sizeof(line), "\"ev\": \"restored\", \"step\": %llu, \"restore_s\": %.6f",
                  static_cast<unsigned long long>(state_.Step()), found ? Now() - t0 : 0.0);
    Say(line);
  }

  // The modelled compute of one iteration. True when a cooperative job got
  // a notice of maintenance during it.
  bool Compute() {
    const double end = Now() + o_.compute_ms / 1000.0;
    for (double left = end - Now(); left > 0; left = end - Now()) {
      if (cooperative_) {
        pollfd p{hz_event_fd(dev_[0]), POLLIN, 0};
        if (poll(&p, 1, static_cast<int>(left * 1000) + 1) > 0 && Notice()) return true;
      } else {
        if (Now() >= next_poll_) {
          next_poll_ = Now() + kPollMs / 1000.0;
          Notice();  // learned, and nothing more: it runs until the maintenance stops it
        }
        std::this_thread::sleep_for(
            std::chrono::duration<double>(std::min(left, next_poll_ - Now())));
      }
    }
    return false;
  }

  // Takes every waiting event; true if one was a maintenance notice.
  bool Notice() {
    bool got = false;
    hz_event ev{};
    while (hz_event_next(dev_[0], &ev, 0) == HZ_OK) {
      if (ev.topic != HZ_TOPIC_MAINTENANCE) continue;
      got = true;
      Say("\"ev\": \"notice\"");
      hz_event_ack(dev_[0], ev.seq, 0);  // a restarted job does not hear it again
    }
    return got;
  }

  void Checkpoint(uint64_t step) {
    const double t0 = Now();
    if (cooperative_) {
      hz_buf slice{state_.buf, state_.bytes};
      hz_ckpt_info info{};
      // The same step saved twice (a notice right after a periodic save) is saved.
      const int rc = hz_ckpt_save(dev_[0], kStream, step, &slice, 1, nullptr, 0, &info);
      if (rc != HZ_OK && rc != HZ_EEXIST) Die("hz_ckpt_save", rc);
    } else {
      SaveFile(o_, state_);
    }
    char line[128];
    std::snprintf(line, sizeof(line), "\"ev\": \"ckpt\", \"step\": %llu, \"stall_s\": %.6f",
                  static_cast<unsigned long long>(step), Now() - t0);
    Say(line);
  }

  int LeaveOnNotice(uint64_t step) {
    Checkpoint(step);
    Say("\"ev\": \"left\"");
    std::_Exit(kExitLeft);
  }

  void PeerLoop() {
    for (uint64_t step = peer_start_; step < o_.iterations; ++step) AllReduce(comm_[1], step);
  }

  static void AllReduce(hz_comm_t* comm, uint64_t step) {
    float send[kCount], recv[kCount];
    for (size_t i = 0; i < kCount; ++i) send[i] = static_cast<float>((step + i) % 7);
    if (int rc = hz_allreduce(comm, send, recv, kCount, HZ_FP32, HZ_SUM); rc != HZ_OK)
      Die("hz_allreduce", rc);
    for (size_t i = 0; i < kCount; ++i) {
      if (recv[i] != 2 * send[i]) Die("all-reduce result", HZ_EIO);
    }
  }

  const Options o_;
  const bool cooperative_;
  hz_device_t* dev_[2] = {nullptr, nullptr};
  hz_comm_t* comm_[2] = {nullptr, nullptr};
  State state_;
  uint64_t peer_start_ = 0;
  double next_poll_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"One job of the validation run: two ranks through harmonaized"};
  Options o;
  app.add_option("--socks", o.socks, "the two ranks' VM sockets")
      ->delimiter(',')
      ->expected(2)
      ->required();
  app.add_option("--mode", o.mode, "standard or cooperative")
      ->check(CLI::IsMember({"standard", "cooperative"}));
  app.add_option("--ckpt-file", o.ckpt_file, "the standard tenant's checkpoint file");
  app.add_option("--iterations", o.iterations, "iterations of the whole job")->required();
  app.add_option("--ckpt-every", o.ckpt_every, "iterations between checkpoints")
      ->required()
      ->check(CLI::PositiveNumber);
  app.add_option("--ckpt-bytes", o.ckpt_bytes, "bytes of state saved")
      ->check(CLI::Range(uint64_t{8}, uint64_t{1} << 32));
  app.add_option("--compute-ms", o.compute_ms, "modelled compute per iteration")
      ->check(CLI::Range(1, 60000));
  CLI11_PARSE(app, argc, argv);
  if (o.mode == "standard" && o.ckpt_file.empty()) {
    std::fprintf(stderr, "hz-validation-job: a standard job needs --ckpt-file\n");
    return 2;
  }
  return Job(std::move(o)).Run();
}
