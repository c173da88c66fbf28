// SPDX-License-Identifier: Apache-2.0
// One process's connection to its HarmonAIze device, shared by the Python
// package (events, checkpoints, hints) and the torch.distributed backend
// (collectives). It must be one connection: a device socket serves one
// front-end at a time, and registered memory belongs to one session.
#ifndef HZ_GUEST_PYTHON_SRC_DEVICE_CONTEXT_H_
#define HZ_GUEST_PYTHON_SRC_DEVICE_CONTEXT_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>

#include "harmonaize/hz.hpp"
#include "registered_pool.h"

namespace hz::py {

class DeviceContext {
 public:
  // Registered memory kept for reuse after tensors and buffers release it.
  static constexpr size_t kDefaultCacheBytes = size_t{1} << 30;

  // Opens `spec` (empty: $HZ_DEVICE or the first /dev/harmonaizeN); throws hz::Error.
  static std::shared_ptr<DeviceContext> Open(const std::string& spec);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  hz_device_t* get() const { return device_.get(); }
  const std::string& spec() const { return spec_; }
  RegisteredPool& pool() { return pool_; }
  // A forked child inherits the connection's file descriptors and shared
  // memory but must never talk through them: the parent owns the session.
  bool InOwnerProcess() const;
  // True when [p, p+len) lies in memory this context registered.
  bool IsRegistered(const void* p, size_t len) const { return pool_.Contains(p, len); }

 private:
  class Source : public MemorySource {
   public:
    explicit Source(const DeviceContext* owner) : owner_(owner) {}
    int Alloc(size_t bytes, void** ptr) override;
    void Free(void* ptr) override;

   private:
    const DeviceContext* owner_;
  };

  explicit DeviceContext(const std::string& spec);

  std::string spec_;
  pid_t pid_;
  hz::Device device_;
  Source source_{this};
  RegisteredPool pool_{&source_, kDefaultCacheBytes};
};

}  // namespace hz::py

#endif  // HZ_GUEST_PYTHON_SRC_DEVICE_CONTEXT_H_
