// CollBackend on the real collective engine (hz::coll::Engine).
#ifndef HZ_SERVICE_ENGINE_BACKEND_H_
#define HZ_SERVICE_ENGINE_BACKEND_H_

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "hz/collectives/engine.h"
#include "hz/service/coll_backend.h"

namespace hz::service {

class EngineBackend : public CollBackend {
 public:
  explicit EngineBackend(coll::EngineOptions opts);
  ~EngineBackend() override;

  Status NewUid(const TenantId& tenant, coll::Uid* out) override;
  void Init(const TenantId& tenant, const coll::Uid& uid, uint32_t nranks, uint32_t rank,
            coll::Constraints c, std::function<void(Status, MemberPtr)> done) override;
  void Post(const MemberPtr& m, coll::OpDesc op, coll::Done done) override;
  void Destroy(const MemberPtr& m) override;
  void DestroyAsync(MemberPtr m) override;
  void Abort(const MemberPtr& m) override;
  void Leave(const MemberPtr& m) override;
  uint32_t AbortDetail(const MemberPtr& m) const override;
  size_t Withdraw(const MemberPtr& m) override;
  Status SaveMember(const MemberPtr& m, SavedMember* out) const override;
  void Rejoin(const TenantId& tenant, const SavedMember& saved,
              std::function<void(Status, MemberPtr)> done) override;
  void Shutdown() override;
  void SetTenantWeight(const TenantId& tenant, uint32_t weight) override {
    engine_.SetTenantWeight(tenant, weight);
  }
  uint32_t TenantWeight(const TenantId& tenant) const override {
    return engine_.TenantWeight(tenant);
  }
  void SetTenantShare(const TenantId& tenant, uint32_t percent,
                      std::chrono::seconds span) override {
    engine_.SetTenantShare(tenant, percent, std::chrono::steady_clock::now() + span);
  }
  WaitingTime WorkerWaiting() const override { return engine_.WorkerWaiting(); }
  BackendStats Stats() const override;
  std::vector<CommSummary> Communicators() const override;

 private:
  void Reap();

  coll::Engine engine_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<MemberPtr> reap_;
  bool stop_ = false;
  std::thread reaper_;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_ENGINE_BACKEND_H_
