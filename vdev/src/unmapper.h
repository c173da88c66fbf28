// Unmaps guest memory off the caller's thread.
//
// Unmapping pages the back-end touched flushes the TLB of every CPU this
// process runs on and waits for them, which takes milliseconds on a
// virtualised host. The last holder of a guest memory map is often the
// connection thread that many VMs share, and a VM that connects and
// disconnects in a loop would make every other VM wait for its unmaps. So
// the unmap runs on a thread of its own; the caller only queues it.
#ifndef VDEV_UNMAPPER_H_
#define VDEV_UNMAPPER_H_

#include <cstddef>

namespace vdev {

// munmap(addr, len), soon, on the unmap thread (started on first use). When
// more unmaps wait than the thread keeps up with, the caller unmaps inline:
// the address space a flood of connections holds stays bounded.
void UnmapLater(void* addr, size_t len);

// Returns once every unmap queued before the call has run (tests).
void WaitForUnmaps();

}  // namespace vdev

#endif  // VDEV_UNMAPPER_H_
