/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * HarmonAIze guest driver: shared definitions.
 *
 * Lifetime: struct hz_dev is reference counted. The virtio device holds one
 * reference until remove(); every open file holds one (struct hz_file); every
 * request in flight holds one on its file (or, for the driver's own control
 * requests, on the device). remove() marks the device dead, resets it so it
 * stops touching guest memory, completes every request still on a ring with
 * -ENODEV and wakes all waiters; pinned pages are released by whoever drops
 * the last reference to what pinned them.
 *
 * Session: the driver sends HELLO itself before a file's first request, and
 * each file owns the regions and communicators it created (hz_session.c).
 */
#ifndef HZ_DRV_H
#define HZ_DRV_H

#include <linux/completion.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/miscdevice.h>
#include <linux/mutex.h>
#include <linux/scatterlist.h>
#include <linux/spinlock.h>
#include <linux/virtio.h>
#include <linux/wait.h>
#include <linux/workqueue.h>

#include "harmonaize.h"
#include "harmonaize/harmonaize_uapi.h"
#include "hz_compat.h"

#define HZ_DRV_NAME "harmonaize"

/* Bounds on what one submit may ask of the kernel. */
#define HZ_MAX_USER_SEGS 64
#define HZ_MAX_REQ_PAGES 4096	/* 16 MiB with 4 KiB pages */
#define HZ_MAX_ARGS_LEN 65536
#define HZ_MAX_PENDING_PER_FILE 1024
#define HZ_EVENT_RING 256	/* queued events per file before "lost" */
#define HZ_MAX_EVENT_BUFS 64
#define HZ_CTRL_TIMEOUT_MS 30000
/*
 * How long close() waits for the device to release a file's regions and
 * communicators, all of them together; what it has not released by then is
 * orphaned until the device is reset.
 */
#define HZ_CLOSE_TIMEOUT_MS 30000
#define HZ_MAX_COMMS_PER_FILE 1024

struct hz_vq {
	struct virtqueue *vq;
	spinlock_t lock;	/* ring access and the dead check */
	wait_queue_head_t space;	/* submitters waiting for ring slots */
	unsigned int size;	/* ring size, kept past remove() */
	char name[sizeof("request.4294967295")];	/* any queue index */
};

struct hz_dev {
	struct kref ref;
	struct virtio_device *vdev;
	struct miscdevice misc;
	char name[24];
	int index;
	bool dead;		/* set under every vq lock; read with READ_ONCE */

	struct hz_vq *vqs;	/* control, event, then request queues */
	unsigned int nvqs;
	unsigned int num_request_queues;
	u64 features;		/* negotiated, kept past remove() */
	u8 config[sizeof(struct hz_config)];
	u32 max_args_len;
	u32 max_segments;

	struct work_struct work;	/* drains every queue: one IRQ for all */
	struct hz_event *evbufs;
	unsigned int nevbufs;

	spinlock_t req_lock;	/* request waiter state */
	atomic64_t next_token;

	spinlock_t files_lock;	/* files, for event delivery */
	struct list_head files;

	struct mutex orphans_lock;	/* orphans, quiesced */
	struct list_head orphans;	/* regions the device never released */
	bool quiesced;		/* reset by remove(): under orphans_lock */

	struct mutex hello_lock;	/* hello, hello_ok */
	struct hz_ioc_hello hello;	/* the driver's HELLO (hz_session.c) */
	bool hello_ok;		/* the device accepted it: a session exists */
};

struct hz_file {
	struct kref ref;
	struct hz_dev *dev;
	struct list_head node;	/* in dev->files */

	spinlock_t lock;	/* the fields below up to regions_lock */
	wait_queue_head_t wait;
	struct list_head completions;	/* struct hz_rec_node */
	unsigned int pending;	/* async requests in flight or unread */
	struct hz_record *events;	/* ring of HZ_EVENT_RING */
	unsigned int ev_head, ev_count;
	u64 events_lost;
	bool closed;
	bool session_started;	/* hz_session_start() ran for this file */
	struct list_head comms;	/* struct hz_comm this file created */
	unsigned int ncomms;	/* with COMM_INITs in flight */

	struct mutex regions_lock;	/* regions, nregions; held across control calls */
	struct list_head regions;	/* struct hz_region */
	unsigned int nregions;
};

struct hz_rec_node {
	struct list_head node;
	struct hz_record rec;
};

struct hz_pin {
	struct page **pages;
	unsigned long npages;
	size_t offset;		/* of the user buffer in its first page */
	size_t len;		/* of the user buffer */
	bool write;
	struct mm_struct *mm;	/* charged for npages (RLIMIT_MEMLOCK) */
};

struct hz_comm {
	struct list_head node;	/* in hz_file.comms */
	u64 handle;
};

enum hz_req_state {
	HZ_REQ_WAITING,		/* a thread sleeps on done and frees it */
	HZ_REQ_ASYNC,		/* the completion becomes a record */
	HZ_REQ_ABANDONED,	/* the waiter left; completion frees it */
};

struct hz_req {
	struct hz_dev *dev;
	struct hz_file *file;	/* NULL for the driver's own requests */
	unsigned int qidx;
	u16 opcode;
	u64 token;
	u64 user_data;
	enum hz_req_state state;	/* under dev->req_lock */
	bool uninterruptible;	/* the driver's own: no signals, bounded */
	bool completed;		/* under dev->req_lock */
	long timeout;		/* the driver's own: jiffies to wait */
	struct completion done;
	struct hz_comm *new_comm;	/* COMM_INIT: credited on success */
	u64 comm;		/* COMM_DESTROY: the handle it names */

	void *head;		/* hz_req_hdr + args, device-readable */
	size_t head_len;
	u32 result_cap;		/* writable bytes before the status */
	struct hz_status status;	/* device-writable trailer */
	struct hz_ioc_completion comp;	/* the outcome, once completed */

	void *kbuf[2];		/* kernel data and result buffers */
	struct hz_pin *pins;
	unsigned int npins;
	struct scatterlist *sg;
	struct scatterlist **sgp;
	unsigned int nout, nin;
};

struct hz_region {
	struct list_head node;
	u32 id;
	struct hz_pin pin;
};

/* hz_main.c */
extern atomic_long_t hz_pinned_pages;
extern atomic_t hz_live_requests;
void hz_dev_put(struct hz_dev *dev);
void hz_dev_get(struct hz_dev *dev);
u64 hz_driver_features(void);

/* hz_req.c */
struct hz_req *hz_req_alloc(struct hz_dev *dev, struct hz_file *file,
			    unsigned int nsg);
void hz_req_free(struct hz_req *req);
int hz_req_set_head(struct hz_req *req, u16 opcode, const void *args,
		    u32 args_len);
int hz_req_queue(struct hz_req *req);
int hz_req_wait(struct hz_req *req, long timeout_jiffies);
void hz_req_complete(struct hz_req *req, int error, u32 used_len);
int hz_pin_user(struct hz_pin *pin, u64 addr, u64 len, bool write,
		unsigned int gup_flags);
void hz_pin_release(struct hz_pin *pin);
int hz_ctrl_call(struct hz_dev *dev, u16 opcode, const void *args,
		 u32 args_len, const void *data, size_t data_len,
		 void *result, u32 result_len, struct hz_ioc_completion *out,
		 long timeout);
long hz_ioctl_submit(struct hz_file *hf, struct hz_ioc_submit __user *uarg);

/* hz_region.c */
long hz_ioctl_region_register(struct hz_file *hf,
			      struct hz_ioc_region __user *uarg);
long hz_ioctl_region_unregister(struct hz_file *hf, u32 __user *uarg);
void hz_regions_release(struct hz_file *hf, unsigned long deadline);
void hz_orphans_release(struct hz_dev *dev);

/* hz_session.c */
void hz_session_start(struct hz_file *hf);
long hz_ioctl_hello(struct hz_file *hf, void __user *uarg);
bool hz_op_data_has_slices(u16 opcode);
int hz_session_check(struct hz_file *hf, u16 opcode, const void *args,
		     u32 args_len, const void *data, size_t data_len);
int hz_session_prepare(struct hz_req *req, u16 opcode, const void *args,
		       u32 args_len);
void hz_session_complete(struct hz_req *req);
void hz_session_release(struct hz_req *req);
void hz_comms_release(struct hz_file *hf, unsigned long deadline);

/* hz_file.c */
extern const struct file_operations hz_fops;
void hz_file_put(struct hz_file *hf);
void hz_file_deliver_event(struct hz_file *hf, const struct hz_event *ev);
void hz_file_push_completion(struct hz_file *hf, struct hz_rec_node *node);
void hz_file_wake(struct hz_file *hf);

#endif /* HZ_DRV_H */
