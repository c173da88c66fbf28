// SPDX-License-Identifier: GPL-2.0-only
/*
 * Test-only module: binds to the HarmonAIze virtio ID, prints the config
 * space, and makes one round trip on queue 0 against an echo back-end (which
 * copies the readable bytes of a chain into its writable bytes). The outcome
 * goes to the kernel log as "hz_echo_test: PASS ..." or "hz_echo_test: FAIL
 * ...", for the VM tests to read.
 */
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/virtio.h>
#include <linux/virtio_config.h>

#include "harmonaize.h"

#define HZ_ECHO_CONFIG_BYTES 16
#define HZ_ECHO_TIMEOUT_MS 10000

static const char hz_echo_ping[] = "harmonaize echo round trip";

struct hz_echo {
	struct virtqueue *vq;
	struct completion done;
	char *out;
	char *in;
};

static void hz_echo_callback(struct virtqueue *vq)
{
	struct hz_echo *echo = vq->vdev->priv;

	complete(&echo->done);
}

static int hz_echo_round_trip(struct virtio_device *vdev, struct hz_echo *echo)
{
	struct scatterlist out_sg, in_sg, *sgs[2] = { &out_sg, &in_sg };
	unsigned int len = 0;
	void *token = NULL;
	unsigned long left;
	int err;

	sg_init_one(&out_sg, echo->out, sizeof(hz_echo_ping));
	sg_init_one(&in_sg, echo->in, sizeof(hz_echo_ping));
	err = virtqueue_add_sgs(echo->vq, sgs, 1, 1, echo, GFP_KERNEL);
	if (err)
		return err;
	virtqueue_kick(echo->vq);

	/* One interrupt may be shared by all queues: poll the ring too. */
	left = msecs_to_jiffies(HZ_ECHO_TIMEOUT_MS);
	while (!(token = virtqueue_get_buf(echo->vq, &len)) && left)
		left = wait_for_completion_timeout(&echo->done,
						   min(left, (unsigned long)HZ));
	if (!token) {
		dev_err(&vdev->dev, "FAIL no reply within %u ms\n",
			HZ_ECHO_TIMEOUT_MS);
		return -ETIMEDOUT;
	}
	if (token != echo || len != sizeof(hz_echo_ping) ||
	    memcmp(echo->in, hz_echo_ping, sizeof(hz_echo_ping))) {
		dev_err(&vdev->dev, "FAIL bad reply: len %u\n", len);
		return -EPROTO;
	}
	dev_info(&vdev->dev, "PASS echo round trip: %u bytes '%s'\n", len,
		 echo->in);
	return 0;
}

static int hz_echo_probe(struct virtio_device *vdev)
{
	u8 cfg[HZ_ECHO_CONFIG_BYTES];
	struct hz_echo *echo;
	int err;

	echo = kzalloc(sizeof(*echo), GFP_KERNEL);
	if (!echo)
		return -ENOMEM;
	init_completion(&echo->done);
	echo->out = kmemdup(hz_echo_ping, sizeof(hz_echo_ping), GFP_KERNEL);
	echo->in = kzalloc(sizeof(hz_echo_ping), GFP_KERNEL);
	if (!echo->out || !echo->in) {
		err = -ENOMEM;
		goto err_free;
	}
	vdev->priv = echo;

	virtio_cread_bytes(vdev, 0, cfg, sizeof(cfg));
	dev_info(&vdev->dev, "device id %u config %*phN\n", vdev->id.device,
		 (int)sizeof(cfg), cfg);

	echo->vq = virtio_find_single_vq(vdev, hz_echo_callback, "echo");
	if (IS_ERR(echo->vq)) {
		err = PTR_ERR(echo->vq);
		dev_err(&vdev->dev, "FAIL no queue: %d\n", err);
		goto err_free;
	}
	virtio_device_ready(vdev);
	err = hz_echo_round_trip(vdev, echo);
	if (err)
		goto err_reset;
	return 0;

err_reset:
	virtio_reset_device(vdev);
	vdev->config->del_vqs(vdev);
err_free:
	kfree(echo->in);
	kfree(echo->out);
	kfree(echo);
	vdev->priv = NULL;
	return err;
}

static void hz_echo_remove(struct virtio_device *vdev)
{
	struct hz_echo *echo = vdev->priv;

	virtio_reset_device(vdev);
	vdev->config->del_vqs(vdev);
	kfree(echo->in);
	kfree(echo->out);
	kfree(echo);
}

static const struct virtio_device_id hz_echo_id_table[] = {
	{ HZ_VIRTIO_ID, VIRTIO_DEV_ANY_ID },
	{ 0 },
};

static struct virtio_driver hz_echo_driver = {
	.driver.name = "hz_echo_test",
	.driver.owner = THIS_MODULE,
	.id_table = hz_echo_id_table,
	.probe = hz_echo_probe,
	.remove = hz_echo_remove,
};

module_virtio_driver(hz_echo_driver);

MODULE_DESCRIPTION("HarmonAIze echo round-trip test");
MODULE_LICENSE("GPL");
