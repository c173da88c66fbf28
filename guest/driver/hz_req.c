// SPDX-License-Identifier: GPL-2.0-only
/*
 * HarmonAIze guest driver: requests.
 *
 * A request is one descriptor chain: the header and arguments (kernel copy),
 * the caller's readable data, the caller's result space, and the status
 * trailer (kernel memory). User buffers are pinned from submit until the
 * device returns the chain, or until remove() has reset the device.
 */
#include <linux/mm.h>
#include <linux/overflow.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/virtio_config.h>

#include "hz_drv.h"

struct hz_req *hz_req_alloc(struct hz_dev *dev, struct hz_file *file,
			    unsigned int nsg)
{
	struct hz_req *req;

	req = kzalloc(sizeof(*req), GFP_KERNEL);
	if (!req)
		return NULL;
	req->sg = kcalloc(nsg, sizeof(*req->sg), GFP_KERNEL);
	req->sgp = kcalloc(nsg, sizeof(*req->sgp), GFP_KERNEL);
	if (!req->sg || !req->sgp) {
		kfree(req->sg);
		kfree(req->sgp);
		kfree(req);
		return NULL;
	}
	req->dev = dev;
	req->file = file;
	if (file)
		kref_get(&file->ref);
	else
		hz_dev_get(dev);
	init_completion(&req->done);
	atomic_inc(&hz_live_requests);
	req->token = atomic64_inc_return(&dev->next_token);
	return req;
}

/* Gives back what hz_pin_charge() charged. */
static void hz_pin_uncharge(struct hz_pin *pin, unsigned long npages)
{
	if (!pin->mm)
		return;
	/* At exit the address space may be gone already: nothing to uncharge. */
	if (mmget_not_zero(pin->mm)) {
		account_locked_vm(pin->mm, npages, false);
		mmput(pin->mm);
	}
	mmdrop(pin->mm);
	pin->mm = NULL;
}

void hz_pin_release(struct hz_pin *pin)
{
	unsigned long npages = pin->npages;

	if (!pin->pages)
		return;
	/* Pages the device could write are marked dirty. */
	unpin_user_pages_dirty_lock(pin->pages, pin->npages, pin->write);
	atomic_long_sub(pin->npages, &hz_pinned_pages);
	kvfree(pin->pages);
	pin->pages = NULL;
	pin->npages = 0;
	hz_pin_uncharge(pin, npages);
}

void hz_req_free(struct hz_req *req)
{
	struct hz_dev *dev = req->dev;
	struct hz_file *file = req->file;
	unsigned int i;

	for (i = 0; i < req->npins; i++)
		hz_pin_release(&req->pins[i]);
	if (file)
		hz_session_release(req);
	kfree(req->pins);
	kfree(req->kbuf[0]);
	kfree(req->kbuf[1]);
	kfree(req->head);
	kfree(req->sg);
	kfree(req->sgp);
	kfree(req);
	atomic_dec(&hz_live_requests);
	if (file)
		hz_file_put(file);
	else
		hz_dev_put(dev);
}

/* Builds the device-readable header; the request id is the driver's token. */
int hz_req_set_head(struct hz_req *req, u16 opcode, const void *args,
		    u32 args_len)
{
	struct hz_req_hdr *hdr;

	req->head_len = sizeof(*hdr) + args_len;
	req->head = kzalloc(req->head_len, GFP_KERNEL);
	if (!req->head)
		return -ENOMEM;
	hdr = req->head;
	hdr->opcode = cpu_to_le16(opcode);
	hdr->flags = 0;
	hdr->args_len = cpu_to_le32(args_len);
	hdr->request_id = cpu_to_le64(req->token);
	if (args_len)
		memcpy(hdr + 1, args, args_len);
	return 0;
}

static void hz_req_add_sg(struct hz_req *req, void *buf, size_t len,
			  bool write)
{
	unsigned int n = req->nout + req->nin;

	sg_init_one(&req->sg[n], buf, len);
	req->sgp[n] = &req->sg[n];
	if (write)
		req->nin++;
	else
		req->nout++;
}

static void hz_req_add_page_sg(struct hz_req *req, struct page *page,
			       unsigned int len, unsigned int off, bool write)
{
	unsigned int n = req->nout + req->nin;

	sg_init_table(&req->sg[n], 1);
	sg_set_page(&req->sg[n], page, len, off);
	req->sgp[n] = &req->sg[n];
	if (write)
		req->nin++;
	else
		req->nout++;
}

/*
 * Whether the ring has room for total descriptors, or the device died. Taken
 * under the queue's lock: a reader that sees the device alive there knows
 * remove() has not deleted the queues yet.
 */
static bool hz_vq_ready(struct hz_dev *dev, struct hz_vq *hv,
			unsigned int total)
{
	unsigned long flags;
	bool ret;

	spin_lock_irqsave(&hv->lock, flags);
	ret = dev->dead || hv->vq->num_free >= total;
	spin_unlock_irqrestore(&hv->lock, flags);
	return ret;
}

/* Adds the status trailer (always the last, writable) and posts the chain. */
int hz_req_queue(struct hz_req *req)
{
	struct hz_dev *dev = req->dev;
	struct hz_vq *hv = &dev->vqs[req->qidx];
	unsigned int total;
	unsigned long flags;
	int err;

	hz_req_add_sg(req, &req->status, sizeof(req->status), true);
	total = req->nout + req->nin;
	if (total > hv->size || total > dev->max_segments)
		return -E2BIG;

	for (;;) {
		spin_lock_irqsave(&hv->lock, flags);
		if (dev->dead) {
			err = -ENODEV;
		} else {
			err = virtqueue_add_sgs(hv->vq, req->sgp, req->nout,
						req->nin, req, GFP_ATOMIC);
			if (!err)
				virtqueue_kick(hv->vq);
		}
		spin_unlock_irqrestore(&hv->lock, flags);
		if (err != -ENOSPC)
			return err;
		/* Ring full: wait until a completion frees slots. */
		if (req->uninterruptible) {
			if (!wait_event_timeout(hv->space,
						hz_vq_ready(dev, hv, total),
						req->timeout))
				return -ETIMEDOUT;
		} else if (wait_event_interruptible(hv->space,
						    hz_vq_ready(dev, hv, total))) {
			return -EINTR;
		}
	}
}

/*
 * Records the outcome of a request the device returned (error 0, used_len the
 * bytes it reports writing) or that never completed (error < 0). Nothing the
 * device wrote is trusted: the used length, the status code, the request id
 * and the result length are all checked.
 */
static void hz_req_validate(struct hz_req *req, u32 used_len)
{
	struct hz_ioc_completion *c = &req->comp;
	u32 status = le32_to_cpu(req->status.status);
	u32 result_len = le32_to_cpu(req->status.result_len);
	u64 id = le64_to_cpu(req->status.request_id);
	u64 limit = (u64)req->result_cap + sizeof(req->status);

	/*
	 * The device reports result_len + 24 bytes written (SPEC 6.1): a
	 * result longer than that, or than the result space, is a lie.
	 */
	if (used_len < sizeof(req->status) || used_len > limit ||
	    status >= HZ_S_MAX || id != req->token ||
	    result_len > req->result_cap ||
	    (u64)result_len + sizeof(req->status) > used_len) {
		dev_warn_ratelimited(&req->dev->vdev->dev,
				     "malformed completion: used %u status %u id %llu result %u\n",
				     used_len, status, id, result_len);
		c->error = -EPROTO;
		return;
	}
	c->status = status;
	c->result_len = result_len;
	c->detail = le32_to_cpu(req->status.detail);
}

void hz_req_complete(struct hz_req *req, int error, u32 used_len)
{
	struct hz_dev *dev = req->dev;
	struct hz_rec_node *node = NULL;
	enum hz_req_state state;
	unsigned long flags;
	unsigned int i;

	req->comp.token = req->token;
	req->comp.user_data = req->user_data;
	req->comp.error = error;
	if (!error)
		hz_req_validate(req, used_len);
	hz_session_complete(req);
	/* The device is done with the buffers: release them now. */
	for (i = 0; i < req->npins; i++)
		hz_pin_release(&req->pins[i]);

	spin_lock_irqsave(&dev->req_lock, flags);
	state = req->state;
	if (state == HZ_REQ_WAITING) {
		req->completed = true;
		complete(&req->done);
	}
	spin_unlock_irqrestore(&dev->req_lock, flags);
	if (state == HZ_REQ_WAITING)
		return;	/* the waiter frees it */

	if (state == HZ_REQ_ASYNC && req->file) {
		node = kzalloc(sizeof(*node), GFP_KERNEL);
		if (node) {
			node->rec.type = HZ_REC_COMPLETION;
			node->rec.completion = req->comp;
		}
		/* Without memory the record is lost, the count still drops. */
		hz_file_push_completion(req->file, node);
	}
	hz_req_free(req);
}

/*
 * Waits for a request queued by the caller in HZ_REQ_WAITING state. Returns 0
 * with req->comp filled, or a negative errno after which the request belongs
 * to the completion path (the caller must not touch it again).
 */
int hz_req_wait(struct hz_req *req, long timeout)
{
	struct hz_dev *dev = req->dev;
	unsigned long flags;
	long ret;
	bool completed;

	/*
	 * The driver's own requests never wait forever. A process that is
	 * exiting (release() of a killed process) has a fatal signal pending
	 * for good: it waits out the bound; anyone else may be killed.
	 */
	if (timeout > 0 && (current->flags & PF_EXITING))
		ret = wait_for_completion_timeout(&req->done, timeout);
	else if (timeout > 0)
		ret = wait_for_completion_killable_timeout(&req->done, timeout);
	else
		ret = wait_for_completion_interruptible(&req->done) ?: 1;
	if (ret < 0)
		ret = -EINTR;

	spin_lock_irqsave(&dev->req_lock, flags);
	completed = req->completed;
	if (!completed)
		req->state = HZ_REQ_ABANDONED;
	spin_unlock_irqrestore(&dev->req_lock, flags);
	if (completed)
		return 0;
	return ret == 0 ? -ETIMEDOUT : -EINTR;
}

/*
 * A control-queue request from the driver itself (HELLO, regions, teardown),
 * with kernel buffers: data is device-readable, result device-writable. It
 * waits at most timeout jiffies for ring space and as long for the answer.
 */
int hz_ctrl_call(struct hz_dev *dev, u16 opcode, const void *args,
		 u32 args_len, const void *data, size_t data_len,
		 void *result, u32 result_len, struct hz_ioc_completion *out,
		 long timeout)
{
	struct hz_req *req;
	void *data_copy, *result_buf;
	int err;

	req = hz_req_alloc(dev, NULL, 4);
	if (!req)
		return -ENOMEM;
	req->qidx = HZ_VQ_CONTROL;
	req->state = HZ_REQ_WAITING;
	req->uninterruptible = true;
	req->timeout = timeout;
	err = hz_req_set_head(req, opcode, args, args_len);
	if (err)
		goto out_free;
	hz_req_add_sg(req, req->head, req->head_len, false);
	if (data_len) {
		/* Owned by the request: it may outlive this call. */
		data_copy = kmemdup(data, data_len, GFP_KERNEL);
		req->kbuf[0] = data_copy;
		if (!data_copy) {
			err = -ENOMEM;
			goto out_free;
		}
		hz_req_add_sg(req, data_copy, data_len, false);
	}
	if (result_len) {
		result_buf = kzalloc(result_len, GFP_KERNEL);
		req->kbuf[1] = result_buf;
		if (!result_buf) {
			err = -ENOMEM;
			goto out_free;
		}
		hz_req_add_sg(req, result_buf, result_len, true);
		req->result_cap = result_len;
	}
	err = hz_req_queue(req);
	if (err)
		goto out_free;
	err = hz_req_wait(req, timeout);
	if (err)
		return err;	/* abandoned: freed when the device returns it */
	*out = req->comp;
	if (!out->error && result_len)
		memcpy(result, result_buf, min(out->result_len, result_len));
out_free:
	hz_req_free(req);
	return err;
}

/*
 * Charges npages against the caller's RLIMIT_MEMLOCK (-ENOMEM beyond it,
 * unless CAP_IPC_LOCK): regions and each request's buffers alike, so that
 * neither lets a process pin more than it could mlock().
 */
static int hz_pin_charge(struct hz_pin *pin, unsigned long npages)
{
	int err;

	err = account_locked_vm(current->mm, npages, true);
	if (err)
		return err;
	pin->mm = current->mm;
	mmgrab(pin->mm);
	return 0;
}

int hz_pin_user(struct hz_pin *pin, u64 addr, u64 len, bool write,
		unsigned int gup_flags)
{
	unsigned long first = addr >> PAGE_SHIFT;
	unsigned long last, n;
	u64 end;
	int got, err;

	if (!len || check_add_overflow(addr, len - 1, &end))
		return -EINVAL;
	last = end >> PAGE_SHIFT;
	n = last - first + 1;
	if (n > INT_MAX)
		return -E2BIG;
	err = hz_pin_charge(pin, n);
	if (err)
		return err;
	pin->pages = kvcalloc(n, sizeof(*pin->pages), GFP_KERNEL);
	if (!pin->pages) {
		hz_pin_uncharge(pin, n);
		return -ENOMEM;
	}
	pin->write = write;
	got = pin_user_pages_fast(addr & PAGE_MASK, n,
				  gup_flags | (write ? FOLL_WRITE : 0),
				  pin->pages);
	if (got < 0 || got != n) {
		if (got > 0)
			unpin_user_pages(pin->pages, got);
		kvfree(pin->pages);
		pin->pages = NULL;
		hz_pin_uncharge(pin, n);
		return got < 0 ? got : -EFAULT;
	}
	pin->npages = n;
	pin->offset = offset_in_page(addr);
	pin->len = len;
	atomic_long_add(n, &hz_pinned_pages);
	return 0;
}

/* Adds the pinned pages of one user segment, merging contiguous pages. */
static void hz_req_add_user_seg(struct hz_req *req, struct hz_pin *pin,
				u64 addr, u64 len)
{
	unsigned int off = offset_in_page(addr);
	unsigned long i;
	u64 left = len;
	struct scatterlist *prev = NULL;

	for (i = 0; i < pin->npages; i++) {
		unsigned int chunk = min_t(u64, left, PAGE_SIZE - off);

		if (prev && off == 0 &&
		    page_to_pfn(sg_page(prev)) +
		    ((prev->offset + prev->length) >> PAGE_SHIFT) ==
		    page_to_pfn(pin->pages[i]) &&
		    ((prev->offset + prev->length) & ~PAGE_MASK) == 0 &&
		    prev->length <= UINT_MAX - chunk) {
			prev->length += chunk;
		} else {
			hz_req_add_page_sg(req, pin->pages[i], chunk, off,
					   pin->write);
			prev = &req->sg[req->nout + req->nin - 1];
		}
		left -= chunk;
		off = 0;
	}
}

/*
 * Builds the chain of a user request. data, when set, is the kernel copy of
 * the readable segments and goes instead of them (the request owns it from
 * here). A COMM_INIT result lands in a kernel buffer first (hz_session.c).
 */
static int hz_submit_prepare(struct hz_req *req, struct hz_ioc_seg *segs,
			     unsigned int nsegs, void *data, size_t data_len)
{
	bool bounce_result = req->opcode == HZ_OP_COMM_INIT;
	u64 result_cap = 0;
	unsigned int i;
	int err;

	req->kbuf[0] = data;
	req->pins = kcalloc(nsegs, sizeof(*req->pins), GFP_KERNEL);
	if (nsegs && !req->pins)
		return -ENOMEM;
	hz_req_add_sg(req, req->head, req->head_len, false);
	if (data)
		hz_req_add_sg(req, data, data_len, false);
	for (i = 0; i < nsegs; i++) {
		bool write = segs[i].flags & HZ_SEG_F_WRITE;
		struct hz_pin *pin = &req->pins[req->npins];

		if (!write && data)
			continue;
		err = hz_pin_user(pin, segs[i].addr, segs[i].len, write, 0);
		if (err)
			return err;
		req->npins++;
		if (write)
			result_cap += segs[i].len;
		if (!(write && bounce_result))
			hz_req_add_user_seg(req, pin, segs[i].addr,
					    segs[i].len);
	}
	if (bounce_result && result_cap) {
		result_cap = min_t(u64, result_cap,
				   sizeof(struct hz_comm_init_result));
		req->kbuf[1] = kzalloc(result_cap, GFP_KERNEL);
		if (!req->kbuf[1])
			return -ENOMEM;
		hz_req_add_sg(req, req->kbuf[1], result_cap, true);
	}
	if (result_cap > U32_MAX - sizeof(struct hz_status))
		return -E2BIG;
	req->result_cap = result_cap;
	return 0;
}

/*
 * Copies the readable segments of a request whose data the driver checks
 * (hz_op_data_has_slices) into one kernel buffer, at most max_len bytes.
 */
static void *hz_copy_readable(struct hz_ioc_seg *segs, unsigned int nsegs,
			      size_t max_len, size_t *len)
{
	size_t total = 0, off = 0;
	unsigned int i;
	u8 *buf;

	for (i = 0; i < nsegs && !(segs[i].flags & HZ_SEG_F_WRITE); i++) {
		if (segs[i].len > max_len - total)
			return ERR_PTR(-E2BIG);
		total += segs[i].len;
	}
	*len = total;
	if (!total)
		return NULL;
	buf = kmalloc(total, GFP_KERNEL);
	if (!buf)
		return ERR_PTR(-ENOMEM);
	for (i = 0; off < total; i++) {
		if (copy_from_user(buf + off, u64_to_user_ptr(segs[i].addr),
				   segs[i].len)) {
			kfree(buf);
			return ERR_PTR(-EFAULT);
		}
		off += segs[i].len;
	}
	return buf;
}

static int hz_check_segs(struct hz_ioc_seg *segs, unsigned int nsegs,
			 unsigned long *npages)
{
	bool seen_write = false;
	unsigned int i;

	*npages = 0;
	for (i = 0; i < nsegs; i++) {
		u64 end;

		if (segs[i].flags & ~HZ_SEG_F_WRITE || segs[i].reserved ||
		    !segs[i].len ||
		    check_add_overflow(segs[i].addr, segs[i].len, &end))
			return -EINVAL;
		/* Readable segments come first, as in the descriptor chain. */
		if (segs[i].flags & HZ_SEG_F_WRITE)
			seen_write = true;
		else if (seen_write)
			return -EINVAL;
		if (segs[i].len > (u64)HZ_MAX_REQ_PAGES * PAGE_SIZE)
			return -E2BIG;
		*npages += ((end - 1) >> PAGE_SHIFT) -
			   (segs[i].addr >> PAGE_SHIFT) + 1;
		if (*npages > HZ_MAX_REQ_PAGES)
			return -E2BIG;
	}
	return 0;
}

static bool hz_file_reserve(struct hz_file *hf)
{
	bool ok;

	spin_lock(&hf->lock);
	ok = hf->pending < HZ_MAX_PENDING_PER_FILE;
	if (ok)
		hf->pending++;
	spin_unlock(&hf->lock);
	return ok;
}

static void hz_file_unreserve(struct hz_file *hf)
{
	spin_lock(&hf->lock);
	hf->pending--;
	spin_unlock(&hf->lock);
}

/* Copies what the driver checks (arguments, slice tables) and checks it. */
static int hz_submit_inputs(struct hz_file *hf, struct hz_ioc_submit *sub,
			    struct hz_ioc_seg *segs, void **args, void **data,
			    size_t *data_len)
{
	int err;

	*args = NULL;
	*data = NULL;
	*data_len = 0;
	if (sub->args_len) {
		*args = memdup_user(u64_to_user_ptr(sub->args_ptr),
				    sub->args_len);
		if (IS_ERR(*args)) {
			err = PTR_ERR(*args);
			*args = NULL;
			return err;
		}
	}
	if (hz_op_data_has_slices(sub->opcode)) {
		*data = hz_copy_readable(segs, sub->num_segs,
					 hf->dev->max_args_len, data_len);
		if (IS_ERR(*data)) {
			err = PTR_ERR(*data);
			*data = NULL;
			return err;
		}
	}
	return hz_session_check(hf, sub->opcode, *args, sub->args_len, *data,
				*data_len);
}

long hz_ioctl_submit(struct hz_file *hf, struct hz_ioc_submit __user *uarg)
{
	struct hz_dev *dev = hf->dev;
	struct hz_ioc_submit sub;
	struct hz_ioc_seg *segs = NULL;
	void *args = NULL, *data = NULL;
	size_t data_len;
	unsigned long npages;
	struct hz_req *req;
	bool async;
	int err;

	if (copy_from_user(&sub, uarg, sizeof(sub)))
		return -EFAULT;
	if (sub.flags & ~HZ_SUBMIT_F_ASYNC)
		return -EINVAL;
	if (sub.queue != HZ_QUEUE_CONTROL &&
	    sub.queue >= dev->num_request_queues)
		return -EINVAL;
	if (sub.args_len > dev->max_args_len)
		return -E2BIG;
	if (sub.num_segs > HZ_MAX_USER_SEGS)
		return -E2BIG;
	async = sub.flags & HZ_SUBMIT_F_ASYNC;

	if (sub.num_segs) {
		segs = memdup_user(u64_to_user_ptr(sub.segs_ptr),
				   array_size(sub.num_segs, sizeof(*segs)));
		if (IS_ERR(segs))
			return PTR_ERR(segs);
	}
	err = hz_check_segs(segs, sub.num_segs, &npages);
	if (!err)
		err = hz_submit_inputs(hf, &sub, segs, &args, &data, &data_len);
	if (err)
		goto out_segs;

	if (async && !hz_file_reserve(hf)) {
		err = -EAGAIN;
		goto out_segs;
	}
	/* Header, data copy, one entry per page at most, result copy, status. */
	req = hz_req_alloc(dev, hf, npages + 4);
	if (!req) {
		err = -ENOMEM;
		goto out_unreserve;
	}
	req->qidx = sub.queue == HZ_QUEUE_CONTROL ?
		    HZ_VQ_CONTROL : HZ_VQ_REQUEST_BASE + sub.queue;
	req->user_data = sub.user_data;
	req->state = async ? HZ_REQ_ASYNC : HZ_REQ_WAITING;
	err = hz_req_set_head(req, sub.opcode, args, sub.args_len);
	if (!err)
		err = hz_session_prepare(req, sub.opcode, args, sub.args_len);
	if (!err) {
		err = hz_submit_prepare(req, segs, sub.num_segs, data,
					data_len);
		data = NULL;	/* the request's now */
	}
	if (!err)
		err = hz_req_queue(req);
	if (err) {
		hz_req_free(req);
		goto out_unreserve;
	}

	sub.token = req->token;
	if (async) {
		/* From here the completion path owns the request. */
		err = put_user(sub.token, &uarg->token) ? -EFAULT : 0;
		goto out_segs;
	}
	err = hz_req_wait(req, 0);
	if (err)
		goto out_segs;	/* abandoned: the completion path frees it */
	sub.error = req->comp.error;
	sub.status = req->comp.status;
	sub.result_len = req->comp.result_len;
	sub.detail = req->comp.detail;
	hz_req_free(req);
	err = copy_to_user(uarg, &sub, sizeof(sub)) ? -EFAULT : 0;
	goto out_segs;

out_unreserve:
	if (async)
		hz_file_unreserve(hf);
out_segs:
	kfree(data);
	kfree(args);
	kfree(segs);
	return err;
}
