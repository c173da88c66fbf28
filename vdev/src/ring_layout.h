/* Split virtqueue layout constants (virtio 1.x, 2.7). They mirror
 * <linux/virtio_ring.h>, whose inline helpers do not compile as C++;
 * ring_layout.c checks each value against that header at build time. */
#ifndef VDEV_SRC_RING_LAYOUT_H_
#define VDEV_SRC_RING_LAYOUT_H_

#define VDEV_VRING_DESC_SIZE 16     /* sizeof(struct vring_desc) */
#define VDEV_VRING_DESC_ADDR 0      /* offsetof(struct vring_desc, addr) */
#define VDEV_VRING_DESC_LEN 8       /* offsetof(struct vring_desc, len) */
#define VDEV_VRING_DESC_FLAGS 12    /* offsetof(struct vring_desc, flags) */
#define VDEV_VRING_DESC_NEXT 14     /* offsetof(struct vring_desc, next) */
#define VDEV_VRING_AVAIL_RING 4     /* offsetof(struct vring_avail, ring) */
#define VDEV_VRING_USED_RING 4      /* offsetof(struct vring_used, ring) */
#define VDEV_VRING_USED_ELEM_SIZE 8 /* sizeof(struct vring_used_elem) */
#define VDEV_VRING_DESC_F_NEXT 1
#define VDEV_VRING_DESC_F_WRITE 2
#define VDEV_VRING_DESC_F_INDIRECT 4
#define VDEV_VRING_USED_F_NO_NOTIFY 1
#define VDEV_VRING_AVAIL_F_NO_INTERRUPT 1

#endif /* VDEV_SRC_RING_LAYOUT_H_ */
