// SPDX-License-Identifier: GPL-2.0-only
/*
 * HarmonAIze guest driver: long-term memory regions.
 *
 * A region's pages are pinned with FOLL_LONGTERM and charged against the
 * owner's RLIMIT_MEMLOCK (by hz_pin_user()). The device learns them as
 * guest-physical extents (contiguous pages coalesced). Pages are unpinned
 * only once the device has acknowledged the unregistration, or after
 * remove() reset the device; a region the device did not release waits on
 * the device's orphan list.
 */
#include <linux/mm.h>
#include <linux/sizes.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "hz_drv.h"

#define HZ_MAX_REGIONS_PER_FILE 1024
#define HZ_MAX_REGION_PAGES (SZ_4G >> PAGE_SHIFT)

static int hz_status_errno(u32 status)
{
	switch (status) {
	case HZ_S_OK:
		return 0;
	case HZ_S_EINVAL:
		return -EINVAL;
	case HZ_S_ENOTSUP:
		return -EOPNOTSUPP;
	case HZ_S_EPERM:
		return -EPERM;
	case HZ_S_ENOENT:
		return -ENOENT;
	case HZ_S_ELIMIT:
		return -ENOSPC;
	case HZ_S_EAGAIN:
		return -EAGAIN;
	case HZ_S_EFAULT:
		return -EFAULT;
	case HZ_S_EBUSY:
		return -EBUSY;
	case HZ_S_ESHUTDOWN:
		return -ESHUTDOWN;
	case HZ_S_ESTATE:
		return -EPROTO;
	default:
		return -EIO;
	}
}

static void hz_region_free(struct hz_region *r)
{
	hz_pin_release(&r->pin);	/* also uncharges RLIMIT_MEMLOCK */
	kfree(r);
}

/* The device may still use the region until it has been reset. */
static void hz_region_dispose(struct hz_dev *dev, struct hz_region *r,
			      bool device_released)
{
	if (!device_released) {
		mutex_lock(&dev->orphans_lock);
		if (!dev->quiesced) {
			list_add_tail(&r->node, &dev->orphans);
			mutex_unlock(&dev->orphans_lock);
			return;
		}
		mutex_unlock(&dev->orphans_lock);
	}
	hz_region_free(r);
}

void hz_orphans_release(struct hz_dev *dev)
{
	struct hz_region *r, *tmp;
	LIST_HEAD(list);

	mutex_lock(&dev->orphans_lock);
	dev->quiesced = true;
	list_splice_init(&dev->orphans, &list);
	mutex_unlock(&dev->orphans_lock);
	list_for_each_entry_safe(r, tmp, &list, node) {
		list_del(&r->node);
		hz_region_free(r);
	}
}

/* Coalesces physically contiguous pages; returns the extent count. */
static unsigned long hz_extents(struct hz_pin *pin, struct hz_extent *ext)
{
	unsigned long i, n = 0;
	u64 gpa, len = 0, start = 0;

	for (i = 0; i < pin->npages; i++) {
		gpa = page_to_phys(pin->pages[i]);
		if (len && start + len == gpa) {
			len += PAGE_SIZE;
			continue;
		}
		if (len && ext) {
			ext[n - 1].gpa = cpu_to_le64(start);
			ext[n - 1].len = cpu_to_le64(len);
		}
		start = gpa;
		len = PAGE_SIZE;
		n++;
	}
	if (len && ext) {
		ext[n - 1].gpa = cpu_to_le64(start);
		ext[n - 1].len = cpu_to_le64(len);
	}
	return n;
}

static int hz_region_send(struct hz_dev *dev, struct hz_region *r,
			  u32 flags, u32 *num_extents)
{
	struct hz_config *cfg = (struct hz_config *)dev->config;
	u32 max_extents = le32_to_cpu(cfg->max_extents);
	struct hz_region_register_args args = {};
	struct hz_region_register_result res = {};
	struct hz_ioc_completion comp = {};
	struct hz_extent *ext;
	unsigned long n;
	size_t bytes;
	int err;

	n = hz_extents(&r->pin, NULL);
	if ((max_extents && n > max_extents) ||
	    check_mul_overflow(n, sizeof(*ext), &bytes) ||
	    bytes + sizeof(args) > dev->max_args_len)
		return -E2BIG;
	ext = kvcalloc(n, sizeof(*ext), GFP_KERNEL);
	if (!ext)
		return -ENOMEM;
	hz_extents(&r->pin, ext);
	args.num_extents = cpu_to_le32(n);
	args.flags = cpu_to_le32(flags);
	args.total_len = cpu_to_le64((u64)r->pin.npages << PAGE_SHIFT);
	err = hz_ctrl_call(dev, HZ_OP_REGION_REGISTER, &args, sizeof(args),
			   ext, bytes, &res, sizeof(res), &comp,
			   msecs_to_jiffies(HZ_CTRL_TIMEOUT_MS));
	kvfree(ext);
	if (err)
		return err;
	if (comp.error)
		return comp.error;
	err = hz_status_errno(comp.status);
	if (err)
		return err;
	r->id = le32_to_cpu(res.region_id);
	if (comp.result_len < sizeof(res) || r->id == HZ_REGION_NONE ||
	    r->id == HZ_REGION_INLINE)
		return -EPROTO;
	*num_extents = n;
	return 0;
}

/*
 * Asks the device to drop a region, waiting at most timeout jiffies; true
 * when it no longer uses it.
 */
static bool hz_region_unregister(struct hz_dev *dev, struct hz_region *r,
				 long timeout, int *errp)
{
	struct hz_region_unregister_args args = {
		.region_id = cpu_to_le32(r->id),
	};
	struct hz_ioc_completion comp = {};
	int err;

	err = hz_ctrl_call(dev, HZ_OP_REGION_UNREGISTER, &args, sizeof(args),
			   NULL, 0, NULL, 0, &comp, timeout);
	if (!err)
		err = comp.error ?: hz_status_errno(comp.status);
	*errp = err;
	/* ENOENT: the device no longer knows it, so it cannot touch it. */
	return err == 0 || err == -ENOENT;
}

long hz_ioctl_region_register(struct hz_file *hf,
			      struct hz_ioc_region __user *uarg)
{
	struct hz_dev *dev = hf->dev;
	struct hz_config *cfg = (struct hz_config *)dev->config;
	u64 max_bytes = le64_to_cpu(cfg->max_region_bytes);
	u32 max_regions = le32_to_cpu(cfg->max_regions);
	struct hz_ioc_region arg;
	struct hz_region *r;
	unsigned long npages;
	u32 flags = 0, num_extents = 0;
	bool write;
	int err;

	if (copy_from_user(&arg, uarg, sizeof(arg)))
		return -EFAULT;
	if (!arg.flags || arg.flags & ~(HZ_REGION_RW_READ | HZ_REGION_RW_WRITE) ||
	    arg.reserved || !arg.len || !PAGE_ALIGNED(arg.addr) ||
	    !PAGE_ALIGNED(arg.len) || arg.addr + arg.len < arg.addr)
		return -EINVAL;
	npages = arg.len >> PAGE_SHIFT;
	if (npages > HZ_MAX_REGION_PAGES || (max_bytes && arg.len > max_bytes))
		return -E2BIG;
	if (arg.flags & HZ_REGION_RW_READ)
		flags |= HZ_REGION_F_READ;
	if (arg.flags & HZ_REGION_RW_WRITE)
		flags |= HZ_REGION_F_WRITE;
	write = arg.flags & HZ_REGION_RW_WRITE;

	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r)
		return -ENOMEM;
	err = hz_pin_user(&r->pin, arg.addr, arg.len, write, FOLL_LONGTERM);
	if (err) {
		kfree(r);
		return err;
	}

	mutex_lock(&hf->regions_lock);
	if (hf->nregions >= HZ_MAX_REGIONS_PER_FILE ||
	    (max_regions && hf->nregions >= max_regions)) {
		err = -ENOSPC;
		goto out_unlock;
	}
	err = hz_region_send(dev, r, flags, &num_extents);
	if (err)
		goto out_unlock;
	list_add_tail(&r->node, &hf->regions);
	hf->nregions++;
	mutex_unlock(&hf->regions_lock);

	arg.region_id = r->id;
	arg.num_extents = num_extents;
	if (copy_to_user(uarg, &arg, sizeof(arg)))
		return -EFAULT;	/* registered; released at close */
	return 0;

out_unlock:
	mutex_unlock(&hf->regions_lock);
	/* A timed-out registration may still be live in the device. */
	hz_region_dispose(dev, r, err != -ETIMEDOUT && err != -EINTR);
	return err;
}

long hz_ioctl_region_unregister(struct hz_file *hf, u32 __user *uarg)
{
	struct hz_dev *dev = hf->dev;
	struct hz_region *r, *found = NULL;
	u32 id;
	int err;

	if (get_user(id, uarg))
		return -EFAULT;
	mutex_lock(&hf->regions_lock);
	list_for_each_entry(r, &hf->regions, node) {
		if (r->id == id) {
			found = r;
			break;
		}
	}
	if (!found) {
		mutex_unlock(&hf->regions_lock);
		return -ENOENT;
	}
	if (!hz_region_unregister(dev, found,
				  msecs_to_jiffies(HZ_CTRL_TIMEOUT_MS), &err) &&
	    err == -EBUSY) {
		/* Still in use by an operation: it stays registered. */
		mutex_unlock(&hf->regions_lock);
		return err;
	}
	list_del(&found->node);
	hf->nregions--;
	mutex_unlock(&hf->regions_lock);
	hz_region_dispose(dev, found, err == 0 || err == -ENOENT);
	return err == -ENOENT ? 0 : err;
}

/*
 * At close: unregisters the file's regions until the teardown's deadline.
 * Once the device has let one unregistration time out, or the deadline has
 * passed, the rest go to the orphan list without asking: a device that does
 * not answer must not hold close() for a timeout per region.
 */
void hz_regions_release(struct hz_file *hf, unsigned long deadline)
{
	struct hz_dev *dev = hf->dev;
	struct hz_region *r, *tmp;
	int err;

	mutex_lock(&hf->regions_lock);
	list_for_each_entry_safe(r, tmp, &hf->regions, node) {
		long left = (long)(deadline - jiffies);
		bool released = false;

		list_del(&r->node);
		hf->nregions--;
		if (left > 0 && !READ_ONCE(dev->dead)) {
			released = hz_region_unregister(dev, r, left, &err);
			if (err == -ETIMEDOUT || err == -EINTR)
				deadline = jiffies;
		}
		hz_region_dispose(dev, r, released);
	}
	mutex_unlock(&hf->regions_lock);
}
