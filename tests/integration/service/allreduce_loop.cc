#include "allreduce_loop.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <new>
#include <thread>

#include "hz_client.h"

namespace hz::testing {

using Clock = std::chrono::steady_clock;

struct AllReduceLoop::Shared {
  std::atomic<uint64_t> done[kMaxRanks];
  std::atomic<uint64_t> stop_at;
  std::atomic<uint64_t> stamped;
};

namespace {

void* MapShared(size_t bytes) {
  void* p = mmap(nullptr, std::max<size_t>(bytes, 1), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

float Input(int rank, uint64_t it, uint64_t j) {
  return static_cast<float>((rank + 1) * (it % 1000 + 1)) + static_cast<float>(j % 64);
}

}  // namespace

int ConnectAndShareUid(HzClient& c, const std::vector<std::string>& vms, std::vector<Pipe>& pipes,
                       int rank, int nranks, hz_comm_uid* uid) {
  std::string err;
  if (!c.Connect(vms[rank], 64ull << 20, &err)) {
    std::fprintf(stderr, "rank %d: connect: %s\n", rank, err.c_str());
    return 2;
  }
  if (c.Hello() != HZ_S_OK) return 3;
  if (rank == 0) {
    if (c.NewUid(uid) != HZ_S_OK) return 4;
    for (int r = 1; r < nranks; ++r) pipes[r].Send(uid, sizeof(*uid));
  } else if (!pipes[rank].Receive(uid, sizeof(*uid))) {
    return 5;
  }
  return 0;
}

AllReduceLoop::AllReduceLoop(int nranks, uint64_t count, size_t stamps)
    : nranks_(std::min(nranks, kMaxRanks)), count_(count), capacity_(stamps) {
  shared_ = new (MapShared(sizeof(Shared))) Shared;
  for (auto& d : shared_->done) d = 0;
  shared_->stop_at = UINT64_MAX;
  shared_->stamped = 0;
  stamps_ = static_cast<int64_t*>(MapShared(capacity_ * sizeof(int64_t)));
}

AllReduceLoop::~AllReduceLoop() {
  munmap(shared_, sizeof(Shared));
  munmap(stamps_, std::max<size_t>(capacity_ * sizeof(int64_t), 1));
}

int AllReduceLoop::RunRank(const std::vector<std::string>& vms, std::vector<Pipe>& pipes,
                           int rank) {
  HzClient c;
  hz_comm_uid uid{};
  if (int rc = ConnectAndShareUid(c, vms, pipes, rank, nranks_, &uid); rc != 0) return rc;
  uint64_t comm = 0;
  if (c.InitComm(uid, nranks_, rank, &comm) != HZ_S_OK) return 6;
  const uint64_t bytes = count_ * 4;
  GuestBuffer send, recv;
  if (c.Register(bytes, 2, HZ_REGION_F_READ, &send) != HZ_S_OK) return 7;
  if (c.Register(bytes, 2, HZ_REGION_F_WRITE, &recv) != HZ_S_OK) return 8;
  std::vector<float> in(count_), out(count_);
  for (uint64_t it = 0; it < shared_->stop_at.load(); ++it) {
    for (uint64_t j = 0; j < count_; ++j) in[j] = Input(rank, it, j);
    send.Write(0, in.data(), bytes);
    hz_coll_args a{};
    a.comm = comm;
    a.count = count_;
    a.dtype = HZ_FP32;
    a.redop = HZ_SUM;
    a.seq = it;
    a.send = SliceOf(send, 0, bytes);
    a.recv = SliceOf(recv, 0, bytes);
    // Ranks use different data queues, so the device's queues all carry
    // collectives while it is handed over.
    if (uint32_t st = c.Coll(HZ_VQ_REQUEST_BASE + rank % 2, HZ_OP_ALLREDUCE, a); st != HZ_S_OK) {
      std::fprintf(stderr, "rank %d: all-reduce %llu: status %u\n", rank,
                   static_cast<unsigned long long>(it), st);
      return 10;
    }
    if (rank == 0 && capacity_ > 0) {
      const uint64_t i = shared_->stamped.load();
      if (i < capacity_) {
        stamps_[i] =
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
                .count();
        shared_->stamped = i + 1;
      }
    }
    recv.Read(0, out.data(), bytes);
    for (uint64_t j = 0; j < count_; ++j) {
      float want = 0;
      for (int r = 0; r < nranks_; ++r) want += Input(r, it, j);
      if (out[j] != want) {
        std::fprintf(stderr, "rank %d: all-reduce %llu: element %llu is %g, not %g\n", rank,
                     static_cast<unsigned long long>(it), static_cast<unsigned long long>(j),
                     out[j], want);
        return 11;
      }
    }
    shared_->done[rank] = it + 1;
  }
  return 0;
}

uint64_t AllReduceLoop::Slowest() const {
  uint64_t v = UINT64_MAX;
  for (int r = 0; r < nranks_; ++r) v = std::min(v, shared_->done[r].load());
  return v;
}

uint64_t AllReduceLoop::Fastest() const {
  uint64_t v = 0;
  for (int r = 0; r < nranks_; ++r) v = std::max(v, shared_->done[r].load());
  return v;
}

bool AllReduceLoop::ProgressTo(uint64_t target, std::chrono::seconds patience) const {
  const auto deadline = Clock::now() + patience;
  while (Slowest() < target) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

void AllReduceLoop::Stop() {
  // The ranks move in lock step, at most one apart, so every rank is still
  // below this point when it reads it.
  shared_->stop_at = Fastest() + 3;
}

std::vector<int64_t> AllReduceLoop::Stamps() const {
  return std::vector<int64_t>(stamps_, stamps_ + shared_->stamped.load());
}

}  // namespace hz::testing
