// Rank processes running a verified all-reduce loop through harmonaized on
// one communicator, for as long as the test or benchmark lets them: what
// live-upgrade tests and benchmarks run across the event. Progress, the stop
// point and rank 0's completion times live in shared memory, so that the
// parent watches them while the ranks (forked processes) run.
#ifndef HZ_TESTS_INTEGRATION_SERVICE_ALLREDUCE_LOOP_H_
#define HZ_TESTS_INTEGRATION_SERVICE_ALLREDUCE_LOOP_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "protocol/harmonaize.h"
#include "service_harness.h"

namespace hz::testing {

class HzClient;
struct GuestBuffer;

// What every rank process does first: connects c to its VM's socket, says
// HELLO, and gets the communicator's uid (rank 0 makes it and sends it to
// the others through pipes[rank]). Returns 0, or the process's exit code.
int ConnectAndShareUid(HzClient& c, const std::vector<std::string>& vms, std::vector<Pipe>& pipes,
                       int rank, int nranks, hz_comm_uid* uid);

class AllReduceLoop {
 public:
  static constexpr int kMaxRanks = 8;

  // nranks ranks of `count` fp32 elements each; room for `stamps`
  // completion times of rank 0 (0: none kept). With re_form, a rank whose
  // communicator was lost (EABORTED: the service crashed, SPEC.md §2.10)
  // forms a new one with the others and goes on from the first iteration
  // not every rank verified.
  AllReduceLoop(int nranks, uint64_t count, size_t stamps = 0, bool re_form = false);
  ~AllReduceLoop();
  AllReduceLoop(const AllReduceLoop&) = delete;
  AllReduceLoop& operator=(const AllReduceLoop&) = delete;

  // The body of rank process `rank`: HELLO, one communicator and two regions
  // once, then all-reduce after all-reduce, each result checked, until the
  // stop point. Never a second HELLO: a session lost would fail a request.
  // Returns the process's exit code (0, or a code that stderr explains).
  int RunRank(const std::vector<std::string>& vms, std::vector<Pipe>& pipes, int rank);

  // All-reduces verified by the slowest and the fastest rank.
  uint64_t Slowest() const;
  uint64_t Fastest() const;
  // Waits until every rank verified `target`; false if they stall for
  // `patience` (a hang, not a measurement).
  bool ProgressTo(uint64_t target, std::chrono::seconds patience = std::chrono::seconds(60)) const;
  // Every rank stops after the same iteration, a few past the fastest.
  void Stop();
  // Rank 0's completion times (steady clock, ns), in order.
  std::vector<int64_t> Stamps() const;
  // Communicators rank 0 formed again after losing one.
  uint64_t ReFormed() const;

 private:
  struct Shared;
  // re_form: agrees with the other ranks where to go on, forms a new
  // communicator and returns it in *comm, with its first iteration in *base.
  bool ReForm(HzClient& c, std::vector<Pipe>& pipes, int rank, uint64_t* comm, uint64_t* base);
  // One verified all-reduce; its status.
  uint32_t Iterate(HzClient& c, int rank, uint64_t comm, uint64_t it, uint64_t seq,
                   const GuestBuffer& send, const GuestBuffer& recv);
  int nranks_;
  uint64_t count_;
  size_t capacity_;
  bool re_form_;
  Shared* shared_;
  int64_t* stamps_;
};

// loop's ranks, one process per VM socket, running while the caller acts on
// the service. However the test ends, they are stopped and waited for; ranks
// that have not finished a minute later are killed (a hang).
class LoopRanks {
 public:
  LoopRanks(AllReduceLoop& loop, std::vector<std::string> vms);
  ~LoopRanks();
  LoopRanks(const LoopRanks&) = delete;
  LoopRanks& operator=(const LoopRanks&) = delete;

  // Stops the loop and waits for the ranks; their exit codes (0 each when
  // every result was right and no session was lost; 137 for a rank killed
  // after kPatience).
  std::vector<int> Finish();

 private:
  static constexpr std::chrono::seconds kPatience{60};
  AllReduceLoop& loop_;
  std::vector<std::string> vms_;
  std::vector<Pipe> pipes_;
  std::vector<pid_t> pids_;
  std::vector<int> codes_;
};

}  // namespace hz::testing

#endif  // HZ_TESTS_INTEGRATION_SERVICE_ALLREDUCE_LOOP_H_
