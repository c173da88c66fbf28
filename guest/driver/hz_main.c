// SPDX-License-Identifier: GPL-2.0-only
/*
 * HarmonAIze guest driver: virtio device probe, queues and removal.
 *
 * QEMU's generic vhost-user PCI device gives the device one MSI-X vector, so
 * all queue callbacks fire from the same interrupt (or INTx). Each callback
 * therefore only schedules one work item, which drains every queue in process
 * context, where pinned pages can be released.
 */
#include <linux/idr.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/sysfs.h>
#include <linux/virtio_config.h>

#include "hz_drv.h"

static DEFINE_IDA(hz_ida);

/* Live pins and requests of all devices: leak checks read them in sysfs. */
atomic_long_t hz_pinned_pages = ATOMIC_LONG_INIT(0);
atomic_t hz_live_requests = ATOMIC_INIT(0);

static ssize_t pinned_pages_show(struct device_driver *drv, char *buf)
{
	return sysfs_emit(buf, "%ld\n", atomic_long_read(&hz_pinned_pages));
}
static DRIVER_ATTR_RO(pinned_pages);

static ssize_t live_requests_show(struct device_driver *drv, char *buf)
{
	return sysfs_emit(buf, "%d\n", atomic_read(&hz_live_requests));
}
static DRIVER_ATTR_RO(live_requests);

static struct attribute *hz_drv_attrs[] = {
	&driver_attr_pinned_pages.attr,
	&driver_attr_live_requests.attr,
	NULL,
};
ATTRIBUTE_GROUPS(hz_drv);

static void hz_dev_release(struct kref *ref)
{
	struct hz_dev *dev = container_of(ref, struct hz_dev, ref);

	ida_free(&hz_ida, dev->index);
	kfree(dev->evbufs);
	kfree(dev->vqs);
	kfree(dev);
}

void hz_dev_get(struct hz_dev *dev)
{
	kref_get(&dev->ref);
}

void hz_dev_put(struct hz_dev *dev)
{
	kref_put(&dev->ref, hz_dev_release);
}

static void hz_vq_callback(struct virtqueue *vq)
{
	struct hz_dev *dev = vq->vdev->priv;

	if (!READ_ONCE(dev->dead))
		queue_work(system_wq, &dev->work);
}

/* Posts one event buffer; the caller holds the event queue's lock. */
static int hz_event_post(struct hz_dev *dev, struct hz_event *ev)
{
	struct scatterlist sg;

	sg_init_one(&sg, ev, sizeof(*ev));
	return virtqueue_add_inbuf(dev->vqs[HZ_VQ_EVENT].vq, &sg, 1, ev,
				   GFP_ATOMIC);
}

static void hz_event_deliver(struct hz_dev *dev, struct hz_event *ev,
			     unsigned int len)
{
	struct hz_file *hf;

	/* Used length 0: returned unused (SPEC 3.4). */
	if (!len)
		return;
	/* Never trust the device's length: a short event is dropped. */
	if (len < sizeof(*ev)) {
		dev_warn_ratelimited(&dev->vdev->dev,
				     "dropping short event (%u bytes)\n", len);
		return;
	}
	spin_lock(&dev->files_lock);
	list_for_each_entry(hf, &dev->files, node)
		hz_file_deliver_event(hf, ev);
	spin_unlock(&dev->files_lock);
}

static void hz_drain_events(struct hz_dev *dev)
{
	struct hz_vq *hv = &dev->vqs[HZ_VQ_EVENT];
	struct hz_event *ev;
	unsigned int len;
	bool kick = false;

	spin_lock_irq(&hv->lock);
	do {
		virtqueue_disable_cb(hv->vq);
		while ((ev = virtqueue_get_buf(hv->vq, &len))) {
			spin_unlock_irq(&hv->lock);
			hz_event_deliver(dev, ev, len);
			spin_lock_irq(&hv->lock);
			if (dev->dead)
				break;
			/* Keep the queue stocked: the buffer goes back. */
			if (hz_event_post(dev, ev) == 0)
				kick = true;
		}
	} while (!dev->dead && !virtqueue_enable_cb(hv->vq));
	if (kick && !dev->dead)
		virtqueue_kick(hv->vq);
	spin_unlock_irq(&hv->lock);
}

/* Completes every used request of one queue. */
static void hz_drain_requests(struct hz_dev *dev, struct hz_vq *hv)
{
	struct hz_req *req;
	unsigned int len;
	bool any = false;

	spin_lock_irq(&hv->lock);
	do {
		virtqueue_disable_cb(hv->vq);
		while ((req = virtqueue_get_buf(hv->vq, &len))) {
			spin_unlock_irq(&hv->lock);
			hz_req_complete(req, 0, len);
			any = true;
			spin_lock_irq(&hv->lock);
		}
	} while (!dev->dead && !virtqueue_enable_cb(hv->vq));
	spin_unlock_irq(&hv->lock);
	if (any)
		wake_up_all(&hv->space);
}

static void hz_work(struct work_struct *work)
{
	struct hz_dev *dev = container_of(work, struct hz_dev, work);
	unsigned int i;

	/* One interrupt serves all queues: look at every one of them. */
	for (i = 0; i < dev->nvqs; i++) {
		if (i == HZ_VQ_EVENT)
			hz_drain_events(dev);
		else
			hz_drain_requests(dev, &dev->vqs[i]);
	}
}

static int hz_read_config(struct hz_dev *dev)
{
	struct virtio_device *vdev = dev->vdev;
	struct hz_config *cfg = (struct hz_config *)dev->config;
	u32 magic;
	u16 major, nrq, max_segments;
	u32 max_args;

	virtio_cread_bytes(vdev, 0, dev->config, sizeof(dev->config));
	magic = le32_to_cpu(cfg->magic);
	if (magic != HZ_CONFIG_MAGIC) {
		dev_err(&vdev->dev, "bad config magic 0x%08x\n", magic);
		return -ENODEV;
	}
	major = le16_to_cpu(cfg->version_major);
	if (major != HZ_VERSION_MAJOR) {
		dev_err(&vdev->dev, "device speaks version %u, driver %u\n",
			major, HZ_VERSION_MAJOR);
		return -ENODEV;
	}
	nrq = le16_to_cpu(cfg->num_request_queues);
	dev->num_request_queues = min_t(unsigned int, nrq,
					HZ_MAX_REQUEST_QUEUES);
	max_segments = le16_to_cpu(cfg->max_segments);
	dev->max_segments = max_segments ? max_segments : U32_MAX;
	max_args = le32_to_cpu(cfg->max_args_bytes);
	dev->max_args_len = HZ_MAX_ARGS_LEN;
	if (max_args > sizeof(struct hz_req_hdr))
		dev->max_args_len = min_t(u32, HZ_MAX_ARGS_LEN,
					  max_args - sizeof(struct hz_req_hdr));
	return 0;
}

static int hz_find_vqs(struct hz_dev *dev)
{
	struct virtqueue_info *vqs_info;
	struct virtqueue **vqs;
	unsigned int i;
	int err = -ENOMEM;

	dev->nvqs = HZ_VQ_REQUEST_BASE + dev->num_request_queues;
	dev->vqs = kcalloc(dev->nvqs, sizeof(*dev->vqs), GFP_KERNEL);
	vqs = kcalloc(dev->nvqs, sizeof(*vqs), GFP_KERNEL);
	vqs_info = kcalloc(dev->nvqs, sizeof(*vqs_info), GFP_KERNEL);
	if (!dev->vqs || !vqs || !vqs_info)
		goto out;

	for (i = 0; i < dev->nvqs; i++) {
		struct hz_vq *hv = &dev->vqs[i];

		spin_lock_init(&hv->lock);
		init_waitqueue_head(&hv->space);
		if (i == HZ_VQ_CONTROL)
			strscpy(hv->name, "control", sizeof(hv->name));
		else if (i == HZ_VQ_EVENT)
			strscpy(hv->name, "event", sizeof(hv->name));
		else
			snprintf(hv->name, sizeof(hv->name), "request.%u",
				 i - HZ_VQ_REQUEST_BASE);
		vqs_info[i].callback = hz_vq_callback;
		vqs_info[i].name = hv->name;
	}
	err = hz_virtio_find_vqs(dev->vdev, dev->nvqs, vqs, vqs_info, NULL);
	if (err) {
		dev_err(&dev->vdev->dev, "cannot set up %u queues: %d\n",
			dev->nvqs, err);
		goto out;
	}
	for (i = 0; i < dev->nvqs; i++) {
		dev->vqs[i].vq = vqs[i];
		dev->vqs[i].size = virtqueue_get_vring_size(vqs[i]);
	}
out:
	kfree(vqs_info);
	kfree(vqs);
	return err;
}

static void hz_stock_events(struct hz_dev *dev)
{
	struct hz_vq *hv = &dev->vqs[HZ_VQ_EVENT];
	unsigned int i, posted = 0;

	spin_lock_irq(&hv->lock);
	for (i = 0; i < dev->nevbufs; i++)
		if (hz_event_post(dev, &dev->evbufs[i]) == 0)
			posted++;
	virtqueue_kick(hv->vq);
	spin_unlock_irq(&hv->lock);
	if (posted < dev->nevbufs)
		dev_warn(&dev->vdev->dev, "posted %u of %u event buffers\n",
			 posted, dev->nevbufs);
}

static int hz_probe(struct virtio_device *vdev)
{
	struct hz_dev *dev;
	int err;

	if (!vdev->config->get) {
		dev_err(&vdev->dev, "config access disabled\n");
		return -EINVAL;
	}
	dev = kzalloc(sizeof(*dev), GFP_KERNEL);
	if (!dev)
		return -ENOMEM;
	kref_init(&dev->ref);
	dev->vdev = vdev;
	INIT_WORK(&dev->work, hz_work);
	spin_lock_init(&dev->req_lock);
	spin_lock_init(&dev->files_lock);
	INIT_LIST_HEAD(&dev->files);
	mutex_init(&dev->orphans_lock);
	INIT_LIST_HEAD(&dev->orphans);
	mutex_init(&dev->hello_lock);
	atomic64_set(&dev->next_token, 0);
	dev->index = ida_alloc(&hz_ida, GFP_KERNEL);
	if (dev->index < 0) {
		err = dev->index;
		kfree(dev);
		return err;
	}
	vdev->priv = dev;

	err = hz_read_config(dev);
	if (err)
		goto err_put;
	err = hz_find_vqs(dev);
	if (err)
		goto err_put;

	dev->nevbufs = min_t(unsigned int, HZ_MAX_EVENT_BUFS,
			     dev->vqs[HZ_VQ_EVENT].size);
	dev->evbufs = kcalloc(dev->nevbufs, sizeof(*dev->evbufs), GFP_KERNEL);
	if (!dev->evbufs) {
		err = -ENOMEM;
		goto err_del_vqs;
	}

	dev->features = vdev->features;
	virtio_device_ready(vdev);
	hz_stock_events(dev);

	snprintf(dev->name, sizeof(dev->name), HZ_DRV_NAME "%d", dev->index);
	dev->misc.minor = MISC_DYNAMIC_MINOR;
	dev->misc.name = dev->name;
	dev->misc.fops = &hz_fops;
	dev->misc.mode = 0600;
	dev->misc.parent = &vdev->dev;
	err = misc_register(&dev->misc);
	if (err)
		goto err_reset;

	dev_info(&vdev->dev, "%s: %u request queues, features 0x%llx\n",
		 dev->name, dev->num_request_queues, vdev->features);
	return 0;

err_reset:
	virtio_reset_device(vdev);
err_del_vqs:
	vdev->config->del_vqs(vdev);
err_put:
	vdev->priv = NULL;
	hz_dev_put(dev);
	return err;
}

/*
 * Submitters test dead under their queue's lock: once each lock has been
 * taken after the store, no submitter can add to a ring any more.
 */
static void hz_mark_dead(struct hz_dev *dev)
{
	unsigned int i;

	WRITE_ONCE(dev->dead, true);
	for (i = 0; i < dev->nvqs; i++) {
		spin_lock_irq(&dev->vqs[i].lock);
		spin_unlock_irq(&dev->vqs[i].lock);
	}
}

static void hz_remove(struct virtio_device *vdev)
{
	struct hz_dev *dev = vdev->priv;
	struct hz_file *hf;
	unsigned int i;

	/* No new opens; open files keep their reference. */
	misc_deregister(&dev->misc);
	hz_mark_dead(dev);

	/* The device stops touching guest memory before anything is unpinned. */
	virtio_reset_device(vdev);
	cancel_work_sync(&dev->work);

	for (i = 0; i < dev->nvqs; i++) {
		struct virtqueue *vq = dev->vqs[i].vq;
		void *buf;

		while ((buf = virtqueue_detach_unused_buf(vq))) {
			if (i != HZ_VQ_EVENT)
				hz_req_complete(buf, -ENODEV, 0);
		}
		wake_up_all(&dev->vqs[i].space);
	}
	vdev->config->del_vqs(vdev);

	spin_lock(&dev->files_lock);
	list_for_each_entry(hf, &dev->files, node)
		hz_file_wake(hf);
	spin_unlock(&dev->files_lock);

	hz_orphans_release(dev);
	dev_info(&vdev->dev, "%s removed\n", dev->name);
	vdev->priv = NULL;
	hz_dev_put(dev);
}

static unsigned int hz_features[] = {
	HZ_F_COLLECTIVES, HZ_F_CHECKPOINT, HZ_F_EVENTS, HZ_F_NEGOTIATION,
	HZ_F_TOPOLOGY, HZ_F_HINTS, HZ_F_INLINE_DATA, HZ_F_ENERGY,
};

/* The HZ_F_* bits the driver names in its HELLO: those of hz_features. */
u64 hz_driver_features(void)
{
	u64 bits = 0;
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(hz_features); i++)
		bits |= BIT_ULL(hz_features[i]);
	return bits;
}

static const struct virtio_device_id hz_id_table[] = {
	{ HZ_VIRTIO_ID, VIRTIO_DEV_ANY_ID },
	{ 0 },
};
MODULE_DEVICE_TABLE(virtio, hz_id_table);

static struct virtio_driver hz_driver = {
	.driver.name = HZ_DRV_NAME,
	.driver.owner = THIS_MODULE,
	.driver.groups = hz_drv_groups,
	.id_table = hz_id_table,
	.feature_table = hz_features,
	.feature_table_size = ARRAY_SIZE(hz_features),
	.probe = hz_probe,
	.remove = hz_remove,
};

module_virtio_driver(hz_driver);

MODULE_DESCRIPTION("HarmonAIze paravirtual device driver");
MODULE_LICENSE("GPL");
