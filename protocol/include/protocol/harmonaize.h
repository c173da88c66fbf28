/* SPDX-License-Identifier: GPL-2.0-only OR BSD-3-Clause */
/*
 * The HarmonAIze paravirtual device: the wire contract between a guest (driver,
 * libharmonaize) and the host service (harmonaized).
 *
 * protocol/SPEC.md is normative; this header is the same contract as C. Every
 * structure has a fixed layout: little-endian fixed-width fields, explicit
 * reserved fields instead of implicit padding, and compile-time size checks at
 * the end of the file. It compiles as C11, as C++20 and inside the Linux kernel.
 */
#ifndef HARMONAIZE_PROTOCOL_H
#define HARMONAIZE_PROTOCOL_H

#ifdef __KERNEL__
#include <linux/types.h>
#include <linux/build_bug.h>
typedef __le16 hz_le16;
typedef __le32 hz_le32;
typedef __le64 hz_le64;
typedef __u8 hz_u8;
typedef __u64 hz_u64; /* host order: the helpers' arithmetic, never a field */
#define HZ_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#include <stdbool.h>
#include <stdint.h>
/*
 * User space reads and writes these structures in place, so only little-endian
 * hosts are supported there; the kernel uses __le types and cpu_to_le*().
 */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "harmonaize.h: user space requires a little-endian host"
#endif
typedef uint16_t hz_le16;
typedef uint32_t hz_le32;
typedef uint64_t hz_le64;
typedef uint8_t hz_u8;
typedef uint64_t hz_u64;
#ifdef __cplusplus
#define HZ_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define HZ_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif
#endif

/* ------------------------------------------------------------------------- */
/* Identity and versioning (SPEC.md §1, §11)                                  */
/* ------------------------------------------------------------------------- */

/*
 * Virtio device ID. 21 is allocated by the virtio specification (signal
 * distribution) but has no driver in Linux or QEMU, and QEMU's generic
 * vhost-user device only accepts IDs it can name. Moved in one place when an
 * official ID is reserved.
 */
#define HZ_VIRTIO_ID 21

#define HZ_VERSION_MAJOR 1
#define HZ_VERSION_MINOR 1

/* "HZAI" little-endian, first field of the config space. */
#define HZ_CONFIG_MAGIC 0x49415a48u

/* ------------------------------------------------------------------------- */
/* Virtqueues (SPEC.md §3)                                                    */
/* ------------------------------------------------------------------------- */

#define HZ_VQ_CONTROL 0
#define HZ_VQ_EVENT 1
#define HZ_VQ_REQUEST_BASE 2
#define HZ_MAX_REQUEST_QUEUES 64

/* ------------------------------------------------------------------------- */
/* Feature bits (SPEC.md §4). Bits 0-23 are device-specific.                  */
/* ------------------------------------------------------------------------- */

#define HZ_F_COLLECTIVES 0  /* communicators and collectives */
#define HZ_F_CHECKPOINT 1   /* checkpoint streams */
#define HZ_F_EVENTS 2       /* event queue and subscriptions */
#define HZ_F_NEGOTIATION 3  /* resource negotiation */
#define HZ_F_TOPOLOGY 4     /* topology summary */
#define HZ_F_HINTS 5        /* batch-size hints */
#define HZ_F_INLINE_DATA 6  /* HZ_REGION_INLINE slices in collectives */
#define HZ_F_ENERGY 7       /* energy slack declarations (version 1.1) */

/* ------------------------------------------------------------------------- */
/* Config space (SPEC.md §5), read-only for the driver.                      */
/* ------------------------------------------------------------------------- */

#define HZ_CFG_S_READY (1u << 0)    /* service accepts requests */
#define HZ_CFG_S_DRAINING (1u << 1) /* service is stopping; new requests fail */
/* latency_poll_us is the device's window, 0 meaning it does not poll */
#define HZ_CFG_S_LATENCY_WINDOW (1u << 2)

struct hz_config {
	hz_le32 magic;              /* HZ_CONFIG_MAGIC */
	hz_le16 version_major;      /* HZ_VERSION_MAJOR of the device */
	hz_le16 version_minor;      /* HZ_VERSION_MINOR of the device */
	hz_le16 num_request_queues; /* request queues after the event queue */
	hz_le16 max_segments;       /* descriptors per chain the device accepts */
	hz_le32 status;             /* HZ_CFG_S_* */
	hz_le32 max_regions;        /* registered regions per device */
	hz_le32 max_extents;        /* extents per region */
	hz_le64 max_region_bytes;   /* bytes per region */
	hz_le32 max_args_bytes;     /* readable header + args + data per request */
	hz_le32 event_record_size;  /* sizeof(struct hz_event) */
	hz_le32 max_comm_ranks;     /* ranks per communicator */
	hz_le32 latency_poll_us;    /* low-latency polling window (HZ_CFG_S_LATENCY_WINDOW) */
	hz_le64 reserved1[2];
};

/* ------------------------------------------------------------------------- */
/* Requests (SPEC.md §6)                                                      */
/* ------------------------------------------------------------------------- */

/*
 * A request is one descriptor chain:
 *   readable: struct hz_req_hdr, args (args_len bytes), optional data
 *   writable: result space, then struct hz_status as the last bytes
 */
struct hz_req_hdr {
	hz_le16 opcode;     /* HZ_OP_* */
	hz_le16 flags;      /* must be zero in version 1.0 */
	hz_le32 args_len;   /* bytes of arguments after this header */
	hz_le64 request_id; /* chosen by the driver, echoed in hz_status */
};

struct hz_status {
	hz_le32 status;     /* HZ_S_* */
	hz_le32 result_len; /* bytes the device wrote into the result space */
	hz_le64 request_id; /* copied from hz_req_hdr */
	hz_le32 detail;     /* opcode-specific detail, e.g. index of a bad field */
	hz_le32 reserved;
};

/* Status codes (SPEC.md §6.4). */
enum hz_status_code {
	HZ_S_OK = 0,
	HZ_S_EINVAL = 1,     /* malformed request or argument */
	HZ_S_ENOTSUP = 2,    /* unknown opcode or feature not negotiated */
	HZ_S_EPERM = 3,      /* object belongs to another tenant */
	HZ_S_ENOENT = 4,     /* no such object */
	HZ_S_EEXIST = 5,     /* object already exists */
	HZ_S_ELIMIT = 6,     /* tenant quota or device limit reached */
	HZ_S_EAGAIN = 7,     /* temporarily out of resources, retry */
	HZ_S_ETIMEDOUT = 8,  /* deadline passed */
	HZ_S_EABORTED = 9,   /* communicator or operation aborted */
	HZ_S_EMISMATCH = 10, /* ranks disagree on op, count, type or root */
	HZ_S_EFAULT = 11,    /* slice or extent outside registered memory */
	HZ_S_EIO = 12,       /* host I/O failure */
	HZ_S_ECORRUPT = 13,  /* stored data failed verification */
	HZ_S_ESHUTDOWN = 14, /* service is stopping */
	HZ_S_EVERSION = 15,  /* incompatible protocol version */
	HZ_S_ETOOSMALL = 16, /* result space too small */
	HZ_S_EBUSY = 17,     /* object in use */
	HZ_S_ESTATE = 18,    /* not valid in the current state (e.g. no HELLO) */
	HZ_S_EQUEUE = 19,    /* opcode not allowed on this queue */
	HZ_S_MAX = 20,
};

/* Opcodes (SPEC.md §7). The high byte is the family. */
enum hz_opcode {
	HZ_OP_HELLO = 0x0001,

	HZ_OP_REGION_REGISTER = 0x0100,
	HZ_OP_REGION_UNREGISTER = 0x0101,

	HZ_OP_COMM_UID = 0x0200,
	HZ_OP_COMM_INIT = 0x0201,
	HZ_OP_COMM_DESTROY = 0x0202,
	HZ_OP_COMM_ABORT = 0x0203,

	HZ_OP_ALLREDUCE = 0x0300,
	HZ_OP_BROADCAST = 0x0301,
	HZ_OP_REDUCE = 0x0302,
	HZ_OP_ALLGATHER = 0x0303,
	HZ_OP_REDUCE_SCATTER = 0x0304,
	HZ_OP_ALLTOALL = 0x0305,
	HZ_OP_SEND = 0x0306,
	HZ_OP_RECV = 0x0307,
	HZ_OP_BARRIER = 0x0308,

	HZ_OP_CKPT_POLICY = 0x0400,
	HZ_OP_CKPT_SAVE = 0x0401,
	HZ_OP_CKPT_RESTORE = 0x0402,
	HZ_OP_CKPT_LIST = 0x0403,
	HZ_OP_CKPT_DELETE = 0x0404,
	HZ_OP_CKPT_QUIESCE = 0x0405,

	HZ_OP_EVENT_SUBSCRIBE = 0x0500,
	HZ_OP_EVENT_ACK = 0x0501,

	HZ_OP_TOPOLOGY_GET = 0x0600,

	HZ_OP_NEG_REQUEST = 0x0700,
	HZ_OP_NEG_ACCEPT = 0x0701,
	HZ_OP_NEG_DECLINE = 0x0702,
	HZ_OP_NEG_COUNTER = 0x0703,
	HZ_OP_NEG_RELEASE = 0x0704,

	HZ_OP_HINT_DECLARE = 0x0800,

	HZ_OP_ENERGY_SLACK = 0x0900, /* version 1.1 */
};

/* ------------------------------------------------------------------------- */
/* HELLO (SPEC.md §7.1)                                                       */
/* ------------------------------------------------------------------------- */

struct hz_hello_args {
	hz_le16 version_major;
	hz_le16 version_minor;
	hz_le32 reserved;
	hz_le64 driver_features; /* HZ_F_* bits the driver will use */
};

struct hz_hello_result {
	hz_le16 version_major;
	hz_le16 version_minor;
	hz_le32 num_request_queues;
	hz_le64 device_features; /* HZ_F_* bits granted for this session */
	hz_le64 session_id;      /* changes when the device is reset */
	hz_le32 max_regions;
	hz_le32 max_extents;
	hz_le64 max_region_bytes;
	hz_le32 max_comm_ranks;
	hz_le32 event_record_size;
};

/* ------------------------------------------------------------------------- */
/* Memory regions (SPEC.md §7.2)                                              */
/* ------------------------------------------------------------------------- */

#define HZ_REGION_NONE 0u
/* Slice data travels in the request chain itself (HZ_F_INLINE_DATA). */
#define HZ_REGION_INLINE 0xffffffffu

#define HZ_REGION_F_READ (1u << 0)  /* device may read */
#define HZ_REGION_F_WRITE (1u << 1) /* device may write */

/* One guest-physical run; data segment of REGION_REGISTER is an array. */
struct hz_extent {
	hz_le64 gpa;
	hz_le64 len;
};

struct hz_region_register_args {
	hz_le32 num_extents;
	hz_le32 flags;     /* HZ_REGION_F_* */
	hz_le64 total_len; /* must equal the sum of the extent lengths */
};

struct hz_region_register_result {
	hz_le32 region_id; /* never HZ_REGION_NONE or HZ_REGION_INLINE */
	hz_le32 reserved;
};

struct hz_region_unregister_args {
	hz_le32 region_id;
	hz_le32 reserved;
};

/* A byte range inside a registered region. */
struct hz_slice {
	hz_le32 region_id;
	hz_le32 reserved;
	hz_le64 offset;
	hz_le64 length;
};

/* ------------------------------------------------------------------------- */
/* Communicators (SPEC.md §7.3)                                               */
/* ------------------------------------------------------------------------- */

#define HZ_UID_BYTES 32

struct hz_comm_uid {
	hz_u8 bytes[HZ_UID_BYTES];
};

struct hz_comm_uid_result {
	struct hz_comm_uid uid;
};

#define HZ_COMM_F_DETERMINISTIC (1u << 0) /* bit-identical reduction order */
#define HZ_COMM_F_ALLOW_LOSSY (1u << 1)   /* lossy transport across hosts */
#define HZ_COMM_F_LOW_LATENCY (1u << 2)   /* the device polls for its operations */

enum hz_priority_class {
	HZ_PRIO_LOW = 0,
	HZ_PRIO_NORMAL = 1,
	HZ_PRIO_HIGH = 2,
	HZ_PRIO_MAX = 3,
};

struct hz_comm_constraints {
	hz_le32 flags;          /* HZ_COMM_F_* */
	hz_le16 priority_class; /* enum hz_priority_class */
	hz_le16 max_threads;    /* 0: provider decides */
	hz_le32 timeout_ms;     /* per operation; 0: device default */
	hz_le32 reserved;
};

struct hz_comm_init_args {
	struct hz_comm_uid uid;
	hz_le32 nranks;
	hz_le32 rank;
	struct hz_comm_constraints constraints;
};

struct hz_comm_init_result {
	hz_le64 comm; /* handle, valid on this device only */
};

/* COMM_DESTROY and COMM_ABORT. */
struct hz_comm_args {
	hz_le64 comm;
};

/* ------------------------------------------------------------------------- */
/* Collectives (SPEC.md §7.4)                                                 */
/* ------------------------------------------------------------------------- */

/* Values follow NCCL's ncclDataType_t. */
enum hz_dtype {
	HZ_INT8 = 0,
	HZ_UINT8 = 1,
	HZ_INT32 = 2,
	HZ_UINT32 = 3,
	HZ_INT64 = 4,
	HZ_UINT64 = 5,
	HZ_FP16 = 6,
	HZ_FP32 = 7,
	HZ_FP64 = 8,
	HZ_BF16 = 9,
	HZ_DTYPE_MAX = 10,
};

/* Bytes per element of a dtype (SPEC.md §7.4); 0 for an unknown value. */
static inline unsigned int hz_dtype_size(unsigned int dtype)
{
	switch (dtype) {
	case HZ_INT8:
	case HZ_UINT8:
		return 1;
	case HZ_FP16:
	case HZ_BF16:
		return 2;
	case HZ_INT32:
	case HZ_UINT32:
	case HZ_FP32:
		return 4;
	case HZ_INT64:
	case HZ_UINT64:
	case HZ_FP64:
		return 8;
	default:
		return 0;
	}
}

/* Values follow NCCL's ncclRedOp_t. */
enum hz_redop {
	HZ_SUM = 0,
	HZ_PROD = 1,
	HZ_MAX = 2,
	HZ_MIN = 3,
	HZ_AVG = 4,
	HZ_REDOP_MAX = 5,
};

/*
 * Arguments of every collective and point-to-point opcode. Fields an opcode
 * does not use must be zero. count is in elements of dtype: per rank for
 * ALLREDUCE/BROADCAST/REDUCE, the send count for ALLGATHER, the receive count
 * for REDUCE_SCATTER, the count per peer for ALLTOALL.
 */
struct hz_coll_args {
	hz_le64 comm;
	hz_le64 seq;   /* per-communicator sequence number, from 0 */
	hz_le64 count;
	hz_u8 dtype;   /* enum hz_dtype */
	hz_u8 redop;   /* enum hz_redop */
	hz_le16 flags; /* must be zero in version 1.0 */
	hz_le32 peer;  /* root (BROADCAST, REDUCE) or peer (SEND, RECV) */
	struct hz_slice send;
	struct hz_slice recv;
};

/* hz_status.detail of a slice error in a collective: which slice (§7.4). */
#define HZ_DETAIL_SEND 0
#define HZ_DETAIL_RECV 1

/*
 * What each collective opcode uses, from the table of SPEC.md §7.4.2. These
 * helpers are the only definition of that table in the tree: the device, the
 * collective engine, libharmonaize and the NCCL-compatible library all call
 * them, so that tenant and provider cannot disagree on what is valid.
 */

/* Whether opcode is a collective or point-to-point opcode (§7.4). */
static inline bool hz_op_is_collective(unsigned int opcode)
{
	return opcode >= HZ_OP_ALLREDUCE && opcode <= HZ_OP_BARRIER;
}

/* Whether opcode reduces, i.e. uses redop (ALLREDUCE, REDUCE, REDUCE_SCATTER). */
static inline bool hz_op_reduces(unsigned int opcode)
{
	return opcode == HZ_OP_ALLREDUCE || opcode == HZ_OP_REDUCE ||
	       opcode == HZ_OP_REDUCE_SCATTER;
}

/*
 * Whether opcode has a root in peer (BROADCAST, REDUCE): all ranks must name
 * the same one (§7.4.3).
 */
static inline bool hz_op_rooted(unsigned int opcode)
{
	return opcode == HZ_OP_BROADCAST || opcode == HZ_OP_REDUCE;
}

/* Whether opcode is point-to-point (SEND, RECV): peer is the other rank (§7.4.5). */
static inline bool hz_op_point_to_point(unsigned int opcode)
{
	return opcode == HZ_OP_SEND || opcode == HZ_OP_RECV;
}

/* Whether opcode uses peer at all, which must then be below nranks. */
static inline bool hz_op_uses_peer(unsigned int opcode)
{
	return hz_op_rooted(opcode) || hz_op_point_to_point(opcode);
}

/*
 * The bytes a collective reads from its send slice (*send_bytes) and writes
 * to its recv slice (*recv_bytes), for count elements of dtype on a
 * communicator of nranks ranks; is_root says whether this rank is the root
 * named in peer (BROADCAST, REDUCE). 0 means that the slice is unused (NONE).
 * BARRIER moves no data, whatever count and dtype are (that they are zero is
 * checked with the other unused fields).
 *
 * Returns HZ_S_OK, or HZ_S_EINVAL with both outputs 0 when opcode is not a
 * collective, dtype has no size, or B = count × S or n × B overflows 64 bits
 * (§7.4.8). n × B is checked for every opcode, also for those that need only
 * B, so that r × B fits for every rank r as well.
 */
static inline unsigned int hz_coll_bytes(unsigned int opcode, hz_u64 count,
					 unsigned int dtype, hz_u64 nranks,
					 bool is_root, hz_u64 *send_bytes,
					 hz_u64 *recv_bytes)
{
	const hz_u64 u64_max = ~(hz_u64)0;
	const hz_u64 size = hz_dtype_size(dtype);
	hz_u64 b, nb;

	*send_bytes = 0;
	*recv_bytes = 0;
	if (!hz_op_is_collective(opcode))
		return HZ_S_EINVAL;
	if (opcode == HZ_OP_BARRIER)
		return HZ_S_OK;
	if (size == 0 || count > u64_max / size)
		return HZ_S_EINVAL;
	b = count * size;
	if (nranks != 0 && b > u64_max / nranks)
		return HZ_S_EINVAL;
	nb = b * nranks;
	switch (opcode) {
	case HZ_OP_ALLREDUCE:
		*send_bytes = b;
		*recv_bytes = b;
		break;
	case HZ_OP_BROADCAST:
		*send_bytes = is_root ? b : 0;
		*recv_bytes = b;
		break;
	case HZ_OP_REDUCE:
		*send_bytes = b;
		*recv_bytes = is_root ? b : 0;
		break;
	case HZ_OP_ALLGATHER:
		*send_bytes = b;
		*recv_bytes = nb;
		break;
	case HZ_OP_REDUCE_SCATTER:
		*send_bytes = nb;
		*recv_bytes = b;
		break;
	case HZ_OP_ALLTOALL:
		*send_bytes = nb;
		*recv_bytes = nb;
		break;
	case HZ_OP_SEND:
		*send_bytes = b;
		break;
	default: /* HZ_OP_RECV */
		*recv_bytes = b;
		break;
	}
	return HZ_S_OK;
}

/* ------------------------------------------------------------------------- */
/* Checkpoints (SPEC.md §7.5)                                                 */
/* ------------------------------------------------------------------------- */

enum hz_ckpt_tier {
	HZ_TIER_HOST_MEMORY = 0,
	HZ_TIER_LOCAL_DISK = 1,
	HZ_TIER_PEER_HOST = 2, /* local disk and a replica on another host (SPEC.md 7.5.6) */
};

#define HZ_CKPT_F_AUTO_SAVE_ON_NOTICE (1u << 0)

#define HZ_STEP_LATEST 0xffffffffffffffffull

struct hz_ckpt_policy_args {
	hz_le32 stream;          /* tenant-chosen stream number, 1..2^32-1 */
	hz_le32 flags;           /* HZ_CKPT_F_* */
	hz_le32 retention;       /* durable checkpoints kept, >= 1 */
	hz_le32 tier;            /* enum hz_ckpt_tier, the minimum durability */
	hz_le32 stall_budget_ms; /* longest acceptable save stall */
	hz_le32 rpo_s;           /* recovery-point objective */
};

/* Data segment: num_slices struct hz_slice, then meta_len bytes of metadata. */
struct hz_ckpt_save_args {
	hz_le32 stream;
	hz_le32 num_slices;
	hz_le64 step;
	hz_le32 meta_len;
	hz_le32 flags; /* must be zero */
};

enum hz_ckpt_state {
	HZ_CKPT_STAGED = 0,  /* in host memory, persist pending */
	HZ_CKPT_DURABLE = 1, /* committed at its tier */
};

struct hz_ckpt_save_result {
	hz_le64 step;
	hz_le32 state; /* enum hz_ckpt_state */
	hz_le32 stall_us;
};

/* Data segment: num_slices struct hz_slice to restore into. */
struct hz_ckpt_restore_args {
	hz_le32 stream;
	hz_le32 num_slices;
	hz_le64 step; /* or HZ_STEP_LATEST */
};

/* Followed in the result space by meta_len bytes of metadata. */
struct hz_ckpt_restore_result {
	hz_le64 step;
	hz_le64 bytes;
	hz_le32 meta_len;
	hz_le32 reserved;
};

struct hz_ckpt_list_args {
	hz_le32 stream;
	hz_le32 max_entries;
	hz_le64 start_after_step; /* 0: from the oldest */
};

struct hz_ckpt_entry {
	hz_le64 step;
	hz_le64 bytes;
	hz_le64 time_s; /* completion time, unix seconds, rounded down to 10 s */
	hz_le32 state;  /* enum hz_ckpt_state */
	hz_le32 tier;   /* enum hz_ckpt_tier it is held at */
};

/* Followed in the result space by count struct hz_ckpt_entry. */
struct hz_ckpt_list_result {
	hz_le32 count;
	hz_le32 more; /* 1 if entries remain after the last one returned */
};

struct hz_ckpt_delete_args {
	hz_le32 stream;
	hz_le32 reserved;
	hz_le64 step;
};

/*
 * Just-in-time saves read a quiescence word the tenant keeps in registered
 * memory: a sequence lock. The tenant makes seq odd while it mutates state
 * and even again at a consistent point, with step set before seq is made even.
 */
struct hz_quiesce_word {
	hz_le64 seq;
	hz_le64 step;
};

struct hz_ckpt_quiesce_args {
	hz_le32 stream;
	hz_le32 reserved;
	struct hz_slice word;    /* 16 bytes holding struct hz_quiesce_word */
	hz_le32 num_slices;      /* state slices follow in the data segment */
	hz_le32 reserved2;
};

/* ------------------------------------------------------------------------- */
/* Events (SPEC.md §8)                                                        */
/* ------------------------------------------------------------------------- */

enum hz_topic {
	HZ_TOPIC_FAILURE = 0,
	HZ_TOPIC_MAINTENANCE = 1,
	HZ_TOPIC_PREEMPTION = 2,
	HZ_TOPIC_CAPACITY = 3,
	HZ_TOPIC_CONGESTION = 4,
	HZ_TOPIC_CHECKPOINT = 5,
	HZ_TOPIC_NEGOTIATION = 6,
	HZ_TOPIC_HINT = 7,
	HZ_TOPIC_ENERGY = 8,
	HZ_TOPIC_LOST = 15, /* always delivered: "events lost: n" */
	HZ_TOPIC_MAX = 16,
};

#define HZ_TOPIC_MASK(t) (1ull << (t))
#define HZ_TOPIC_ALL 0x1ffull

#define HZ_EVENT_F_APPROVABLE (1u << 0) /* ACK with HZ_ACK_F_APPROVE allowed */
#define HZ_EVENT_F_REPLAY (1u << 1)     /* delivered before, resent */

#define HZ_EVENT_PAYLOAD_BYTES 80

/* One event fills one event-queue buffer of event_record_size bytes. */
struct hz_event {
	hz_le64 seq;      /* per-tenant, strictly increasing, from 1 */
	hz_le16 topic;    /* enum hz_topic */
	hz_le16 kind;     /* topic-specific, SPEC.md §8.3 */
	hz_le32 flags;    /* HZ_EVENT_F_* */
	hz_le64 time_s;   /* unix seconds, rounded down to 10 s */
	hz_le64 deadline_s; /* 0 or unix seconds, rounded down to 10 s */
	hz_u8 payload[HZ_EVENT_PAYLOAD_BYTES];
};

#define HZ_SEQ_CURSOR 0 /* SUBSCRIBE: resume after the acknowledged cursor */

struct hz_event_subscribe_args {
	hz_le64 topics;   /* HZ_TOPIC_MASK bits */
	hz_le64 from_seq; /* first seq wanted, or HZ_SEQ_CURSOR */
};

struct hz_event_subscribe_result {
	hz_le64 cursor;   /* highest acknowledged seq */
	hz_le64 next_seq; /* seq the next new event will carry */
	hz_le64 oldest_seq; /* oldest seq still retained */
};

#define HZ_ACK_F_APPROVE (1u << 0) /* let a maintenance/preemption go early */

struct hz_event_ack_args {
	hz_le64 seq; /* acknowledges every event up to and including seq */
	hz_le32 flags;
	hz_le32 reserved;
};

/* ------------------------------------------------------------------------- */
/* Topology summary (SPEC.md §7.7)                                            */
/* ------------------------------------------------------------------------- */

enum hz_device_kind {
	HZ_DEV_GPU = 0,
	HZ_DEV_NIC = 1,
};

enum hz_bw_class {
	HZ_BW_NONE = 0,
	HZ_BW_LOW = 1,    /* across hosts or below 32 GB/s */
	HZ_BW_MEDIUM = 2, /* PCIe through the host bridge */
	HZ_BW_HIGH = 3,   /* PCIe switch peer-to-peer */
	HZ_BW_ULTRA = 4,  /* NVLink / xGMI class */
};

struct hz_topo_header {
	hz_le32 version;  /* 1 */
	hz_le16 num_devices;
	hz_le16 num_groups;
	hz_u8 cross_group_bw; /* enum hz_bw_class */
	hz_u8 cross_host_bw;  /* enum hz_bw_class */
	hz_le16 num_hosts;    /* number of hosts the allocation spans */
	hz_le32 reserved;
};

struct hz_topo_group {
	hz_le16 group;    /* 0..num_groups-1 */
	hz_le16 gpus;
	hz_le16 nics;
	hz_u8 intra_bw;   /* enum hz_bw_class */
	hz_u8 host;       /* 0..num_hosts-1, tenant-relative */
};

struct hz_topo_device {
	hz_le16 index; /* tenant-visible index, 0..n-1 */
	hz_u8 kind;    /* enum hz_device_kind */
	hz_u8 reserved;
	hz_le16 group;
	hz_le16 reserved2;
};

/*
 * TOPOLOGY_GET has no arguments. The result is hz_topo_header, then
 * num_groups hz_topo_group, then num_devices hz_topo_device.
 */

/* ------------------------------------------------------------------------- */
/* Negotiation (SPEC.md §7.8)                                                 */
/* ------------------------------------------------------------------------- */

enum hz_locality {
	HZ_LOC_ANY = 0,
	HZ_LOC_SAME_HOST = 1,
	HZ_LOC_SAME_GROUP = 2,
};

struct hz_neg_request {
	hz_le16 kind;   /* enum hz_device_kind */
	hz_le16 count;
	hz_u8 locality; /* enum hz_locality */
	hz_u8 priority_class;
	hz_le16 reserved;
	hz_le64 earliest_start_s; /* unix seconds */
	hz_le64 latest_start_s;
	hz_le64 duration_s;
};

struct hz_neg_offer {
	hz_le64 offer_id;
	hz_le64 start_s;
	hz_le64 duration_s;
	hz_le64 expires_s;
	hz_le16 count;
	hz_u8 locality;
	hz_u8 reserved;
	hz_le32 reserved2;
};

/* NEG_REQUEST args: struct hz_neg_request. */
#define HZ_NEG_MAX_OFFERS 8

/* Followed in the result space by num_offers struct hz_neg_offer. */
struct hz_neg_result {
	hz_le64 negotiation_id;
	hz_le32 num_offers;
	hz_le32 round;
};

struct hz_neg_accept_args {
	hz_le64 offer_id;
};

struct hz_neg_accept_result {
	hz_le64 reservation_id;
};

struct hz_neg_decline_args {
	hz_le64 negotiation_id;
};

struct hz_neg_counter_args {
	hz_le64 negotiation_id;
	struct hz_neg_request request;
};

struct hz_neg_release_args {
	hz_le64 reservation_id;
	hz_le16 count; /* devices to give back; 0: all */
	hz_le16 reserved;
	hz_le32 reserved2;
};

/* ------------------------------------------------------------------------- */
/* Batch-size hints (SPEC.md §7.9)                                            */
/* ------------------------------------------------------------------------- */

struct hz_hint_declare_args {
	hz_le32 min_batch;
	hz_le32 max_batch;
	hz_le32 step; /* suggested values are min_batch + k * step */
	hz_le32 flags;
};

struct hz_hint_declare_result {
	hz_le32 suggested; /* the current suggestion inside the range */
	hz_le32 reserved;
};

/* ------------------------------------------------------------------------- */
/* Energy slack (SPEC.md §7.10, version 1.1)                                 */
/* ------------------------------------------------------------------------- */

#define HZ_ENERGY_SLACK_MAX_PCT 90            /* largest slowdown_pct */
#define HZ_ENERGY_SLACK_MAX_S (7 * 24 * 3600) /* longest duration_s */

struct hz_energy_slack_args {
	hz_le32 slowdown_pct; /* 1..HZ_ENERGY_SLACK_MAX_PCT; 0 withdraws */
	hz_le32 flags;        /* zero */
	hz_le64 duration_s;   /* 1..HZ_ENERGY_SLACK_MAX_S; 0 when withdrawing */
};

struct hz_energy_slack_result {
	hz_le64 expires_s; /* unix seconds the declaration ends; 0 if withdrawn */
};

/* ------------------------------------------------------------------------- */
/* Layout checks: the sizes SPEC.md states.                                  */
/* ------------------------------------------------------------------------- */

HZ_STATIC_ASSERT(sizeof(struct hz_config) == 64, "hz_config");
HZ_STATIC_ASSERT(sizeof(struct hz_req_hdr) == 16, "hz_req_hdr");
HZ_STATIC_ASSERT(sizeof(struct hz_status) == 24, "hz_status");
HZ_STATIC_ASSERT(sizeof(struct hz_hello_args) == 16, "hz_hello_args");
HZ_STATIC_ASSERT(sizeof(struct hz_hello_result) == 48, "hz_hello_result");
HZ_STATIC_ASSERT(sizeof(struct hz_extent) == 16, "hz_extent");
HZ_STATIC_ASSERT(sizeof(struct hz_region_register_args) == 16, "hz_region_register_args");
HZ_STATIC_ASSERT(sizeof(struct hz_region_register_result) == 8, "hz_region_register_result");
HZ_STATIC_ASSERT(sizeof(struct hz_region_unregister_args) == 8, "hz_region_unregister_args");
HZ_STATIC_ASSERT(sizeof(struct hz_slice) == 24, "hz_slice");
HZ_STATIC_ASSERT(sizeof(struct hz_comm_uid) == 32, "hz_comm_uid");
HZ_STATIC_ASSERT(sizeof(struct hz_comm_constraints) == 16, "hz_comm_constraints");
HZ_STATIC_ASSERT(sizeof(struct hz_comm_init_args) == 56, "hz_comm_init_args");
HZ_STATIC_ASSERT(sizeof(struct hz_comm_init_result) == 8, "hz_comm_init_result");
HZ_STATIC_ASSERT(sizeof(struct hz_comm_args) == 8, "hz_comm_args");
HZ_STATIC_ASSERT(sizeof(struct hz_coll_args) == 80, "hz_coll_args");
HZ_STATIC_ASSERT(sizeof(struct hz_ckpt_policy_args) == 24, "hz_ckpt_policy_args");
HZ_STATIC_ASSERT(sizeof(struct hz_ckpt_save_args) == 24, "hz_ckpt_save_args");
HZ_STATIC_ASSERT(sizeof(struct hz_ckpt_save_result) == 16, "hz_ckpt_save_result");
HZ_STATIC_ASSERT(sizeof(struct hz_ckpt_restore_args) == 16, "hz_ckpt_restore_args");
HZ_STATIC_ASSERT(sizeof(struct hz_ckpt_restore_result) == 24, "hz_ckpt_restore_result");
HZ_STATIC_ASSERT(sizeof(struct hz_ckpt_list_args) == 16, "hz_ckpt_list_args");
HZ_STATIC_ASSERT(sizeof(struct hz_ckpt_entry) == 32, "hz_ckpt_entry");
HZ_STATIC_ASSERT(sizeof(struct hz_ckpt_list_result) == 8, "hz_ckpt_list_result");
HZ_STATIC_ASSERT(sizeof(struct hz_ckpt_delete_args) == 16, "hz_ckpt_delete_args");
HZ_STATIC_ASSERT(sizeof(struct hz_quiesce_word) == 16, "hz_quiesce_word");
HZ_STATIC_ASSERT(sizeof(struct hz_ckpt_quiesce_args) == 40, "hz_ckpt_quiesce_args");
HZ_STATIC_ASSERT(sizeof(struct hz_event) == 112, "hz_event");
HZ_STATIC_ASSERT(sizeof(struct hz_event_subscribe_args) == 16, "hz_event_subscribe_args");
HZ_STATIC_ASSERT(sizeof(struct hz_event_subscribe_result) == 24, "hz_event_subscribe_result");
HZ_STATIC_ASSERT(sizeof(struct hz_event_ack_args) == 16, "hz_event_ack_args");
HZ_STATIC_ASSERT(sizeof(struct hz_topo_header) == 16, "hz_topo_header");
HZ_STATIC_ASSERT(sizeof(struct hz_topo_group) == 8, "hz_topo_group");
HZ_STATIC_ASSERT(sizeof(struct hz_topo_device) == 8, "hz_topo_device");
HZ_STATIC_ASSERT(sizeof(struct hz_neg_request) == 32, "hz_neg_request");
HZ_STATIC_ASSERT(sizeof(struct hz_neg_offer) == 40, "hz_neg_offer");
HZ_STATIC_ASSERT(sizeof(struct hz_neg_result) == 16, "hz_neg_result");
HZ_STATIC_ASSERT(sizeof(struct hz_neg_accept_args) == 8, "hz_neg_accept_args");
HZ_STATIC_ASSERT(sizeof(struct hz_neg_accept_result) == 8, "hz_neg_accept_result");
HZ_STATIC_ASSERT(sizeof(struct hz_neg_decline_args) == 8, "hz_neg_decline_args");
HZ_STATIC_ASSERT(sizeof(struct hz_neg_counter_args) == 40, "hz_neg_counter_args");
HZ_STATIC_ASSERT(sizeof(struct hz_neg_release_args) == 16, "hz_neg_release_args");
HZ_STATIC_ASSERT(sizeof(struct hz_hint_declare_args) == 16, "hz_hint_declare_args");
HZ_STATIC_ASSERT(sizeof(struct hz_hint_declare_result) == 8, "hz_hint_declare_result");
HZ_STATIC_ASSERT(sizeof(struct hz_energy_slack_args) == 16, "hz_energy_slack_args");
HZ_STATIC_ASSERT(sizeof(struct hz_energy_slack_result) == 8, "hz_energy_slack_result");

#endif /* HARMONAIZE_PROTOCOL_H */
