// SPDX-License-Identifier: Apache-2.0
// Registered memory for PyTorch's CPU tensors. With the allocator installed,
// every CPU tensor of at least min_bytes comes from the device's pool of
// registered blocks, so collectives and checkpoints use it in place: DDP's
// gradient buckets, allocated after the process group exists, go to the
// device without a copy. Smaller tensors, and any the pool cannot serve, come
// from torch's own allocator, as do all tensors of a forked child (the
// device's session belongs to the parent).
#ifndef HZ_GUEST_PYTHON_C10D_ALLOCATOR_H_
#define HZ_GUEST_PYTHON_C10D_ALLOCATOR_H_

#include <cstddef>
#include <memory>

#include "device_context.h"

namespace hz::c10d {

// Tensors below this many bytes travel inline or are staged cheaply.
constexpr size_t kDefaultMinAllocatorBytes = 64 * 1024;

// Makes the registered allocator torch's CPU allocator (or changes its
// threshold). False when another process-wide allocator outranks it, or when
// it already serves a different device.
bool InstallAllocator(const std::shared_ptr<py::DeviceContext>& ctx, size_t min_bytes);
// Gives torch its own allocator back; tensors already allocated keep their memory.
void UninstallAllocator();
bool AllocatorInstalled();

}  // namespace hz::c10d

#endif  // HZ_GUEST_PYTHON_C10D_ALLOCATOR_H_
