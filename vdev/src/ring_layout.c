/* Build-time proof that ring_layout.h matches the kernel's virtio ring ABI. */
#include "ring_layout.h"

#include <linux/virtio_ring.h>
#include <stddef.h>

_Static_assert(sizeof(struct vring_desc) == VDEV_VRING_DESC_SIZE, "desc size");
_Static_assert(offsetof(struct vring_desc, addr) == VDEV_VRING_DESC_ADDR, "desc addr");
_Static_assert(offsetof(struct vring_desc, len) == VDEV_VRING_DESC_LEN, "desc len");
_Static_assert(offsetof(struct vring_desc, flags) == VDEV_VRING_DESC_FLAGS, "desc flags");
_Static_assert(offsetof(struct vring_desc, next) == VDEV_VRING_DESC_NEXT, "desc next");
_Static_assert(offsetof(struct vring_avail, ring) == VDEV_VRING_AVAIL_RING, "avail ring");
_Static_assert(offsetof(struct vring_used, ring) == VDEV_VRING_USED_RING, "used ring");
_Static_assert(sizeof(struct vring_used_elem) == VDEV_VRING_USED_ELEM_SIZE, "used elem");
_Static_assert(VRING_DESC_F_NEXT == VDEV_VRING_DESC_F_NEXT, "F_NEXT");
_Static_assert(VRING_DESC_F_WRITE == VDEV_VRING_DESC_F_WRITE, "F_WRITE");
_Static_assert(VRING_DESC_F_INDIRECT == VDEV_VRING_DESC_F_INDIRECT, "F_INDIRECT");
_Static_assert(VRING_USED_F_NO_NOTIFY == VDEV_VRING_USED_F_NO_NOTIFY, "NO_NOTIFY");
_Static_assert(VRING_AVAIL_F_NO_INTERRUPT == VDEV_VRING_AVAIL_F_NO_INTERRUPT, "NO_INTERRUPT");

/* The same formula as the kernel's vring_need_event, exported so the C++
 * side uses the header's definition rather than a copy. */
int vdev_vring_need_event(unsigned short event_idx, unsigned short new_idx,
                          unsigned short old_idx) {
  return vring_need_event(event_idx, new_idx, old_idx);
}
