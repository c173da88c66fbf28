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
  std::atomic<uint64_t> lost[kMaxRanks];  // communicators each rank lost
};

// What rank 0 tells the others when they form a communicator again.
struct ReFormMessage {
  hz_comm_uid uid;
  uint64_t restart;  // the first iteration every rank does again
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

AllReduceLoop::AllReduceLoop(int nranks, uint64_t count, size_t stamps, bool re_form)
    : nranks_(std::min(nranks, kMaxRanks)), count_(count), capacity_(stamps), re_form_(re_form) {
  shared_ = new (MapShared(sizeof(Shared))) Shared;
  for (auto& d : shared_->done) d = 0;
  for (auto& l : shared_->lost) l = 0;
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
  uint64_t base = 0;  // the communicator's first iteration
  for (uint64_t it = 0; it < shared_->stop_at.load(); ++it) {
    const uint32_t st = Iterate(c, rank, comm, it, it - base, send, recv);
    if (st == HZ_S_EABORTED && re_form_) {
      if (!ReForm(c, pipes, rank, &comm, &base)) return 12;
      it = base - 1;  // the loop's ++ makes it base
      continue;
    }
    if (st != HZ_S_OK) return st == HZ_S_EINVAL ? 11 : 10;
    shared_->done[rank] = it + 1;
  }
  return 0;
}

uint32_t AllReduceLoop::Iterate(HzClient& c, int rank, uint64_t comm, uint64_t it, uint64_t seq,
                                const GuestBuffer& send, const GuestBuffer& recv) {
  const uint64_t bytes = count_ * 4;
  std::vector<float> in(count_), out(count_);
  for (uint64_t j = 0; j < count_; ++j) in[j] = Input(rank, it, j);
  send.Write(0, in.data(), bytes);
  const hz_coll_args a = AllReduceArgs(comm, seq, send, recv, count_);
  // Ranks use different data queues, so the device's queues all carry
  // collectives while it is handed over.
  if (uint32_t st = c.Coll(HZ_VQ_REQUEST_BASE + rank % 2, HZ_OP_ALLREDUCE, a); st != HZ_S_OK) {
    if (st == HZ_S_EABORTED && re_form_) return st;  // expected after a crash
    std::fprintf(stderr, "rank %d: all-reduce %llu: status %u\n", rank,
                 static_cast<unsigned long long>(it), st);
    return st;
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
                   static_cast<unsigned long long>(it), static_cast<unsigned long long>(j), out[j],
                   want);
      return HZ_S_EINVAL;
    }
  }
  return HZ_S_OK;
}

bool AllReduceLoop::ReForm(HzClient& c, std::vector<Pipe>& pipes, int rank, uint64_t* comm,
                           uint64_t* base) {
  // Every rank loses the communicator in one crash; each says so once it
  // stopped, and rank 0 then knows what every rank verified.
  const uint64_t generation = ++shared_->lost[rank];
  ReFormMessage m{};
  if (rank == 0) {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    for (int r = 0; r < nranks_; ++r) {
      while (shared_->lost[r].load() < generation) {
        if (Clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    m.restart = Slowest();
    if (c.NewUid(&m.uid) != HZ_S_OK) return false;
    for (int r = 1; r < nranks_; ++r) pipes[r].Send(&m, sizeof(m));
  } else if (!pipes[rank].Receive(&m, sizeof(m), 60000)) {
    return false;
  }
  if (c.InitComm(m.uid, nranks_, rank, comm) != HZ_S_OK) return false;
  *base = m.restart;
  return true;
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

uint64_t AllReduceLoop::ReFormed() const {
  return shared_->lost[0].load();
}

std::vector<int64_t> AllReduceLoop::Stamps() const {
  return std::vector<int64_t>(stamps_, stamps_ + shared_->stamped.load());
}

LoopRanks::LoopRanks(AllReduceLoop& loop, std::vector<std::string> vms)
    : loop_(loop), vms_(std::move(vms)), pipes_(vms_.size()) {
  pids_ = StartRanks(static_cast<int>(vms_.size()),
                     [this](int rank) { return loop_.RunRank(vms_, pipes_, rank); });
}

LoopRanks::~LoopRanks() {
  Finish();
}

std::vector<int> LoopRanks::Finish() {
  if (!pids_.empty()) {
    loop_.Stop();
    codes_ = WaitRanks(pids_, kPatience);
    pids_.clear();
  }
  return codes_;
}

}  // namespace hz::testing
