#include "engine_adapters.h"

namespace hz::service {

namespace {

// EventSubscription on one binding of the bus.
class BusSubscription : public EventSubscription {
 public:
  explicit BusSubscription(std::unique_ptr<events::Delivery> d) : d_(std::move(d)) {}

  Status Subscribe(const hz_event_subscribe_args& args,
                   hz_event_subscribe_result* result) override {
    return d_->Subscribe(args, result);
  }
  bool Next(hz_event* out) override { return d_->Next(out); }
  void Ack(const hz_event_ack_args& args, std::function<void(Status)> done) override {
    d_->AckAsync(args, std::move(done));
  }
  void SetNotify(std::function<void()> notify) override { d_->SetNotify(std::move(notify)); }
  events::DeliveryPosition Position() const override { return d_->Position(); }
  Status Resume(const events::DeliveryPosition& position) override { return d_->Resume(position); }
  void Abandon() override { d_->Abandon(); }

 private:
  std::unique_ptr<events::Delivery> d_;
};

}  // namespace

bool CkptAdapter::ClaimQuiesce(const TenantId& tenant, checkpoint::StreamId stream,
                               const void* owner, const std::string& vm) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = quiesce_.try_emplace({tenant, stream}, Claim{owner, vm});
  return inserted || it->second.owner == owner;
}

std::set<checkpoint::StreamId> CkptAdapter::StreamsOf(const TenantId& tenant,
                                                      const std::set<std::string>& vms) {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<checkpoint::StreamId> out;
  for (const auto& [key, claim] : quiesce_) {
    if (key.first == tenant && vms.count(claim.vm) != 0) out.insert(key.second);
  }
  return out;
}

void CkptAdapter::ReleaseQuiesce(const TenantId& tenant, checkpoint::StreamId stream,
                                 const void* owner) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = quiesce_.find({tenant, stream});
  if (it != quiesce_.end() && it->second.owner == owner) quiesce_.erase(it);
}

Status BusAdapter::Connect(const TenantId& tenant, const std::string& subscriber,
                           std::unique_ptr<EventSubscription>* out) {
  std::unique_ptr<events::Delivery> d;
  Status st = bus_.Connect(tenant, subscriber, &d);
  if (st.ok()) *out = std::make_unique<BusSubscription>(std::move(d));
  return st;
}

}  // namespace hz::service
