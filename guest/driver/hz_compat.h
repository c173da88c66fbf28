/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * HarmonAIze guest driver: what differs between the kernels it builds for.
 *
 * The driver is written against the newest kernel API it is tested with. For
 * older kernels, each difference gets one small helper here, keyed on
 * LINUX_VERSION_CODE; no other file tests the kernel version. When the oldest
 * kernel a helper serves is no longer supported, the helper goes and its
 * callers use the kernel's own function.
 *
 * Tested: Debian 12's 6.1, Debian 13's 6.12 and the newest kernel in
 * trixie-backports (see README.md).
 *
 * Kernel interfaces that changed in that range without needing a helper:
 *  - 6.12 removed no_llseek. The driver sets no .llseek: its open() ends in
 *    stream_open(), which clears FMODE_LSEEK, so lseek() fails with -ESPIPE
 *    on every kernel, as no_llseek made it do.
 *  - Later kernels (6.12 among them) make register_virtio_driver() set the
 *    driver's owner; 6.1 does not, so .driver.owner stays set explicitly.
 */
#ifndef HZ_COMPAT_H
#define HZ_COMPAT_H

#include <linux/slab.h>
#include <linux/version.h>
#include <linux/virtio_config.h>

#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 11, 0)
/*
 * Linux 6.11 replaced the parallel arrays of callbacks, names and contexts
 * that virtio_find_vqs() took with one array of struct virtqueue_info. Older
 * kernels get the new structure and a virtio_find_vqs() over it, which builds
 * the old arrays.
 */
struct virtqueue_info {
	const char *name;
	vq_callback_t *callback;
	bool ctx;
};

static inline int hz_virtio_find_vqs(struct virtio_device *vdev,
				     unsigned int nvqs, struct virtqueue *vqs[],
				     struct virtqueue_info vqs_info[],
				     struct irq_affinity *desc)
{
	vq_callback_t **callbacks;
	const char **names;
	bool *ctx;
	unsigned int i;
	int err = -ENOMEM;

	callbacks = kcalloc(nvqs, sizeof(*callbacks), GFP_KERNEL);
	names = kcalloc(nvqs, sizeof(*names), GFP_KERNEL);
	ctx = kcalloc(nvqs, sizeof(*ctx), GFP_KERNEL);
	if (!callbacks || !names || !ctx)
		goto out;
	for (i = 0; i < nvqs; i++) {
		callbacks[i] = vqs_info[i].callback;
		names[i] = vqs_info[i].name;
		ctx[i] = vqs_info[i].ctx;
	}
	err = virtio_find_vqs_ctx(vdev, nvqs, vqs, callbacks, names, ctx, desc);
out:
	kfree(ctx);
	kfree(names);
	kfree(callbacks);
	return err;
}
#else
static inline int hz_virtio_find_vqs(struct virtio_device *vdev,
				     unsigned int nvqs, struct virtqueue *vqs[],
				     struct virtqueue_info vqs_info[],
				     struct irq_affinity *desc)
{
	return virtio_find_vqs(vdev, nvqs, vqs, vqs_info, desc);
}
#endif

#endif /* HZ_COMPAT_H */
