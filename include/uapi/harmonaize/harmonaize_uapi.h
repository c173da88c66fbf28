/* SPDX-License-Identifier: (GPL-2.0-only WITH Linux-syscall-note) OR BSD-3-Clause */
/*
 * User-space interface of the HarmonAIze guest driver: /dev/harmonaizeN.
 *
 * The driver owns the device session: it sends HELLO itself, once, before
 * the first request of the first file that uses the device (any ioctl but
 * HZ_IOC_INFO), and every open file shares that session. A process opens the
 * device and
 *  - reads the outcome of the driver's HELLO with HZ_IOC_HELLO. HELLO through
 *    HZ_IOC_SUBMIT fails with EPERM: a second HELLO would end the session of
 *    every other process using the device.
 *  - submits requests with HZ_IOC_SUBMIT. The driver builds the request
 *    header (struct hz_req_hdr, with a request id it chooses) and the status
 *    trailer itself; the caller gives the opcode, the arguments and the data
 *    and result buffers, which stay pinned until the device completes the
 *    request. A blocking submit returns the status in the same structure; an
 *    asynchronous one (HZ_SUBMIT_F_ASYNC) returns a token at once and the
 *    completion is read later as a struct hz_record with read()/poll().
 *    A blocking submit interrupted by a signal fails with EINTR while the
 *    request may still run; its buffers stay pinned until it completes.
 *    Like regions, a request's pinned buffers are charged against the
 *    caller's RLIMIT_MEMLOCK (ENOMEM beyond it) until the request completes.
 *  - owns the regions it registered and the communicators its COMM_INIT
 *    created. A request that names another file's region (in the arguments
 *    or the slice table of a collective, CKPT_SAVE, CKPT_RESTORE or
 *    CKPT_QUIESCE) or communicator (a collective, COMM_DESTROY, COMM_ABORT)
 *    fails with ENOENT. The slice table of those checkpoint requests is
 *    copied at submit (at most max_args_len bytes of readable data), and the
 *    result of COMM_INIT passes through the driver. close() destroys the
 *    file's communicators and releases its regions.
 *  - EVENT_ACK needs HZ_IOC_EVENTS_ENABLE on the same file first (EPERM
 *    otherwise): only a file that receives events acknowledges them.
 *  - registers long-lived memory regions with HZ_IOC_REGION_REGISTER: the
 *    pages stay pinned, charged against RLIMIT_MEMLOCK, until
 *    HZ_IOC_REGION_UNREGISTER or close().
 *  - receives device events (struct hz_event) as records from read() after
 *    HZ_IOC_EVENTS_ENABLE.
 *
 * read() returns whole struct hz_record entries only. The structures have
 * fixed layouts and compile in the kernel and in user space (C and C++).
 */
#ifndef HARMONAIZE_UAPI_H
#define HARMONAIZE_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>

/*
 * Version 2: the driver sends HELLO itself (HZ_IOC_HELLO, HELLO refused in
 * HZ_IOC_SUBMIT), regions and communicators belong to the file that created
 * them. Version 1 drivers left HELLO to user space.
 */
#define HZ_UAPI_VERSION 2

/* Device information (HZ_IOC_INFO). */
struct hz_ioc_info {
	__u32 uapi_version;        /* HZ_UAPI_VERSION */
	__u32 num_request_queues;  /* usable request queues */
	__u64 features;            /* virtio feature bits negotiated */
	__u32 max_segments;        /* segments per request the driver accepts */
	__u32 max_args_len;        /* argument bytes per request */
	__u8 config[64];           /* struct hz_config as read at probe */
};

/* One user buffer of a request. */
#define HZ_SEG_F_WRITE (1u << 0) /* the device writes it (result space) */

struct hz_ioc_seg {
	__u64 addr;
	__u64 len;
	__u32 flags;    /* HZ_SEG_F_* */
	__u32 reserved; /* must be zero */
};

/* Queue selection for HZ_IOC_SUBMIT. */
#define HZ_QUEUE_CONTROL 0xffffu /* the control queue */
/* Any other value n selects request queue n (0..num_request_queues-1). */

#define HZ_SUBMIT_F_ASYNC (1u << 0)

/* Request submission (HZ_IOC_SUBMIT). */
struct hz_ioc_submit {
	/* in */
	__u16 opcode;    /* HZ_OP_*; region opcodes have their own ioctls */
	__u16 queue;     /* HZ_QUEUE_CONTROL or a request queue index */
	__u32 flags;     /* HZ_SUBMIT_F_* */
	__u64 args_ptr;  /* arguments after the header, copied at submit */
	__u32 args_len;
	__u32 num_segs;  /* readable segments first, then writable ones */
	__u64 segs_ptr;  /* struct hz_ioc_seg[num_segs] */
	__u64 user_data; /* returned in the completion record */
	/* out */
	__u64 token;      /* identifies the request in its completion */
	__s32 error;      /* blocking submit: 0 or a negative errno */
	__u32 status;     /* blocking submit: HZ_S_* from the device */
	__u32 result_len; /* blocking submit: result bytes written */
	__u32 detail;     /* blocking submit: hz_status.detail */
};

#define HZ_REGION_RW_READ (1u << 0)  /* device may read: HZ_REGION_F_READ */
#define HZ_REGION_RW_WRITE (1u << 1) /* device may write: HZ_REGION_F_WRITE */

/* Region registration (HZ_IOC_REGION_REGISTER). */
struct hz_ioc_region {
	__u64 addr;       /* page-aligned start */
	__u64 len;        /* multiple of the page size */
	__u32 flags;      /* HZ_REGION_RW_* */
	__u32 region_id;  /* out: the device's id */
	__u32 num_extents; /* out: physically contiguous runs sent */
	__u32 reserved;
};

/* The outcome of the driver's own HELLO (HZ_IOC_HELLO). */
struct hz_ioc_hello {
	__s32 error;      /* 0, or the negative errno of the request */
	__u32 status;     /* HZ_S_* from the device when error is 0 */
	__u32 result_len; /* bytes of result the device wrote */
	__u32 reserved;
	__u8 result[64];  /* struct hz_hello_result, little-endian */
};

/* Record types of read(). */
#define HZ_REC_COMPLETION 1
#define HZ_REC_EVENT 2
#define HZ_REC_EVENTS_LOST 3 /* count in completion.user_data */

struct hz_ioc_completion {
	__u64 token;
	__u64 user_data;
	__s32 error;  /* 0, or a negative errno (e.g. -ENODEV, -EPROTO) */
	__u32 status; /* HZ_S_* when error is 0 */
	__u32 result_len;
	__u32 detail;
};

struct hz_record {
	__u32 type; /* HZ_REC_* */
	__u32 reserved;
	union {
		struct hz_ioc_completion completion;
		__u8 event[112]; /* struct hz_event, little-endian */
	};
};

#define HZ_IOC_MAGIC 0xB8
#define HZ_IOC_INFO _IOR(HZ_IOC_MAGIC, 0x00, struct hz_ioc_info)
#define HZ_IOC_SUBMIT _IOWR(HZ_IOC_MAGIC, 0x01, struct hz_ioc_submit)
#define HZ_IOC_REGION_REGISTER _IOWR(HZ_IOC_MAGIC, 0x02, struct hz_ioc_region)
#define HZ_IOC_REGION_UNREGISTER _IOW(HZ_IOC_MAGIC, 0x03, __u32)
#define HZ_IOC_EVENTS_ENABLE _IOW(HZ_IOC_MAGIC, 0x04, __u32)
#define HZ_IOC_HELLO _IOR(HZ_IOC_MAGIC, 0x05, struct hz_ioc_hello)

#endif /* HARMONAIZE_UAPI_H */
