// SPDX-License-Identifier: GPL-2.0-only
/*
 * HarmonAIze guest driver: /dev/harmonaizeN file operations.
 *
 * Each open file holds a reference on the device and collects its own
 * completion records and, once enabled, its own copy of every device event.
 * After remove() the file stays valid: every operation but close() fails
 * with -ENODEV, read() drains what was already queued.
 */
#include <linux/fs.h>
#include <linux/poll.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/virtio_config.h>

#include "hz_drv.h"

#define HZ_READ_BATCH 16

static void hz_file_release_ref(struct kref *ref)
{
	struct hz_file *hf = container_of(ref, struct hz_file, ref);
	struct hz_rec_node *node, *tmp;
	struct hz_comm *c, *ctmp;

	list_for_each_entry_safe(node, tmp, &hf->completions, node)
		kfree(node);
	/* Credited by a COMM_INIT that completed after close. */
	list_for_each_entry_safe(c, ctmp, &hf->comms, node)
		kfree(c);
	kvfree(hf->events);
	hz_dev_put(hf->dev);
	kfree(hf);
}

void hz_file_put(struct hz_file *hf)
{
	kref_put(&hf->ref, hz_file_release_ref);
}

void hz_file_wake(struct hz_file *hf)
{
	wake_up_all(&hf->wait);
}

void hz_file_push_completion(struct hz_file *hf, struct hz_rec_node *node)
{
	spin_lock(&hf->lock);
	if (hf->closed || !node) {
		hf->pending--;
		spin_unlock(&hf->lock);
		kfree(node);
		return;
	}
	list_add_tail(&node->node, &hf->completions);
	spin_unlock(&hf->lock);
	wake_up(&hf->wait);
}

/* Called with dev->files_lock held. */
void hz_file_deliver_event(struct hz_file *hf, const struct hz_event *ev)
{
	struct hz_record *rec;
	bool queued = false;

	spin_lock(&hf->lock);
	if (hf->events && !hf->closed) {
		if (hf->ev_count == HZ_EVENT_RING) {
			hf->events_lost++;
		} else {
			rec = &hf->events[(hf->ev_head + hf->ev_count) %
					  HZ_EVENT_RING];
			memset(rec, 0, sizeof(*rec));
			rec->type = HZ_REC_EVENT;
			BUILD_BUG_ON(sizeof(rec->event) != sizeof(*ev));
			memcpy(rec->event, ev, sizeof(*ev));
			hf->ev_count++;
		}
		queued = true;
	}
	spin_unlock(&hf->lock);
	if (queued)
		wake_up(&hf->wait);
}

static bool hz_file_readable(struct hz_file *hf)
{
	bool ret;

	spin_lock(&hf->lock);
	ret = hf->events_lost || hf->ev_count || !list_empty(&hf->completions);
	spin_unlock(&hf->lock);
	return ret;
}

/* Moves up to max records out of the file; lost-events notice first. */
static unsigned int hz_file_take(struct hz_file *hf, struct hz_record *out,
				 unsigned int max)
{
	struct hz_rec_node *node;
	unsigned int n = 0;

	spin_lock(&hf->lock);
	if (n < max && hf->events_lost) {
		memset(&out[n], 0, sizeof(out[n]));
		out[n].type = HZ_REC_EVENTS_LOST;
		out[n].completion.user_data = hf->events_lost;
		hf->events_lost = 0;
		n++;
	}
	while (n < max && hf->ev_count) {
		out[n++] = hf->events[hf->ev_head];
		hf->ev_head = (hf->ev_head + 1) % HZ_EVENT_RING;
		hf->ev_count--;
	}
	while (n < max && !list_empty(&hf->completions)) {
		node = list_first_entry(&hf->completions, struct hz_rec_node,
					node);
		list_del(&node->node);
		hf->pending--;
		out[n++] = node->rec;
		kfree(node);
	}
	spin_unlock(&hf->lock);
	return n;
}

static int hz_open(struct inode *inode, struct file *file)
{
	struct miscdevice *misc = file->private_data;
	struct hz_dev *dev = container_of(misc, struct hz_dev, misc);
	struct hz_file *hf;

	/* misc_open holds misc_mtx, which remove() takes to deregister. */
	if (READ_ONCE(dev->dead))
		return -ENODEV;
	hf = kzalloc(sizeof(*hf), GFP_KERNEL);
	if (!hf)
		return -ENOMEM;
	kref_init(&hf->ref);
	hz_dev_get(dev);
	hf->dev = dev;
	spin_lock_init(&hf->lock);
	init_waitqueue_head(&hf->wait);
	INIT_LIST_HEAD(&hf->completions);
	mutex_init(&hf->regions_lock);
	INIT_LIST_HEAD(&hf->regions);
	INIT_LIST_HEAD(&hf->comms);

	spin_lock(&dev->files_lock);
	list_add_tail(&hf->node, &dev->files);
	spin_unlock(&dev->files_lock);
	file->private_data = hf;
	return stream_open(inode, file);
}

static int hz_release(struct inode *inode, struct file *file)
{
	struct hz_file *hf = file->private_data;
	struct hz_dev *dev = hf->dev;
	unsigned long deadline;

	spin_lock(&dev->files_lock);
	list_del(&hf->node);
	spin_unlock(&dev->files_lock);
	spin_lock(&hf->lock);
	hf->closed = true;
	spin_unlock(&hf->lock);

	/*
	 * Requests still in flight keep their own reference on the file and
	 * are freed, with their pages, when the device returns them. What the
	 * file created goes back to the device within one deadline for all.
	 */
	deadline = jiffies + msecs_to_jiffies(HZ_CLOSE_TIMEOUT_MS);
	hz_comms_release(hf, deadline);
	hz_regions_release(hf, deadline);
	hz_file_put(hf);
	return 0;
}

static ssize_t hz_read(struct file *file, char __user *buf, size_t count,
		       loff_t *ppos)
{
	struct hz_file *hf = file->private_data;
	struct hz_dev *dev = hf->dev;
	struct hz_record *recs;
	unsigned int max, n;
	ssize_t ret;

	if (count < sizeof(*recs))
		return -EINVAL;
	max = min_t(size_t, count / sizeof(*recs), HZ_READ_BATCH);
	recs = kmalloc_array(max, sizeof(*recs), GFP_KERNEL);
	if (!recs)
		return -ENOMEM;

	while (!(n = hz_file_take(hf, recs, max))) {
		if (READ_ONCE(dev->dead)) {
			ret = -ENODEV;
			goto out;
		}
		if (file->f_flags & O_NONBLOCK) {
			ret = -EAGAIN;
			goto out;
		}
		if (wait_event_interruptible(hf->wait,
					     hz_file_readable(hf) ||
					     READ_ONCE(dev->dead))) {
			ret = -ERESTARTSYS;
			goto out;
		}
	}
	ret = n * sizeof(*recs);
	if (copy_to_user(buf, recs, ret))
		ret = -EFAULT;
out:
	kfree(recs);
	return ret;
}

static __poll_t hz_poll(struct file *file, poll_table *wait)
{
	struct hz_file *hf = file->private_data;
	__poll_t mask = 0;

	poll_wait(file, &hf->wait, wait);
	if (hz_file_readable(hf))
		mask |= EPOLLIN | EPOLLRDNORM;
	if (READ_ONCE(hf->dev->dead))
		mask |= EPOLLHUP | EPOLLERR;
	return mask;
}

static long hz_ioctl_info(struct hz_file *hf, void __user *uarg)
{
	struct hz_dev *dev = hf->dev;
	struct hz_ioc_info info = {};

	info.uapi_version = HZ_UAPI_VERSION;
	info.num_request_queues = dev->num_request_queues;
	info.features = dev->features;
	info.max_segments = min_t(u32, dev->max_segments, HZ_MAX_USER_SEGS);
	info.max_args_len = dev->max_args_len;
	BUILD_BUG_ON(sizeof(info.config) != sizeof(dev->config));
	memcpy(info.config, dev->config, sizeof(info.config));
	return copy_to_user(uarg, &info, sizeof(info)) ? -EFAULT : 0;
}

static long hz_ioctl_events(struct hz_file *hf, u32 __user *uarg)
{
	struct hz_record *ring;
	u32 enable;

	if (get_user(enable, uarg))
		return -EFAULT;
	if (!enable)
		return -EINVAL;	/* events stay on until close */
	ring = kvcalloc(HZ_EVENT_RING, sizeof(*ring), GFP_KERNEL);
	if (!ring)
		return -ENOMEM;
	spin_lock(&hf->dev->files_lock);
	spin_lock(&hf->lock);
	if (!hf->events) {
		hf->events = ring;
		ring = NULL;
	}
	spin_unlock(&hf->lock);
	spin_unlock(&hf->dev->files_lock);
	kvfree(ring);
	return 0;
}

static long hz_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct hz_file *hf = file->private_data;
	void __user *uarg = (void __user *)arg;

	if (cmd == HZ_IOC_INFO)
		return hz_ioctl_info(hf, uarg);
	if (READ_ONCE(hf->dev->dead))
		return -ENODEV;
	/* The first file to use the device says HELLO for the VM. */
	hz_session_start(hf);
	switch (cmd) {
	case HZ_IOC_SUBMIT:
		return hz_ioctl_submit(hf, uarg);
	case HZ_IOC_REGION_REGISTER:
		return hz_ioctl_region_register(hf, uarg);
	case HZ_IOC_REGION_UNREGISTER:
		return hz_ioctl_region_unregister(hf, uarg);
	case HZ_IOC_EVENTS_ENABLE:
		return hz_ioctl_events(hf, uarg);
	case HZ_IOC_HELLO:
		return hz_ioctl_hello(hf, uarg);
	default:
		return -ENOTTY;
	}
}

const struct file_operations hz_fops = {
	.owner = THIS_MODULE,
	.open = hz_open,
	.release = hz_release,
	.read = hz_read,
	.poll = hz_poll,
	.unlocked_ioctl = hz_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	/* No .llseek: stream_open() makes lseek() fail (see hz_compat.h). */
};
