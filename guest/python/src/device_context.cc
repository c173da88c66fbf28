// SPDX-License-Identifier: Apache-2.0
#include "device_context.h"

#include <unistd.h>

namespace hz::py {

std::shared_ptr<DeviceContext> DeviceContext::Open(const std::string& spec) {
  return std::shared_ptr<DeviceContext>(new DeviceContext(spec));
}

DeviceContext::DeviceContext(const std::string& spec)
    : spec_(spec), pid_(getpid()), device_(spec.empty() ? nullptr : spec.c_str()) {}

DeviceContext::~DeviceContext() {
  // The pool frees its cached blocks before the device closes (members are
  // destroyed in reverse order); in a forked child it frees nothing.
}

bool DeviceContext::InOwnerProcess() const {
  return getpid() == pid_;
}

int DeviceContext::Source::Alloc(size_t bytes, void** ptr) {
  if (!owner_->InOwnerProcess()) return HZ_ENODEV;
  return hz_mem_alloc(owner_->get(), bytes, ptr);
}

void DeviceContext::Source::Free(void* ptr) {
  // In a forked child the block stays mapped until exit; releasing it would
  // unregister it in the parent's session.
  if (owner_->InOwnerProcess()) hz_mem_free(owner_->get(), ptr);
}

}  // namespace hz::py
