// SPDX-License-Identifier: Apache-2.0
// Only c10's headers (quick to compile), not ATen's.
#include "allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <mutex>

namespace hz::c10d {
namespace {

class RegisteredAllocator final : public c10::Allocator {
 public:
  RegisteredAllocator(std::shared_ptr<py::DeviceContext> ctx, c10::Allocator* fallback)
      : ctx_(std::move(ctx)), fallback_(fallback) {}

  c10::DataPtr allocate(size_t n) const override {
    if (n >= min_bytes_.load(std::memory_order_relaxed) && ctx_->InOwnerProcess()) {
      if (void* p = ctx_->pool().Allocate(n)) {
        return {p, p, &Delete, c10::Device(c10::DeviceType::CPU)};
      }
    }
    return fallback_->allocate(n);
  }
  // raw_allocate() hands out either kind of memory; Delete tells them apart.
  c10::DeleterFnPtr raw_deleter() const override { return &Delete; }

  static void Delete(void* p);

  const std::shared_ptr<py::DeviceContext>& ctx() const { return ctx_; }
  c10::Allocator* fallback() const { return fallback_; }
  void set_min_bytes(size_t n) { min_bytes_.store(n, std::memory_order_relaxed); }

 private:
  // Holds the device open for as long as tensors may live in its memory.
  std::shared_ptr<py::DeviceContext> ctx_;
  c10::Allocator* fallback_;
  std::atomic<size_t> min_bytes_{kDefaultMinAllocatorBytes};
};

// Created once and never destroyed: tensors freed during interpreter
// shutdown still find it.
RegisteredAllocator* g_allocator = nullptr;
std::mutex g_mu;

void RegisteredAllocator::Delete(void* p) {
  if (g_allocator->ctx_->pool().Release(p)) return;
  // Fallback memory reaches here only through raw_deallocate().
  if (c10::DeleterFnPtr d = g_allocator->fallback_->raw_deleter()) d(p);
}

}  // namespace

bool InstallAllocator(const std::shared_ptr<py::DeviceContext>& ctx, size_t min_bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_allocator == nullptr) {
    g_allocator = new RegisteredAllocator(ctx, c10::GetCPUAllocator());
  } else if (g_allocator->ctx() != ctx) {
    return false;
  }
  g_allocator->set_min_bytes(min_bytes);
  // Priority 0 is torch's default allocator's; a profiler's or another
  // library's higher-priority allocator is left in place.
  c10::SetCPUAllocator(g_allocator, 0);
  return c10::GetCPUAllocator() == g_allocator;
}

void UninstallAllocator() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_allocator != nullptr && c10::GetCPUAllocator() == g_allocator) {
    c10::SetCPUAllocator(g_allocator->fallback(), 0);
  }
}

bool AllocatorInstalled() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_allocator != nullptr && c10::GetCPUAllocator() == g_allocator;
}

}  // namespace hz::c10d
