#include "hz/service/device_state.h"

#include <sys/random.h>

#include <nlohmann/json.hpp>

#include "command_args.h"

namespace hz::service {

namespace {

// A session id the guest cannot predict (SPEC §7.1); never 0.
uint64_t RandomU64() {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v))) v = 0x9e3779b97f4a7c15ull;
  }
  return v;
}

}  // namespace

SessionState::SessionState(const std::atomic<bool>* service_draining)
    : service_draining_(service_draining), id_(RandomU64()) {}

bool SessionState::draining() const {
  return drained_ || (service_draining_ != nullptr && service_draining_->load());
}

void SessionState::Begin(uint64_t features) {
  hello_ = true;
  features_ = features;
}

void SessionState::End() {
  hello_ = false;
  features_ = 0;
  id_ = RandomU64();
}

void SessionState::Save(nlohmann::json* out) const {
  *out = {{"hello", hello_}, {"id", id_}, {"features", features_}};
}

Status SessionState::Restore(const nlohmann::json& in, uint64_t offered) {
  bool hello = false;
  uint64_t id = 0, features = 0;
  Status st = GetBool(in, "hello", false, &hello);
  if (st.ok()) st = GetUInt(in, "id", UINT64_MAX, &id);
  if (st.ok()) st = GetUInt(in, "features", UINT64_MAX, &features);
  if (!st.ok()) return st;
  if (id == 0) return Status::InvalidArgument("session id 0");
  if ((features & ~offered) != 0) {
    return Status::NotSupported("the session was granted features this service does not offer");
  }
  hello_ = hello;
  id_ = id;
  features_ = hello ? features : 0;
  return Status::Ok();
}

void QueueSlots::Start(vdev::Queue& queue) {
  slots_[queue.index()] = {&queue, next_gen_++};
}

void QueueSlots::Stop(uint16_t index) {
  slots_[index] = {nullptr, next_gen_++};
}

void QueueSlots::StopAll() {
  for (Slot& s : slots_) s = {nullptr, next_gen_++};
}

vdev::Queue* QueueSlots::Live(uint16_t index, uint64_t gen) const {
  const Slot& s = slots_[index];
  return s.gen == gen ? s.queue : nullptr;
}

std::vector<uint16_t> QueueSlots::Started() const {
  std::vector<uint16_t> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].queue != nullptr) out.push_back(static_cast<uint16_t>(i));
  }
  return out;
}

void RequestCounters::Count(uint16_t opcode, uint32_t status,
                            std::chrono::steady_clock::time_point taken) {
  requests_++;
  if (status != HZ_S_OK) errors_++;
  if (metrics_ == nullptr) return;
  metrics_->CountRequest(opcode, status);
  metrics_->ObserveLatency(opcode, std::chrono::steady_clock::now() - taken);
  tenant_->requests.fetch_add(1, std::memory_order_relaxed);
  if (status != HZ_S_OK) tenant_->errors.fetch_add(1, std::memory_order_relaxed);
}

void RequestCounters::CountDropped() {
  requests_++;
  errors_++;
  if (metrics_ == nullptr) return;
  metrics_->CountDropped();
  tenant_->requests.fetch_add(1, std::memory_order_relaxed);
  tenant_->errors.fetch_add(1, std::memory_order_relaxed);
}

void RequestCounters::AddBytes(uint16_t opcode, uint64_t bytes) {
  if (metrics_ == nullptr) return;
  metrics_->AddBytes(opcode, bytes);
  tenant_->bytes.fetch_add(bytes, std::memory_order_relaxed);
}

}  // namespace hz::service
