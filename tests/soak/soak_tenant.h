// One tenant of the chaos soak: rank threads that run exact all-reduces on
// their own VMs, and an operations thread on one more VM that saves, lists
// and restores checkpoints, has the operator inject events and acknowledges
// them. Everything the service acknowledged is remembered, so that after
// each fault the tenant can check that none of it was lost and that nothing
// of another tenant is visible.
#ifndef HZ_TESTS_SOAK_SOAK_TENANT_H_
#define HZ_TESTS_SOAK_SOAK_TENANT_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "harmonaize/hz.h"
#include "service_harness.h"

namespace hz::soak {

// Counters shared by every thread of the run; printed as the totals line.
struct Totals {
  // Operations that completed as the tenant asked.
  std::atomic<uint64_t> allreduce{0}, ckpt_save{0}, ckpt_durable{0}, ckpt_restore{0}, ckpt_list{0},
      event_inject{0}, event_ack{0}, verify{0}, reconnect{0};
  // Restores of a durable step that failed with a transient error (the
  // check after the fault decides whether the step was lost).
  std::atomic<uint64_t> restore_errors{0};
  // Faults injected.
  std::atomic<uint64_t> kill_rank{0}, kill_daemon{0}, fill_disk{0}, exhaust_fds{0};
  // Guarantees broken: every one of these must stay 0.
  std::atomic<uint64_t> acked_lost{0}, isolation{0}, wrong_results{0}, unrecovered{0},
      ping_failures{0};
  // ECORRUPT for a durable step that the check after the fault restored
  // intact: the tenant was told its checkpoint is damaged when it is not.
  std::atomic<uint64_t> false_corrupt{0};

  // Counts a broken guarantee and keeps its description (the first few).
  void Violation(std::atomic<uint64_t>& counter, const std::string& what);
  std::vector<std::string> Messages();

 private:
  std::mutex mu_;
  std::vector<std::string> messages_;
};

// One control-socket request with a deadline: an answer that never comes
// (a daemon that stopped serving its socket) is {"ok": false}, not a hang.
nlohmann::json Control(const std::string& state_dir, const nlohmann::json& req, int timeout_ms);

struct TenantSpec {
  int index = 0;                        // tags the tenant's data, steps and events
  std::string name;                     // the operator's tenant name
  std::vector<std::string> rank_socks;  // one VM per rank
  std::string ops_sock;                 // the VM of the operations thread
};

// The ranks' meeting point for each communicator: an epoch ends when any
// rank fails, and the next starts once every rank has left the old one.
class Epochs {
 public:
  explicit Epochs(int ranks) : ranks_(ranks) {}
  uint64_t Current();
  bool Broken(uint64_t e);
  void Break(uint64_t e);
  void PublishUid(uint64_t e, const hz_uid_t& uid);
  bool WaitUid(uint64_t e, hz_uid_t* uid, const std::atomic<bool>& stop);
  void Leave(uint64_t e, const std::atomic<bool>& stop);
  void WakeAll();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int ranks_;
  uint64_t epoch_ = 0;
  int left_ = 0;
  bool broken_ = false;
  bool has_uid_ = false;
  hz_uid_t uid_{};
};

class Tenant {
 public:
  Tenant(hz::testing::ServiceProcess* svc, TenantSpec spec, Totals* totals,
         const std::atomic<bool>* stop, uint64_t seed);
  ~Tenant();
  void Start();
  void Join();
  // The rank closes its connection at once, without leaving its communicator.
  void KillRank(int rank) { kill_rank_ = rank; }
  // Has the operations thread reconnect and check everything acknowledged so
  // far; WaitVerified is false if it did not finish by the deadline.
  uint64_t RequestVerify();
  bool WaitVerified(uint64_t ticket, std::chrono::steady_clock::time_point deadline);
  uint64_t Collectives() const { return collectives_; }
  const TenantSpec& spec() const { return spec_; }

 private:
  struct Ops;  // the operations thread's state

  void RankLoop(int rank);
  bool RankEpoch(int rank, uint64_t e, hz_device_t** dev);
  bool AllReduceOnce(int rank, hz_comm_t* comm, uint64_t iter);
  void OpsLoop();
  hz_device_t* OpenRetry(const std::string& sock);

  hz::testing::ServiceProcess* svc_;
  TenantSpec spec_;
  Totals* totals_;
  const std::atomic<bool>* stop_;
  uint64_t seed_;
  Epochs epochs_;
  std::atomic<int> kill_rank_{-1};
  std::atomic<uint64_t> collectives_{0};
  std::vector<std::thread> threads_;

  std::mutex verify_mu_;
  std::condition_variable verify_cv_;
  uint64_t verify_requested_ = 0;
  uint64_t verify_done_ = 0;
};

}  // namespace hz::soak

#endif  // HZ_TESTS_SOAK_SOAK_TENANT_H_
