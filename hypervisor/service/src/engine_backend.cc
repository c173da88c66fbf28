#include "hz/service/engine_backend.h"

#include "hz/common/thread_priority.h"

namespace hz::service {

namespace {

class EngineMember : public CommMember {
 public:
  explicit EngineMember(std::shared_ptr<coll::Member> m) : m_(std::move(m)) {}
  uint32_t rank() const override { return m_->rank(); }
  uint32_t nranks() const override { return m_->nranks(); }
  uint64_t comm_id() const override { return m_->comm_id(); }
  const std::shared_ptr<coll::Member>& get() const { return m_; }

 private:
  std::shared_ptr<coll::Member> m_;
};

const std::shared_ptr<coll::Member>& Unwrap(const MemberPtr& m) {
  return static_cast<const EngineMember&>(*m).get();
}

}  // namespace

EngineBackend::EngineBackend(coll::EngineOptions opts)
    : engine_(opts), reaper_(NamedThread("hz-coll-reaper", [this] { Reap(); })) {}

EngineBackend::~EngineBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  reaper_.join();
}

Status EngineBackend::NewUid(const TenantId& tenant, coll::Uid* out) {
  return engine_.NewUid(tenant, out);
}

void EngineBackend::Init(const TenantId& tenant, const coll::Uid& uid, uint32_t nranks,
                         uint32_t rank, coll::Constraints c,
                         std::function<void(Status, MemberPtr)> done) {
  engine_.Init(tenant, uid, nranks, rank, c,
               [done = std::move(done)](Status st, std::shared_ptr<coll::Member> m) {
                 done(st, m ? std::make_shared<EngineMember>(std::move(m)) : nullptr);
               });
}

void EngineBackend::Rejoin(const TenantId& tenant, const SavedMember& saved,
                           std::function<void(Status, MemberPtr)> done) {
  engine_.Rejoin(tenant, saved.engine,
                 [done = std::move(done)](Status st, std::shared_ptr<coll::Member> m) {
                   done(st, m ? std::make_shared<EngineMember>(std::move(m)) : nullptr);
                 });
}

size_t EngineBackend::Withdraw(const MemberPtr& m) {
  return engine_.Withdraw(Unwrap(m));
}

Status EngineBackend::SaveMember(const MemberPtr& m, SavedMember* out) const {
  return engine_.SaveMember(Unwrap(m), &out->engine);
}

void EngineBackend::Post(const MemberPtr& m, coll::OpDesc op, coll::Done done) {
  engine_.Post(Unwrap(m), std::move(op), std::move(done));
}

void EngineBackend::Destroy(const MemberPtr& m) {
  engine_.Destroy(Unwrap(m));
}

void EngineBackend::Leave(const MemberPtr& m) {
  engine_.Destroy(Unwrap(m), coll::AbortCause::kDestroyed);
}

uint32_t EngineBackend::AbortDetail(const MemberPtr& m) const {
  return static_cast<uint32_t>(engine_.AbortCauseOf(Unwrap(m)));
}

void EngineBackend::DestroyAsync(MemberPtr m) {
  // Called when the rank's session ended while its Init completed.
  engine_.Abort(Unwrap(m), coll::AbortCause::kSessionEnded);
  {
    std::lock_guard<std::mutex> lock(mu_);
    reap_.push_back(std::move(m));
  }
  cv_.notify_one();
}

void EngineBackend::Reap() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !reap_.empty(); });
    while (!reap_.empty()) {
      MemberPtr m = std::move(reap_.front());
      reap_.pop_front();
      lock.unlock();
      engine_.Destroy(Unwrap(m));
      m.reset();
      lock.lock();
    }
    if (stop_) return;
  }
}

void EngineBackend::Abort(const MemberPtr& m) {
  engine_.Abort(Unwrap(m));
}

void EngineBackend::Shutdown() {
  engine_.Shutdown();
}

BackendStats EngineBackend::Stats() const {
  coll::EngineStats s = engine_.Stats();
  BackendStats out;
  for (size_t i = 0; i < coll::kAlgorithmCount; ++i) {
    out.algorithms.push_back(
        {coll::AlgorithmName(static_cast<coll::Algorithm>(i)), s.algorithms[i]});
  }
  for (size_t i = 0; i < coll::kOpCount; ++i) {
    out.ops.push_back({coll::OpName(static_cast<coll::Op>(i)), s.ops[i]});
    out.op_bytes.push_back({coll::OpName(static_cast<coll::Op>(i)), s.bytes[i]});
  }
  out.communicators = s.communicators;
  out.streamed = s.streamed;
  out.worker_polls = s.worker_polls;
  out.worker_polled_tasks = s.worker_polled_tasks;
  out.aborts = s.aborts;
  out.timeouts = s.timeouts;
  out.mismatches = s.mismatches;
  out.workers = engine_.workers();
  return out;
}

std::vector<CommSummary> EngineBackend::Communicators() const {
  std::vector<CommSummary> out;
  for (const coll::CommInfo& c : engine_.Communicators()) {
    CommSummary s;
    s.id = c.id;
    s.tenant = c.tenant.name();
    s.nranks = c.nranks;
    s.joined = c.joined;
    s.next_seq = c.next_seq;
    s.pending = c.pending;
    s.state = coll::CommStateName(c.state);
    s.abort_reason = StatusCodeName(c.abort_reason.code());
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace hz::service
