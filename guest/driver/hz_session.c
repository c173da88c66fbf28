// SPDX-License-Identifier: GPL-2.0-only
/*
 * HarmonAIze guest driver: the device session and what each file owns in it.
 *
 * The device has one session per VM, started by HELLO; a later HELLO ends it
 * and with it every region and communicator of every process (SPEC 2.7). So
 * the driver says HELLO itself, once, before the first request of the first
 * file that uses the device (its first ioctl other than HZ_IOC_INFO), and
 * refuses HELLO from user space. Not at probe: probe must not wait on the
 * device (one that does not answer would hold up boot and module load). Not
 * in open(): misc_open() holds the misc device lock, which every other misc
 * device's open and our own remove() need, across it. A HELLO the device did
 * not accept is tried again by the next file: without a session there is
 * nothing to end.
 *
 * Region ids and communicator handles are the session's, so the driver
 * checks every id a request names against the regions and communicators the
 * submitting file created. Requests that name them: collectives (the
 * communicator and both slices), COMM_DESTROY and COMM_ABORT (the
 * communicator), CKPT_SAVE, CKPT_RESTORE and CKPT_QUIESCE (slices in their
 * data, which the driver copies so that the checked table is the one the
 * device reads). COMM_INIT's result passes through a kernel buffer, so the
 * handle the file is credited with is the one the device wrote.
 */
#include <linux/mm.h>
#include <linux/highmem.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "hz_drv.h"

static int hz_session_hello(struct hz_dev *dev)
{
	struct hz_hello_args args = {
		.version_major = cpu_to_le16(HZ_VERSION_MAJOR),
		.version_minor = cpu_to_le16(HZ_VERSION_MINOR),
		.driver_features = cpu_to_le64(hz_driver_features()),
	};
	struct hz_ioc_completion comp = {};
	struct hz_ioc_hello *h = &dev->hello;
	u8 result[sizeof(h->result)] = {};
	int err;

	BUILD_BUG_ON(sizeof(struct hz_hello_result) > sizeof(h->result));
	err = hz_ctrl_call(dev, HZ_OP_HELLO, &args, sizeof(args), NULL, 0,
			   result, sizeof(struct hz_hello_result), &comp,
			   msecs_to_jiffies(HZ_CTRL_TIMEOUT_MS));
	memset(h, 0, sizeof(*h));
	h->error = err ?: comp.error;
	if (h->error)
		return h->error;
	h->status = comp.status;
	h->result_len = comp.result_len;
	memcpy(h->result, result, comp.result_len);
	return 0;
}

/*
 * Sends HELLO unless the device accepted one already; called at a file's
 * first ioctl that may reach the device, once per file.
 */
void hz_session_start(struct hz_file *hf)
{
	struct hz_dev *dev = hf->dev;

	if (READ_ONCE(hf->session_started))
		return;
	mutex_lock(&dev->hello_lock);
	if (!dev->hello_ok && !READ_ONCE(dev->dead)) {
		hz_session_hello(dev);
		dev->hello_ok = !dev->hello.error &&
				dev->hello.status == HZ_S_OK &&
				dev->hello.result_len >=
				sizeof(struct hz_hello_result);
		if (!dev->hello_ok)
			dev_warn_ratelimited(&dev->vdev->dev,
					     "HELLO failed: error %d status %u\n",
					     dev->hello.error, dev->hello.status);
	}
	WRITE_ONCE(hf->session_started, true);
	mutex_unlock(&dev->hello_lock);
}

long hz_ioctl_hello(struct hz_file *hf, void __user *uarg)
{
	struct hz_dev *dev = hf->dev;
	struct hz_ioc_hello h;

	mutex_lock(&dev->hello_lock);
	h = dev->hello;
	mutex_unlock(&dev->hello_lock);
	return copy_to_user(uarg, &h, sizeof(h)) ? -EFAULT : 0;
}

static bool hz_file_owns_region(struct hz_file *hf, u32 id)
{
	struct hz_region *r;
	bool found = false;

	if (id == HZ_REGION_NONE || id == HZ_REGION_INLINE)
		return true;
	mutex_lock(&hf->regions_lock);
	list_for_each_entry(r, &hf->regions, node) {
		if (r->id == id) {
			found = true;
			break;
		}
	}
	mutex_unlock(&hf->regions_lock);
	return found;
}

static struct hz_comm *hz_comm_find(struct hz_file *hf, u64 handle)
{
	struct hz_comm *c;

	list_for_each_entry(c, &hf->comms, node)
		if (c->handle == handle)
			return c;
	return NULL;
}

static bool hz_file_owns_comm(struct hz_file *hf, u64 handle)
{
	bool found;

	spin_lock(&hf->lock);
	found = hz_comm_find(hf, handle);
	spin_unlock(&hf->lock);
	return found;
}

static int hz_check_slices(struct hz_file *hf, const void *data,
			   size_t data_len, u32 num_slices)
{
	const struct hz_slice *s = data;
	size_t n = min_t(size_t, num_slices, data_len / sizeof(*s));
	size_t i;

	for (i = 0; i < n; i++)
		if (!hz_file_owns_region(hf, le32_to_cpu(s[i].region_id)))
			return -ENOENT;
	return 0;
}

/* Whether an opcode's data segment holds slices the driver must check. */
bool hz_op_data_has_slices(u16 opcode)
{
	return opcode == HZ_OP_CKPT_SAVE || opcode == HZ_OP_CKPT_RESTORE ||
	       opcode == HZ_OP_CKPT_QUIESCE;
}

static int hz_check_ckpt(struct hz_file *hf, u16 opcode, const void *args,
			 u32 args_len, const void *data, size_t data_len)
{
	const struct hz_ckpt_save_args *save = args;
	const struct hz_ckpt_restore_args *restore = args;
	const struct hz_ckpt_quiesce_args *quiesce = args;

	switch (opcode) {
	case HZ_OP_CKPT_SAVE:
		if (args_len < sizeof(*save))
			return -EINVAL;
		return hz_check_slices(hf, data, data_len,
				       le32_to_cpu(save->num_slices));
	case HZ_OP_CKPT_RESTORE:
		if (args_len < sizeof(*restore))
			return -EINVAL;
		return hz_check_slices(hf, data, data_len,
				       le32_to_cpu(restore->num_slices));
	default:	/* HZ_OP_CKPT_QUIESCE */
		if (args_len < sizeof(*quiesce))
			return -EINVAL;
		if (!hz_file_owns_region(hf,
					 le32_to_cpu(quiesce->word.region_id)))
			return -ENOENT;
		return hz_check_slices(hf, data, data_len,
				       le32_to_cpu(quiesce->num_slices));
	}
}

/*
 * Checks a user request before it is queued: 0, or -EPERM for what only the
 * driver sends, -ENOENT for a region or communicator of another file (or of
 * none), -EINVAL for arguments too short to hold what the opcode names. data
 * is the kernel copy of the readable segments (hz_op_data_has_slices).
 */
int hz_session_check(struct hz_file *hf, u16 opcode, const void *args,
		     u32 args_len, const void *data, size_t data_len)
{
	const struct hz_coll_args *coll = args;
	const struct hz_comm_args *comm = args;

	switch (opcode) {
	case HZ_OP_HELLO:
	case HZ_OP_REGION_REGISTER:
	case HZ_OP_REGION_UNREGISTER:
		/* Session-wide, or guest-physical addresses: the driver's. */
		return -EPERM;
	case HZ_OP_COMM_DESTROY:
	case HZ_OP_COMM_ABORT:
		if (args_len < sizeof(*comm))
			return -EINVAL;
		return hz_file_owns_comm(hf, le64_to_cpu(comm->comm)) ?
		       0 : -ENOENT;
	case HZ_OP_EVENT_ACK:
		/* Moves the VM's event cursor: only for a file that gets events. */
		return READ_ONCE(hf->events) ? 0 : -EPERM;
	}
	if (hz_op_data_has_slices(opcode))
		return hz_check_ckpt(hf, opcode, args, args_len, data, data_len);
	if (!hz_op_is_collective(opcode))
		return 0;
	if (args_len < sizeof(*coll))
		return -EINVAL;
	if (!hz_file_owns_comm(hf, le64_to_cpu(coll->comm)) ||
	    !hz_file_owns_region(hf, le32_to_cpu(coll->send.region_id)) ||
	    !hz_file_owns_region(hf, le32_to_cpu(coll->recv.region_id)))
		return -ENOENT;
	return 0;
}

/*
 * At submit: reserves what the completion will need, a kernel buffer for a
 * COMM_INIT result and the list entry for the new communicator.
 */
int hz_session_prepare(struct hz_req *req, u16 opcode, const void *args,
		       u32 args_len)
{
	const struct hz_comm_args *comm = args;
	struct hz_file *hf = req->file;
	struct hz_comm *c;

	req->opcode = opcode;
	if (opcode == HZ_OP_COMM_DESTROY && args_len >= sizeof(*comm))
		req->comm = le64_to_cpu(comm->comm);
	if (opcode != HZ_OP_COMM_INIT)
		return 0;
	c = kzalloc(sizeof(*c), GFP_KERNEL);
	if (!c)
		return -ENOMEM;
	spin_lock(&hf->lock);
	if (hf->ncomms >= HZ_MAX_COMMS_PER_FILE) {
		spin_unlock(&hf->lock);
		kfree(c);
		return -ENOSPC;
	}
	hf->ncomms++;
	spin_unlock(&hf->lock);
	req->new_comm = c;
	return 0;
}

/* Copies len bytes of src into the pinned user buffers of a request. */
static void hz_pins_write(struct hz_req *req, const void *src, size_t len)
{
	unsigned int i;

	for (i = 0; i < req->npins && len; i++) {
		struct hz_pin *pin = &req->pins[i];
		unsigned long p;
		size_t off = pin->offset;
		size_t left = pin->len;

		if (!pin->write)
			continue;
		for (p = 0; p < pin->npages && len && left; p++) {
			size_t chunk = min3(len, left, PAGE_SIZE - off);

			memcpy_to_page(pin->pages[p], off, src, chunk);
			src += chunk;
			len -= chunk;
			left -= chunk;
			off = 0;
		}
	}
}

/*
 * At completion, before the pins go: credits a new communicator to the file,
 * forgets a destroyed one, and hands a bounced result to user space.
 */
void hz_session_complete(struct hz_req *req)
{
	struct hz_ioc_completion *c = &req->comp;
	struct hz_file *hf = req->file;
	struct hz_comm *gone = NULL;
	bool ok = !c->error && c->status == HZ_S_OK;

	if (!hf)
		return;
	if (req->opcode == HZ_OP_COMM_INIT) {
		struct hz_comm_init_result *res = req->kbuf[1];

		if (ok && c->result_len >= sizeof(*res)) {
			req->new_comm->handle = le64_to_cpu(res->comm);
			spin_lock(&hf->lock);
			list_add_tail(&req->new_comm->node, &hf->comms);
			spin_unlock(&hf->lock);
			req->new_comm = NULL;
		}
		if (!c->error)
			hz_pins_write(req, req->kbuf[1], c->result_len);
	} else if (req->opcode == HZ_OP_COMM_DESTROY && ok) {
		spin_lock(&hf->lock);
		gone = hz_comm_find(hf, req->comm);
		if (gone) {
			list_del(&gone->node);
			hf->ncomms--;
		}
		spin_unlock(&hf->lock);
		kfree(gone);
	}
}

/* A COMM_INIT that never created a communicator gives its slot back. */
void hz_session_release(struct hz_req *req)
{
	if (!req->new_comm)
		return;
	spin_lock(&req->file->lock);
	req->file->ncomms--;
	spin_unlock(&req->file->lock);
	kfree(req->new_comm);
	req->new_comm = NULL;
}

/*
 * At close: destroys the file's communicators, as long as the teardown's
 * deadline allows. Communicators left over (the device stopped answering)
 * are the device's to drop at its next reset.
 */
void hz_comms_release(struct hz_file *hf, unsigned long deadline)
{
	struct hz_comm *c, *tmp;
	LIST_HEAD(list);

	spin_lock(&hf->lock);
	list_splice_init(&hf->comms, &list);
	spin_unlock(&hf->lock);
	list_for_each_entry_safe(c, tmp, &list, node) {
		struct hz_comm_args args = { .comm = cpu_to_le64(c->handle) };
		struct hz_ioc_completion comp = {};
		long left = (long)(deadline - jiffies);
		int err = 0;

		if (left > 0 && !READ_ONCE(hf->dev->dead))
			err = hz_ctrl_call(hf->dev, HZ_OP_COMM_DESTROY, &args,
					   sizeof(args), NULL, 0, NULL, 0,
					   &comp, left);
		/* No answer in time, or killed: ask no more. */
		if (err == -ETIMEDOUT || err == -EINTR)
			deadline = jiffies;
		list_del(&c->node);
		kfree(c);
		spin_lock(&hf->lock);
		hf->ncomms--;
		spin_unlock(&hf->lock);
	}
}
