/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libharmonaize: the tenant's C API to the HarmonAIze device.
 *
 * One API over two transports:
 *   - the guest driver's character device (/dev/harmonaizeN), inside a VM;
 *   - vdev's virtio-user front-end on a harmonaized vhost-user socket, for
 *     container or host-process tenants (registered memory then comes from a
 *     shared memfd arena, see hz_mem_alloc).
 * hz_open(NULL) picks one: $HZ_DEVICE if set ("/dev/harmonaize0" or
 * "vhost-user:/run/harmonaize/t1.sock"), else the first /dev/harmonaizeN.
 *
 * Errors: every call returns HZ_OK (0) or a negative hz_err; hz_strerror()
 * names it. Device statuses map one to one (HZ_S_EPERM -> HZ_EPERM).
 * An operation the device did not grant at HELLO returns HZ_ENOTSUP at once.
 *
 * Threads: an hz_device may be shared by threads. Each call is atomic with
 * respect to the device; blocking calls of different threads proceed
 * concurrently. An hz_comm is used by one thread at a time (as with NCCL).
 * Asynchronous calls return an hz_request that any one thread waits on.
 */
#ifndef HARMONAIZE_HZ_H
#define HARMONAIZE_HZ_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/harmonaize.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Errors: the negated device status codes, then library-only ones. */
enum hz_err {
  HZ_OK = 0,
  HZ_EINVAL = -HZ_S_EINVAL,
  HZ_ENOTSUP = -HZ_S_ENOTSUP,
  HZ_EPERM = -HZ_S_EPERM,
  HZ_ENOENT = -HZ_S_ENOENT,
  HZ_EEXIST = -HZ_S_EEXIST,
  HZ_ELIMIT = -HZ_S_ELIMIT,
  HZ_EAGAIN = -HZ_S_EAGAIN,
  HZ_ETIMEDOUT = -HZ_S_ETIMEDOUT,
  HZ_EABORTED = -HZ_S_EABORTED,
  HZ_EMISMATCH = -HZ_S_EMISMATCH,
  HZ_EFAULT = -HZ_S_EFAULT,
  HZ_EIO = -HZ_S_EIO,
  HZ_ECORRUPT = -HZ_S_ECORRUPT,
  HZ_ESHUTDOWN = -HZ_S_ESHUTDOWN,
  HZ_EVERSION = -HZ_S_EVERSION,
  HZ_ETOOSMALL = -HZ_S_ETOOSMALL,
  HZ_EBUSY = -HZ_S_EBUSY,
  HZ_ESTATE = -HZ_S_ESTATE,
  HZ_EQUEUE = -HZ_S_EQUEUE,
  HZ_ENODEV = -100,     /* no device, or it went away */
  HZ_ETRANSPORT = -101, /* the transport failed (connection lost, bad reply) */
  HZ_ENOMEM = -102,     /* out of memory or registered memory */
  HZ_EPENDING = -103,   /* hz_test: not complete yet */
};

const char* hz_strerror(int err);

typedef struct hz_device hz_device_t;
typedef struct hz_comm hz_comm_t;
typedef struct hz_request hz_request_t;

/* ---- Device ---------------------------------------------------------- */

struct hz_device_info {
  char transport[16];     /* "driver" or "vhost-user" */
  char path[108];         /* device node or socket path */
  uint16_t version_major; /* negotiated protocol version */
  uint16_t version_minor;
  uint32_t num_request_queues;
  uint64_t features; /* HZ_F_* granted by HELLO */
  uint64_t session_id;
  uint32_t max_regions;
  uint32_t max_comm_ranks;
};

/* spec: NULL (automatic), a device node, or "vhost-user:<socket>". */
int hz_open(const char* spec, hz_device_t** out);
void hz_close(hz_device_t* dev);
int hz_device_get_info(hz_device_t* dev, struct hz_device_info* out);

/* ---- Memory ----------------------------------------------------------- */

/*
 * Registered memory is what collectives and checkpoints read and write in
 * place. hz_mem_alloc returns memory that is already registered (from the
 * shared arena on virtio-user, pinned pages on the driver). hz_mem_register
 * registers an existing buffer: on the driver transport any page-aligned
 * buffer; on virtio-user only memory from hz_mem_alloc's arena.
 * Collective buffers that are not registered still work: the library carries
 * small ones inside the request and stages large ones through registered
 * memory (one extra copy). Checkpoint slices and the quiescence word must lie
 * in registered memory (HZ_EFAULT otherwise): the provider reads them after
 * the call returns.
 */
int hz_mem_alloc(hz_device_t* dev, size_t bytes, void** ptr);
int hz_mem_free(hz_device_t* dev, void* ptr);
int hz_mem_register(hz_device_t* dev, void* ptr, size_t bytes);
int hz_mem_unregister(hz_device_t* dev, void* ptr);

/* ---- Communicators and collectives ----------------------------------- */

typedef struct hz_comm_uid hz_uid_t;

struct hz_comm_config {
  uint32_t flags;          /* HZ_COMM_F_* (HZ_COMM_F_DETERMINISTIC by default); with
                              HZ_COMM_F_LOW_LATENCY, the service polls for its requests,
                              and over vhost-user waits for its operations spin
                              HZ_LATENCY_POLL_US (default 0) microseconds first, at
                              most as long as the service polls (not at all where it
                              says it does not) */
  uint16_t priority_class; /* enum hz_priority_class */
  uint16_t max_threads;    /* 0: provider decides */
  uint32_t timeout_ms;     /* 0: device default */
};
#define HZ_COMM_CONFIG_INIT \
  { HZ_COMM_F_DETERMINISTIC, HZ_PRIO_NORMAL, 0, 0 }

int hz_comm_get_uid(hz_device_t* dev, hz_uid_t* uid);
/* Blocks until all nranks ranks have joined (or the timeout). cfg may be NULL. */
int hz_comm_init(hz_device_t* dev, const hz_uid_t* uid, uint32_t nranks, uint32_t rank,
                 const struct hz_comm_config* cfg, hz_comm_t** out);
int hz_comm_destroy(hz_comm_t* comm);
int hz_comm_abort(hz_comm_t* comm);
int hz_comm_rank(const hz_comm_t* comm);
int hz_comm_size(const hz_comm_t* comm);

/*
 * Collectives. count is in elements of dtype, with NCCL's meaning: per rank
 * for all-reduce/broadcast/reduce, the send count for all-gather, the receive
 * count for reduce-scatter, per peer for all-to-all. Buffers are host
 * pointers. The _async forms return a request to hz_wait on; the buffers
 * must stay valid until it completes.
 */
int hz_allreduce(hz_comm_t* c, const void* send, void* recv, size_t count, enum hz_dtype dt,
                 enum hz_redop op);
int hz_broadcast(hz_comm_t* c, const void* send, void* recv, size_t count, enum hz_dtype dt,
                 uint32_t root);
int hz_reduce(hz_comm_t* c, const void* send, void* recv, size_t count, enum hz_dtype dt,
              enum hz_redop op, uint32_t root);
int hz_allgather(hz_comm_t* c, const void* send, void* recv, size_t count, enum hz_dtype dt);
int hz_reduce_scatter(hz_comm_t* c, const void* send, void* recv, size_t count, enum hz_dtype dt,
                      enum hz_redop op);
int hz_alltoall(hz_comm_t* c, const void* send, void* recv, size_t count, enum hz_dtype dt);
int hz_send(hz_comm_t* c, const void* buf, size_t count, enum hz_dtype dt, uint32_t peer);
int hz_recv(hz_comm_t* c, void* buf, size_t count, enum hz_dtype dt, uint32_t peer);
int hz_barrier(hz_comm_t* c);

int hz_allreduce_async(hz_comm_t* c, const void* send, void* recv, size_t count, enum hz_dtype dt,
                       enum hz_redop op, hz_request_t** req);
int hz_broadcast_async(hz_comm_t* c, const void* send, void* recv, size_t count, enum hz_dtype dt,
                       uint32_t root, hz_request_t** req);
int hz_reduce_async(hz_comm_t* c, const void* send, void* recv, size_t count, enum hz_dtype dt,
                    enum hz_redop op, uint32_t root, hz_request_t** req);
int hz_allgather_async(hz_comm_t* c, const void* send, void* recv, size_t count, enum hz_dtype dt,
                       hz_request_t** req);
int hz_reduce_scatter_async(hz_comm_t* c, const void* send, void* recv, size_t count,
                            enum hz_dtype dt, enum hz_redop op, hz_request_t** req);
int hz_alltoall_async(hz_comm_t* c, const void* send, void* recv, size_t count, enum hz_dtype dt,
                      hz_request_t** req);
int hz_send_async(hz_comm_t* c, const void* buf, size_t count, enum hz_dtype dt, uint32_t peer,
                  hz_request_t** req);
int hz_recv_async(hz_comm_t* c, void* buf, size_t count, enum hz_dtype dt, uint32_t peer,
                  hz_request_t** req);
int hz_barrier_async(hz_comm_t* c, hz_request_t** req);

/* Waits for completion (timeout_ms < 0: forever), returns its result and frees req;
 * on HZ_ETIMEDOUT req stays pending and must be waited for again. */
int hz_wait(hz_request_t* req, int timeout_ms);
/* HZ_EPENDING while running; otherwise the result (req still needs hz_wait or hz_request_free). */
int hz_test(hz_request_t* req);
/*
 * hz_test that first waits up to timeout_ms (< 0: forever) for completion; it
 * never frees req. HZ_EPENDING means still running, anything else is the
 * result. Unlike hz_wait with a timeout, an expired wait (HZ_EPENDING) cannot
 * be mistaken for an operation that completed with HZ_ETIMEDOUT (a peer that
 * never arrived), after which hz_wait has already freed req.
 */
int hz_test_wait(hz_request_t* req, int timeout_ms);
/* Frees a request; a running one is waited for first. */
void hz_request_free(hz_request_t* req);

/* ---- Checkpoints ----------------------------------------------------- */

struct hz_buf {
  void* ptr;
  size_t len;
};

struct hz_ckpt_policy {
  uint32_t flags;     /* HZ_CKPT_F_* */
  uint32_t retention; /* durable checkpoints kept, >= 1 */
  uint32_t tier;      /* enum hz_ckpt_tier */
  uint32_t stall_budget_ms;
  uint32_t rpo_s;
};

struct hz_ckpt_info {
  uint64_t step;
  uint64_t bytes;
  uint64_t time_s;
  uint32_t state; /* enum hz_ckpt_state */
  uint32_t tier;
  uint32_t stall_us; /* save only */
};

int hz_ckpt_set_policy(hz_device_t* dev, uint32_t stream, const struct hz_ckpt_policy* p);
int hz_ckpt_save(hz_device_t* dev, uint32_t stream, uint64_t step, const struct hz_buf* slices,
                 size_t n, const void* meta, size_t meta_len, struct hz_ckpt_info* out);
/* step may be HZ_STEP_LATEST; *meta_len is in: capacity, out: length. */
int hz_ckpt_restore(hz_device_t* dev, uint32_t stream, uint64_t step, const struct hz_buf* slices,
                    size_t n, void* meta, size_t* meta_len, struct hz_ckpt_info* out);
int hz_ckpt_list(hz_device_t* dev, uint32_t stream, struct hz_ckpt_info* entries, size_t max,
                 size_t* n);
int hz_ckpt_delete(hz_device_t* dev, uint32_t stream, uint64_t step);
/*
 * Just-in-time saves: word is a struct hz_quiesce_word in registered memory
 * the tenant updates as a sequence lock (see SPEC.md, CKPT_QUIESCE).
 */
int hz_ckpt_quiesce(hz_device_t* dev, uint32_t stream, struct hz_quiesce_word* word,
                    const struct hz_buf* slices, size_t n);

/* ---- Events ------------------------------------------------------------ */

/* topics: HZ_TOPIC_MASK bits; from_seq: HZ_SEQ_CURSOR to resume. */
int hz_event_subscribe(hz_device_t* dev, uint64_t topics, uint64_t from_seq);
/* A file descriptor that polls readable when an event may be waiting. */
int hz_event_fd(hz_device_t* dev);
/* Next event; timeout_ms < 0 waits forever; HZ_ETIMEDOUT when none came. */
int hz_event_next(hz_device_t* dev, struct hz_event* ev, int timeout_ms);
/* Acknowledges every event up to seq; flags HZ_ACK_F_APPROVE. */
int hz_event_ack(hz_device_t* dev, uint64_t seq, uint32_t flags);

/* ---- Topology ---------------------------------------------------------- */

struct hz_topology {
  struct hz_topo_header header;
  struct hz_topo_group* groups;   /* header.num_groups */
  struct hz_topo_device* devices; /* header.num_devices */
};

int hz_topology_get(hz_device_t* dev, struct hz_topology** out);
void hz_topology_free(struct hz_topology* t);

/* ---- Negotiation ----------------------------------------------------- */

struct hz_negotiation {
  uint64_t id;
  uint32_t round;
  uint32_t num_offers;
  struct hz_neg_offer offers[HZ_NEG_MAX_OFFERS];
};

int hz_neg_start(hz_device_t* dev, const struct hz_neg_request* req, struct hz_negotiation* out);
int hz_neg_counter(hz_device_t* dev, uint64_t negotiation_id, const struct hz_neg_request* req,
                   struct hz_negotiation* out);
int hz_neg_accept(hz_device_t* dev, uint64_t offer_id, uint64_t* reservation_id);
int hz_neg_decline(hz_device_t* dev, uint64_t negotiation_id);
int hz_neg_release(hz_device_t* dev, uint64_t reservation_id, uint16_t count);

/* ---- Hints ------------------------------------------------------------- */

int hz_hint_declare(hz_device_t* dev, uint32_t min_batch, uint32_t max_batch, uint32_t step,
                    uint32_t* suggested);

/* ---- Energy slack (SPEC §7.10; needs HZ_F_ENERGY, protocol 1.1) -------- */

/* Declares that, while this host's energy level is constrained or critical,
 * the tenant accepts its collectives being slowed by at most slowdown_pct
 * percent (1..HZ_ENERGY_SLACK_MAX_PCT) for the next duration_s seconds
 * (1..HZ_ENERGY_SLACK_MAX_S). Replaces the tenant's earlier declaration;
 * slowdown_pct 0 with duration_s 0 withdraws it. *expires_s (may be NULL)
 * receives the unix time the declaration ends (0 when withdrawn). */
int hz_energy_slack(hz_device_t* dev, uint32_t slowdown_pct, uint64_t duration_s,
                    uint64_t* expires_s);

#ifdef __cplusplus
}
#endif

#endif /* HARMONAIZE_HZ_H */
