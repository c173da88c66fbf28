#include "cross_host_comm.h"

#include <algorithm>

#include "hz/common/thread_priority.h"
#include "spdlog/spdlog.h"

namespace hz::service {

namespace {

uint64_t MonotonicNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

FabricMeter::FabricMeter(uint64_t window_ns) : window_(window_ns, 10, MonotonicNs()) {}

void FabricMeter::Leg(double expected_s, uint64_t took_ns) {
  const double expected_ns = expected_s * 1e9;
  if (expected_ns <= 0 || took_ns <= 2 * expected_ns) return;
  std::lock_guard<std::mutex> lock(mu_);
  window_.AddWaiting(took_ns - static_cast<uint64_t>(expected_ns), MonotonicNs());
}

WaitingTime FabricMeter::Measure() {
  std::lock_guard<std::mutex> lock(mu_);
  return window_.Measure(MonotonicNs());
}

uint32_t CrossHostLayout::LocalIndex(uint32_t global_rank) const {
  auto it = std::lower_bound(local_ranks.begin(), local_ranks.end(), global_rank);
  return static_cast<uint32_t>(it - local_ranks.begin());
}

CrossHostComm::CrossHostComm(CollBackend& local, CrossHostLayout layout, CrossHostKeys keys,
                             cluster::GlooGroupOptions group, std::shared_ptr<CrossHostStats> stats,
                             std::optional<CrossHostResume> resume)
    : local_(local),
      layout_(std::move(layout)),
      keys_(std::move(keys)),
      uid_hex_(coll::UidHex(keys_.uid)),
      group_options_(std::move(group)),
      stats_(std::move(stats)),
      resumed_(resume.has_value()),
      directory_(keys_.store, keys_.key_prefix, keys_.store_timeout) {
  members_.resize(layout_.local_ranks.size());
  init_dones_.resize(layout_.local_ranks.size());
  if (resume) {
    generation_ = resume->generation;
    next_seq_ = resume->next_seq;
    local_seq_ = resume->local_seq;
    leg_model_ = resume->leg_model;
  }
}

void CrossHostComm::Start() {
  // The thread keeps the communicator alive until it ends (after an abort or
  // Stop), so the last reference usually goes on the thread itself.
  leg_ = NamedThread("hz-xhost-comm", [self = shared_from_this()] { self->Loop(); });
}

CrossHostComm::~CrossHostComm() {
  if (!leg_.joinable()) return;
  if (leg_.get_id() == std::this_thread::get_id()) {
    leg_.detach();
  } else {
    leg_.join();
  }
}

bool CrossHostComm::Stop(std::chrono::steady_clock::time_point deadline) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    stop_ = true;
    if (aborted_.ok()) aborted_ = Status::Shutdown("the service is stopping");
    wake_.notify_all();
    return wake_.wait_until(lock, deadline, [this] { return finished_ && p2p_threads_ == 0; });
  }
}

Status CrossHostComm::abort_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

void CrossHostComm::AddLocal(uint32_t global_rank, MemberPtr local_member, InitDone done) {
  const uint32_t i = layout_.LocalIndex(global_rank);
  std::unique_lock<std::mutex> lock(mu_);
  if (inits_answered_) {  // the formation failed before this rank joined
    Status why = aborted_.ok() ? Status::Aborted("the communicator failed") : aborted_;
    lock.unlock();
    return done(why, nullptr);
  }
  members_[i] = std::move(local_member);
  init_dones_[i] = std::move(done);
  ++joined_;
  wake_.notify_all();
}

void CrossHostComm::Post(uint32_t global_rank, coll::OpDesc op, coll::Done done) {
  if (op.op == coll::Op::kSend || op.op == coll::Op::kRecv) {
    return PostPointToPoint(global_rank, op, done);
  }
  const uint32_t i = layout_.LocalIndex(global_rank);
  std::unique_lock<std::mutex> lock(mu_);
  if (!aborted_.ok()) {
    Status why = aborted_;
    lock.unlock();
    return done(why);
  }
  PendingOp& p = pending_[op.seq];
  if (p.descs.empty()) {
    p.descs.resize(layout_.local_ranks.size());
    p.dones.resize(layout_.local_ranks.size());
  }
  if (p.descs[i]) {
    lock.unlock();
    return done(Status::InvalidArgument("seq posted twice by the same rank"));
  }
  p.descs[i] = std::move(op);
  p.dones[i] = std::move(done);
  ++p.posted;
  wake_.notify_all();
}

void CrossHostComm::PostPointToPoint(uint32_t global_rank, coll::OpDesc& op, coll::Done& done) {
  if (op.peer >= layout_.nranks) return done(Status::InvalidArgument("peer out of range"));
  if (layout_.host_of_rank[op.peer] != layout_.host_index) {
    return PostAcrossHosts(global_rank, op, done);
  }
  // Between two ranks of this host, the engine pairs them as it would on
  // one host (in its own numbering).
  MemberPtr member;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.ok()) {
      Status why = aborted_;
      return done(why);
    }
    member = members_[layout_.LocalIndex(global_rank)];
  }
  op.peer = layout_.LocalIndex(op.peer);
  local_.Post(member, std::move(op), std::move(done));
}

CrossHostCommInfo CrossHostComm::Info() const {
  CrossHostCommInfo i;
  i.tenant = layout_.tenant;
  i.nranks = layout_.nranks;
  i.hosts = layout_.hosts;
  i.local_ranks = layout_.local_ranks;
  std::lock_guard<std::mutex> lock(mu_);
  i.state = !aborted_.ok() ? "aborted" : inits_answered_ ? "active" : "forming";
  if (!aborted_.ok()) i.abort_reason = aborted_.message();
  i.next_seq = next_seq_;
  i.generation = generation_;
  i.leg_model = leg_model_;
  return i;
}

coll::AbortCause CrossHostComm::abort_cause() const {
  std::lock_guard<std::mutex> lock(mu_);
  return abort_cause_;
}

void CrossHostComm::Abort(Status why, coll::AbortCause cause) {
  if (!AbortSilently(std::move(why), cause)) return;
  spdlog::warn("event=cross_host_comm_aborted host_index={} error=\"{}\"", layout_.host_index,
               abort_status().ToString());
}

bool CrossHostComm::AbortSilently(Status why, coll::AbortCause cause) {
  std::vector<PendingOp> failed;  // not started: EABORTED (SPEC §7.3.8)
  PendingOp running;              // in the group: the cause itself
  std::vector<coll::Done> p2p;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.ok()) return false;
    aborted_ = why.code() == StatusCode::kShutdown ? why : Status::Aborted(why.message());
    abort_cause_ = cause;
    for (auto& [seq, p] : pending_) failed.push_back(std::move(p));
    pending_.clear();
    // Point-to-point threads may wait in the group until its timeout: their
    // ranks are answered now (and their threads touch no rank's memory).
    for (auto& [id, d] : p2p_dones_) p2p.push_back(std::move(d));
    p2p_dones_.clear();
    // The leg thread is inside a group operation, touching only staging
    // memory: its ranks are answered now, not when Gloo gives up.
    if (in_group_op_ && running_dones_ != nullptr) {
      running.dones = std::move(*running_dones_);
      running_dones_->clear();
    }
    wake_.notify_all();
  }
  const Status aborted = abort_status();
  Finish(running, why);
  for (PendingOp& p : failed) Finish(p, aborted);
  for (coll::Done& d : p2p) d(aborted);
  return true;
}

void CrossHostComm::Release(coll::AbortCause cause) {
  Abort(Status::Aborted("a rank of the communicator left"), cause);
  WaitOutCopies();
}

void CrossHostComm::HandOver() {
  if (AbortSilently(Status::Aborted("handed over to the next process"),
                    coll::AbortCause::kSessionEnded)) {
    spdlog::info("event=cross_host_comm_handed_over host_index={}", layout_.host_index);
  }
  WaitOutCopies();
}

void CrossHostComm::WaitOutCopies() {
  // Copies to and from the ranks' memory run under mu_ and check the abort
  // first: once the lock is taken here, none is running or will run.
  std::lock_guard<std::mutex> lock(mu_);
}

void CrossHostComm::Finish(PendingOp& op, const Status& s) {
  std::vector<coll::Done> dones;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dones = std::move(op.dones);
    op.dones.clear();
    if (running_dones_ == &op.dones) running_dones_ = nullptr;
  }
  for (coll::Done& d : dones) {
    if (d) d(s);
  }
}

StatusOr<std::unique_ptr<cluster::InterHostGroup>> CrossHostComm::ConnectAndCalibrate() {
  // The other hosts kept the model; measuring again would stall them.
  if (resumed_) return ConnectAt(generation_, next_seq_);
  StatusOr<std::unique_ptr<cluster::InterHostGroup>> g = cluster::ConnectGlooGroup(group_options_);
  if (!g.ok()) return g;
  // Before any operation: every host measures the same sequence, so the
  // model (and each choice made from it) is the same on every host.
  StatusOr<cluster::LegCostModel> model = cluster::CalibrateLeg(**g, kPipelineChunkBytes);
  if (!model.ok()) return model.status();
  for (cluster::InterHostAlgorithm a : cluster::kInterHostAlgorithms) {
    spdlog::info(
        "event=cross_host_leg_model host_index={} algorithm={} latency_us={:.0f} "
        "gbit_s={:.2f}",
        layout_.host_index, cluster::InterHostAlgorithmName(a), model->Seconds(a, 0) * 1e6,
        model->BytesPerSecond(a) * 8e-9);
  }
  std::lock_guard<std::mutex> lock(mu_);
  leg_model_ = *model;
  return g;
}

bool CrossHostComm::FormGroup() {
  std::vector<InitDone> dones;
  std::vector<MemberPtr> members;
  Status why;
  {
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait(lock,
               [this] { return stop_ || !aborted_.ok() || joined_ == layout_.local_ranks.size(); });
    why = aborted_;
    if (why.ok()) members = members_;
  }
  StatusOr<std::unique_ptr<cluster::InterHostGroup>> g = why.ok() ? ConnectAndCalibrate() : why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dones = std::move(init_dones_);
    inits_answered_ = true;
  }
  if (!g.ok()) {
    spdlog::warn("event=cross_host_comm_failed step=connect error=\"{}\"", g.status().ToString());
    Abort(g.status());
    for (InitDone& d : dones) {
      if (d) d(g.status(), nullptr);
    }
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    group_ = std::move(*g);
  }
  spdlog::info("event=cross_host_comm_formed nranks={} hosts={} host_index={} local_ranks={}",
               layout_.nranks, layout_.nhosts(), layout_.host_index, layout_.local_ranks.size());
  for (size_t i = 0; i < dones.size(); ++i) {
    dones[i](Status::Ok(), std::make_shared<CrossHostMember>(shared_from_this(),
                                                             layout_.local_ranks[i], members[i]));
  }
  return true;
}

void CrossHostComm::Loop() {
  if (FormGroup()) {
    for (;;) {
      PendingOp op;
      uint64_t seq = 0;
      uint64_t reform = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [this] {
          auto it = pending_.find(next_seq_);
          return stop_ || !aborted_.ok() || reform_wanted_ > generation_ ||
                 (it != pending_.end() && it->second.posted == layout_.local_ranks.size());
        });
        if (stop_ || !aborted_.ok()) break;
        seq = next_seq_;
        if (reform_wanted_ > generation_) {
          reform = reform_wanted_;
        } else {
          ++next_seq_;
          op = std::move(pending_[seq]);
          pending_.erase(seq);
        }
      }
      if (reform == 0) {
        Run(std::move(op), seq);
      } else if (Status s = Reform(reform, seq); !s.ok()) {
        Abort(s);
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = true;
  wake_.notify_all();
}

}  // namespace hz::service
