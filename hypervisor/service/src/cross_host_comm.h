// One communicator whose ranks are on several hosts, as this host takes part
// in it. The ranks on this host form a communicator of their own in the local
// collective engine; one InterHostGroup joins this host to the other hosts
// that hold ranks. Each collective runs on the communicator's leg thread:
// reduce within the host (the engine, zero copy between the ranks' memory),
// across hosts (the group, on a host staging buffer), then every local rank's
// output from the result.
//
// Every operation works across hosts, with every type and reduction (avg as
// sum / nranks; fp16 and bf16 in fp32, rounded as the engine rounds them).
// Send and recv between two ranks of the same host are paired by the engine,
// as on one host; between ranks on different hosts, each pair runs on a
// thread of its own (cross_host_p2p.cc), so that no pair waits for another
// or for the collectives.
#ifndef HZ_SERVICE_CROSS_HOST_COMM_H_
#define HZ_SERVICE_CROSS_HOST_COMM_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "hz/cluster/comm_directory.h"
#include "hz/cluster/inter_host.h"
#include "hz/common/waiting_window.h"
#include "hz/service/coll_backend.h"

namespace hz::service {

using InitDone = std::function<void(Status, MemberPtr)>;

// Where a communicator's ranks are, from this host's point of view.
struct CrossHostLayout {
  uint32_t nranks = 0;
  std::vector<uint32_t> local_ranks;   // the global ranks on this host, ascending
  std::vector<uint32_t> host_of_rank;  // global rank -> host index
  uint32_t host_index = 0;             // this host's (hosts are ordered by their lowest rank)
  std::vector<std::string> hosts;      // their names, by index
  std::string tenant;
  // HZ_COMM_F_DETERMINISTIC: floating-point reductions follow rank order
  // across hosts too (SPEC §7.4.6).
  bool deterministic = true;
  // HZ_COMM_F_ALLOW_LOSSY (without the flag above): fp32 sums cross hosts
  // as bfloat16, with the error bound of SPEC §7.3.8.
  bool allow_lossy = false;
  uint32_t LocalIndex(uint32_t global_rank) const;
  uint32_t nhosts() const { return static_cast<uint32_t>(hosts.size()); }
};

// The communicator in the cluster store: its uid, and where a re-formation
// of its inter-host group is announced (cluster::CommDirectory).
struct CrossHostKeys {
  coll::Uid uid;
  cluster::RedisAddress store;
  std::string key_prefix;  // the cluster's
  std::chrono::milliseconds store_timeout{1000};
};

// Where a communicator across hosts stood when this host handed it to its
// next process (a live upgrade), for that process to go on from: the
// generation its group re-forms at, the first collective not run, and the
// leg's cost model, which every host keeps (each picks algorithms from it).
struct CrossHostResume {
  uint64_t generation = 0;
  uint64_t next_seq = 0;
  uint64_t local_seq = 0;  // the local part's, in the engine
  cluster::LegCostModel leg_model;
};

// A rank's point-to-point counters across hosts (SPEC §7.4.5): the next
// pair seq of its sends by destination, and of its receives by source.
struct CrossHostPairs {
  std::map<uint32_t, uint64_t> sends;
  std::map<uint32_t, uint64_t> recvs;
};

// A rank of a communicator across hosts as a previous process saved it
// (CrossHostComm::Save), for Rejoin.
struct CrossHostSaved {
  CrossHostLayout layout;  // tenant left to the caller
  CrossHostResume resume;
  CrossHostPairs pairs;
  coll::MemberState local;  // the engine's state of its part on this host
};
// Checks saved.backend["cross_host"] against the engine's part (the rank
// numbered in the whole communicator) and this host: kInvalidArgument for
// anything inconsistent, kAborted when the communicator was aborted before.
StatusOr<CrossHostSaved> ParseCrossHostSaved(const SavedMember& saved,
                                             const std::string& host_name);

// The pipeline's chunk, the largest call of the inter-host leg: large
// enough that a chunk's leg is dominated by its bytes rather than by the
// algorithm's steps.
inline constexpr size_t kPipelineChunkBytes = 4 << 20;

// What every communicator across hosts adds up (shared by the backend's).
// CONGESTION/FABRIC (SPEC.md §8.3.5): a leg across hosts that takes more
// than twice what its links measured when the communicator formed (its
// LegCostModel) counts the excess as time waiting for the fabric. Other
// traffic on the links is what slows a leg below its calibration; the factor
// two leaves room for noise.
class FabricMeter {
 public:
  explicit FabricMeter(uint64_t window_ns);
  // A leg expected to take expected_s took took_ns.
  void Leg(double expected_s, uint64_t took_ns);
  WaitingTime Measure();

 private:
  std::mutex mu_;
  WaitingWindow window_;
};

struct CrossHostStats {
  explicit CrossHostStats(uint64_t fabric_window_ns = 10'000'000'000) : fabric(fabric_window_ns) {}
  FabricMeter fabric;
  // Inter-host legs run with each algorithm, by cluster::InterHostAlgorithm.
  std::atomic<uint64_t> by_algorithm[std::size(cluster::kInterHostAlgorithms)] = {};
  std::atomic<uint64_t> lossy{0};   // ... of them carried as bfloat16 (ALLOW_LOSSY)
  std::atomic<uint64_t> failed{0};  // operations the leg failed (a host died, hung, was cut off)
  // Time of reductions by phase (ns): the engine within the host (or, in
  // rank order, gathering every contribution), the inter-host leg, the outputs.
  std::atomic<uint64_t> local_ns{0};
  std::atomic<uint64_t> leg_ns{0};
  std::atomic<uint64_t> output_ns{0};
};

// What the operator sees of one communicator across hosts (cluster.status).
struct CrossHostCommInfo {
  std::string tenant;
  uint32_t nranks = 0;
  std::vector<std::string> hosts;     // every host with ranks, by index
  std::vector<uint32_t> local_ranks;  // the ranks on this host
  std::string state;                  // forming, active, aborted
  std::string abort_reason;
  uint64_t next_seq = 0;
  uint64_t generation = 0;  // of the inter-host group: how often it re-formed
  std::optional<cluster::LegCostModel> leg_model;  // once the group is formed
};

// Live upgrade (cross_host_reform.cc). A host hands the communicator to its
// next process at a collective's boundary: Withdraw takes back the
// collectives its ranks posted that have not started, and announces in the
// cluster store that the group re-forms at the next generation. When the old
// process exits its connections close; each other host, its group failing,
// finds the announcement, closes its own connections (so that the failure
// reaches every host at once), forms the group again and retries the
// operation that failed, sends and receives included. The next process
// forms it from the state SaveMember wrote. Before the first operation on
// the new group, every host says which collective it is at; they must agree
// (a collective ends on every host or on none, since each needs every host),
// else the communicator is aborted.
class CrossHostComm : public std::enable_shared_from_this<CrossHostComm> {
 public:
  // Start() once made (the leg thread needs shared_from_this). resume: the
  // state a previous process handed over; the group then re-forms at its
  // generation, without measuring the links again.
  CrossHostComm(CollBackend& local, CrossHostLayout layout, CrossHostKeys keys,
                cluster::GlooGroupOptions group, std::shared_ptr<CrossHostStats> stats,
                std::optional<CrossHostResume> resume = std::nullopt);
  ~CrossHostComm();
  void Start();
  CrossHostComm(const CrossHostComm&) = delete;
  CrossHostComm& operator=(const CrossHostComm&) = delete;

  const CrossHostLayout& layout() const { return layout_; }

  // A local rank joined the local engine's communicator. Once every local
  // rank has, the leg thread forms the group and answers each rank's init:
  // a member numbered as in the whole communicator, or the group's error.
  void AddLocal(uint32_t global_rank, MemberPtr local_member, InitDone done);

  void Post(uint32_t global_rank, coll::OpDesc op, coll::Done done);
  // Every pending operation fails with `why`, every later one with
  // kAborted; cause is what AbortDetail reports (SPEC §7.3.6).
  void Abort(Status why, coll::AbortCause cause = coll::AbortCause::kProvider);
  // kNone while the communicator is not aborted.
  coll::AbortCause abort_cause() const;
  // A rank leaves (cause: its session ended, or it destroyed its handle):
  // the communicator is aborted, and when Release returns the leg thread no
  // longer touches any rank's memory.
  void Release(coll::AbortCause cause);
  // As Release, once a live upgrade handed the rank's session to the next
  // process, which re-forms the group: nothing went wrong, so nothing is
  // reported as an abort.
  void HandOver();
  // Aborts with kShutdown and waits, at most until deadline, for the leg
  // thread to end; false if it is still inside an operation of the group
  // (which its timeout bounds; the thread then ends on its own).
  bool Stop(std::chrono::steady_clock::time_point deadline);
  Status abort_status() const;
  CrossHostCommInfo Info() const;

  // Live upgrade. Takes back global_rank's collectives that have not
  // started (each completes with kTryAgain before Withdraw returns) and
  // announces the re-formation; the number taken back.
  size_t Withdraw(uint32_t global_rank);
  // What the next process needs for global_rank, given the engine's state
  // of its local part: numbered in the whole communicator, the rest in
  // `backend`. kState before Withdraw announced the re-formation.
  StatusOr<SavedMember> Save(uint32_t global_rank, const coll::MemberState& local) const;
  // A rank of a resumed communicator brings back its point-to-point counters.
  void RestorePairs(uint32_t global_rank, const CrossHostPairs& pairs);
  // Another host's next process asks this host to re-form the group now
  // (an idle communicator would otherwise notice only at its next
  // operation): re-formed between operations when the store announces a
  // newer generation. From any thread; it reads the store.
  void CheckForReform();
  const CrossHostKeys& keys() const { return keys_; }

 private:
  struct PendingOp {
    std::vector<std::optional<coll::OpDesc>> descs;  // by local index
    std::vector<coll::Done> dones;
    uint32_t posted = 0;
  };

  // Abort without the log line; false if it was aborted already.
  bool AbortSilently(Status why, coll::AbortCause cause);
  // Once aborted: returns when no copy touches a rank's memory any more.
  void WaitOutCopies();
  void Loop();
  bool FormGroup();
  // Forms the group and measures its cost model (leg_model_); when resumed,
  // re-forms it at the handed-over generation instead.
  StatusOr<std::unique_ptr<cluster::InterHostGroup>> ConnectAndCalibrate();

  // cross_host_reform.cc. The group's store key at a generation.
  std::string GroupKey(uint64_t generation) const;
  // After a failure of the group (used at generation `used`): the newer
  // generation it re-forms at, if one was announced.
  std::optional<uint64_t> NewerGeneration(const Status& failure, uint64_t used);
  // On the leg thread: closes the current group and forms the one of
  // `generation`, where the hosts must agree that seq is the first
  // collective not completed.
  Status Reform(uint64_t generation, uint64_t seq);
  // Connects the group of `generation` and checks the agreement on seq.
  StatusOr<std::unique_ptr<cluster::InterHostGroup>> ConnectAt(uint64_t generation, uint64_t seq);
  // On a point-to-point thread whose operation failed at generation `used`:
  // has the leg thread re-form the group, if a newer one was announced, and
  // waits for it. False when there is none, or the communicator was aborted.
  bool AwaitReform(const Status& failure, uint64_t used);
  std::pair<std::shared_ptr<cluster::InterHostGroup>, uint64_t> CurrentGroup() const;
  void PostPointToPoint(uint32_t global_rank, coll::OpDesc& op, coll::Done& done);

  // cross_host_p2p.cc: a send or recv whose peer is on another host. The
  // pair (SPEC §7.4.5) is the seq-th send from src to dst, counted on the
  // sender's host, and the seq-th recv of dst from src, on the receiver's.
  struct PointToPoint {
    uint64_t id = 0;  // its done's key in p2p_dones_
    uint32_t me = 0;  // the global rank that posted it
    uint64_t seq = 0;
    coll::OpDesc op;
    std::chrono::steady_clock::time_point deadline;  // for the partner to arrive
  };
  void PostAcrossHosts(uint32_t global_rank, coll::OpDesc& op, coll::Done& done);
  void RunPointToPoint(PointToPoint p);
  // The two sides exchange (count, dtype) before any data: kMismatch on both
  // when they differ, and no data moves.
  Status AgreeAcrossHosts(const PointToPoint& p, cluster::InterHostGroup& group);
  Status SendAcrossHosts(const PointToPoint& p, cluster::InterHostGroup& group);
  Status RecvAcrossHosts(const PointToPoint& p, cluster::InterHostGroup& group);
  // Answers op's ranks that are not answered yet.
  void Finish(PendingOp& op, const Status& s);

  // cross_host_ops.cc: one operation, on the leg thread, again on a
  // re-formed group when its group failed for a re-formation.
  void Run(PendingOp op, uint64_t seq);
  Status RunOnce(PendingOp& op);
  // One output of a reduction: bytes [from, from + len) of the result, to
  // the start of a rank's recv buffer.
  struct Output {
    const coll::IoVec* recv;
    size_t from;
    size_t len;
  };
  Status RunReduction(PendingOp& op);  // all-reduce, reduce, reduce-scatter
  // The reduction of count elements into staging_ and the outputs from it:
  // hierarchically (each host's ranks, then the hosts, pipelined in chunks),
  // or in rank order from every rank's contribution (deterministic floats).
  Status ReduceHierarchically(PendingOp& op, uint64_t count, const std::vector<Output>& outputs);
  Status ReduceInRankOrder(PendingOp& op, uint64_t count, const std::vector<Output>& outputs);
  // Posts the engine's reduction of count elements at byte `offset` of every
  // local rank's send buffer into staging_ at the same offset.
  std::vector<std::future<Status>> PostLocalReduce(PendingOp& op, size_t offset, uint64_t count,
                                                   uint8_t redop);
  // The inter-host leg of n elements at data (in staging_), as bfloat16 when
  // the communicator allows it for this reduction.
  Status CombineAcrossHosts(uint8_t* data, uint64_t n, const coll::OpDesc& d,
                            cluster::InterHostAlgorithm algorithm);
  // The outputs' parts within [offset, offset + bytes) of staging_.
  Status WriteOutputs(const std::vector<Output>& outputs, size_t offset, size_t bytes);
  Status RunBroadcast(PendingOp& op);
  Status RunGather(PendingOp& op);  // all-gather, all-to-all
  // Every rank's first per_rank bytes of its send buffer, at rank * per_rank
  // in staging_, on every host (each host broadcasts its ranks' blocks).
  Status GatherAll(PendingOp& op, size_t per_rank);
  // Runs f (which reads or writes the ranks' memory) under mu_, unless the
  // communicator was aborted: a rank's memory may be gone then.
  template <typename F>
  Status Touching(F&& f);
  // Runs f, an operation of the group (on staging memory only): meanwhile an
  // abort answers the running operation's ranks at once instead of after the
  // group's timeout (a partition leaves Gloo waiting for it).
  template <typename F>
  Status InGroup(F&& f);
  cluster::InterHostAlgorithm ChooseAlgorithm(size_t bytes);

  CollBackend& local_;
  const CrossHostLayout layout_;
  const CrossHostKeys keys_;
  const std::string uid_hex_;
  const cluster::GlooGroupOptions group_options_;  // key: generation 0's
  const std::shared_ptr<CrossHostStats> stats_;
  const bool resumed_;
  // Set (under mu_) by the leg thread before any rank's init is answered,
  // and replaced when the group re-forms; the leg thread reads it without
  // the lock, the point-to-point threads through CurrentGroup.
  std::shared_ptr<cluster::InterHostGroup> group_;
  std::optional<cluster::LegCostModel> leg_model_;  // set with group_
  std::vector<uint8_t> staging_;                    // leg thread only
  std::vector<uint16_t> wire_;                      // bfloat16 chunk (ALLOW_LOSSY); leg thread only
  uint64_t local_seq_ = 0;  // the local part's next seq in the engine; leg thread only
  // Re-formation announcements, read and written from several threads.
  mutable std::mutex store_mu_;
  mutable cluster::CommDirectory directory_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::vector<MemberPtr> members_;  // local engine members, by local index
  std::vector<InitDone> init_dones_;
  uint32_t joined_ = 0;
  bool inits_answered_ = false;                       // init_dones_ were taken by the formation
  std::vector<coll::Done>* running_dones_ = nullptr;  // the running operation's
  bool in_group_op_ = false;
  std::map<uint64_t, PendingOp> pending_;
  uint64_t next_seq_ = 0;
  Status aborted_ = Status::Ok();
  coll::AbortCause abort_cause_ = coll::AbortCause::kNone;
  bool stop_ = false;
  bool finished_ = false;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> next_send_;  // (src, dst) -> next pair seq
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> next_recv_;
  std::map<uint64_t, coll::Done> p2p_dones_;  // point-to-point not answered yet, by id
  uint64_t next_p2p_id_ = 0;
  uint32_t p2p_threads_ = 0;    // running; at most kMaxPointToPoint
  uint64_t generation_ = 0;     // group_'s
  uint64_t reform_wanted_ = 0;  // a point-to-point thread asks the leg thread to re-form
  uint64_t announced_ = 0;      // the generation Withdraw announced (0: none)
  std::thread leg_;
};

template <typename F>
Status CrossHostComm::Touching(F&& f) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_.ok()) return aborted_;
  f();
  return Status::Ok();
}

template <typename F>
Status CrossHostComm::InGroup(F&& f) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.ok()) return aborted_;
    in_group_op_ = true;
  }
  Status s = f();
  std::lock_guard<std::mutex> lock(mu_);
  in_group_op_ = false;
  return s;
}

// A rank's membership in a communicator across hosts: numbered as in the
// whole communicator; its local engine membership inside.
class CrossHostMember : public CommMember {
 public:
  CrossHostMember(std::shared_ptr<CrossHostComm> comm, uint32_t rank, MemberPtr local)
      : comm_(std::move(comm)), rank_(rank), local_(std::move(local)) {}
  uint32_t rank() const override { return rank_; }
  uint32_t nranks() const override { return comm_->layout().nranks; }
  uint64_t comm_id() const override { return local_->comm_id(); }
  const std::shared_ptr<CrossHostComm>& comm() const { return comm_; }
  const MemberPtr& local() const { return local_; }

 private:
  std::shared_ptr<CrossHostComm> comm_;
  uint32_t rank_;
  MemberPtr local_;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_CROSS_HOST_COMM_H_
