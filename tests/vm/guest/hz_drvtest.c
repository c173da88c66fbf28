// SPDX-License-Identifier: Apache-2.0
// Guest-side exerciser of /dev/harmonaizeN, run inside the test VM (static
// binary in the initramfs). Each subcommand prints what it saw and exits 0
// only when every check held:
//   hz_drvtest info     [DEV]   device information and config space
//   hz_drvtest hello    [DEV]   the driver's HELLO; HELLO from user space refused
//   hz_drvtest async    [DEV]   COMM_UIDs submitted asynchronously, read()/poll()
//   hz_drvtest region   [DEV]   register and unregister a pinned region
//   hz_drvtest hostile  [DEV]   malformed submissions are refused cleanly
//   hz_drvtest unplug   [DEV]   the driver is unbound under an open file
//   hz_drvtest pciunplug [DEV]  the PCI function is removed under an open file
//   hz_drvtest exitmid  [DEV]   a process dies while the device holds its request
//   hz_drvtest events   [DEV [N]] subscribe, wait for N device events, acknowledge them
//   hz_drvtest hostiledev [DEV] a lying device (vm-hostile-backend) is not trusted
//   hz_drvtest allreduce [DEV]  two ranks, registered regions, ALLREDUCE on request queues
//   hz_drvtest xvm-rank0 [DEV]  rank 0 of an ALLREDUCE across two VMs (prints HZ-UID)
//   hz_drvtest xvm-rank1 DEV UID  rank 1, joining the uid rank 0 printed
//   hz_drvtest ranks DEV UID NRANKS RANK  one rank of a communicator created
//                               elsewhere (the host): ALLREDUCE and ALLGATHER of
//                               several sizes in a region of several extents
//   hz_drvtest refused DEV UID  COMM_INIT with another tenant's uid: EPERM
//   hz_drvtest victim DEV UID   rank 2 of 3: one ALLREDUCE, then waits to be killed
//   hz_drvtest survivor DEV UID rank 1 of 3: one ALLREDUCE; the next fails when
//                               rank 2's VM dies; then a new 2-rank communicator
//   hz_drvtest pending [DEV]    a COMM_INIT that no second rank joins, held by the
//                               device until its 5 s timeout (ETIMEDOUT expected)
//   hz_drvtest owner    [DEV]   what one file registers or creates, another cannot name
//   hz_drvtest families [DEV]   checkpoint save/restore, topology, hints, negotiation
//   hz_drvtest memlock  [DEV]   a submit's pins are charged against RLIMIT_MEMLOCK
//   hz_drvtest silentclose [DEV] close() returns when the device (vm-hostile-backend)
//                               has gone silent; removal releases what it held
//   hz_drvtest noleaks          no pinned pages or live requests remain
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harmonaize.h"
#include "harmonaize/harmonaize_uapi.h"

static const char* g_dev = "/dev/harmonaize0";

#define CHECK(cond, ...)                        \
  do {                                          \
    if (!(cond)) {                              \
      printf("hz_drvtest: FAIL: " __VA_ARGS__); \
      printf(" (%s:%d)\n", __FILE__, __LINE__); \
      exit(1);                                  \
    }                                           \
  } while (0)

static int open_dev(void) {
  int fd = open(g_dev, O_RDWR | O_CLOEXEC);
  CHECK(fd >= 0, "open %s: %s", g_dev, strerror(errno));
  return fd;
}

static const char* status_name(uint32_t s) {
  static const char* const names[] = {"OK",        "EINVAL",    "ENOTSUP", "EPERM",     "ENOENT",
                                      "EEXIST",    "ELIMIT",    "EAGAIN",  "ETIMEDOUT", "EABORTED",
                                      "EMISMATCH", "EFAULT",    "EIO",     "ECORRUPT",  "ESHUTDOWN",
                                      "EVERSION",  "ETOOSMALL", "EBUSY",   "ESTATE",    "EQUEUE"};
  return s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

// Fills a HELLO submission; result receives the hz_hello_result.
static void hello_submit(struct hz_ioc_submit* sub, struct hz_hello_args* args,
                         struct hz_ioc_seg* seg, struct hz_hello_result* result) {
  memset(args, 0, sizeof(*args));
  args->version_major = HZ_VERSION_MAJOR;
  args->version_minor = HZ_VERSION_MINOR;
  args->driver_features = (1u << HZ_F_EVENTS) | (1u << HZ_F_COLLECTIVES);
  memset(result, 0, sizeof(*result));
  memset(seg, 0, sizeof(*seg));
  seg->addr = (uintptr_t)result;
  seg->len = sizeof(*result);
  seg->flags = HZ_SEG_F_WRITE;
  memset(sub, 0, sizeof(*sub));
  sub->opcode = HZ_OP_HELLO;
  sub->queue = HZ_QUEUE_CONTROL;
  sub->args_ptr = (uintptr_t)args;
  sub->args_len = sizeof(*args);
  sub->num_segs = 1;
  sub->segs_ptr = (uintptr_t)seg;
}

// The session's HELLO result: the driver sends HELLO itself and reports it
// through HZ_IOC_HELLO. A driver that predates HZ_IOC_HELLO (ENOTTY) left
// HELLO to user space: then this sends one.
static void session_hello(int fd, struct hz_hello_result* out) {
  struct hz_ioc_hello h;
  memset(&h, 0, sizeof(h));
  if (ioctl(fd, HZ_IOC_HELLO, &h) == 0) {
    CHECK(h.error == 0 && h.status == HZ_S_OK && h.result_len >= sizeof(*out),
          "the driver's HELLO: error %d status %u result_len %u", h.error, h.status, h.result_len);
    memcpy(out, h.result, sizeof(*out));
    return;
  }
  CHECK(errno == ENOTTY, "HZ_IOC_HELLO: %s", strerror(errno));
  struct hz_ioc_submit sub;
  struct hz_hello_args args;
  struct hz_ioc_seg seg;
  hello_submit(&sub, &args, &seg, out);
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) == 0 && sub.status == HZ_S_OK, "HELLO");
}

// A COMM_UID on the control queue (no arguments, a 32-byte result): a
// harmless request for checks of the submit path itself.
static void uid_submit(struct hz_ioc_submit* sub, struct hz_ioc_seg* seg,
                       struct hz_comm_uid_result* result) {
  memset(result, 0, sizeof(*result));
  memset(seg, 0, sizeof(*seg));
  seg->addr = (uintptr_t)result;
  seg->len = sizeof(*result);
  seg->flags = HZ_SEG_F_WRITE;
  memset(sub, 0, sizeof(*sub));
  sub->opcode = HZ_OP_COMM_UID;
  sub->queue = HZ_QUEUE_CONTROL;
  sub->num_segs = 1;
  sub->segs_ptr = (uintptr_t)seg;
}

// Live pins and requests of the driver (all devices), from sysfs.
static long driver_counter(const char* name) {
  char path[128];
  snprintf(path, sizeof(path), "/sys/bus/virtio/drivers/harmonaize/%s", name);
  FILE* f = fopen(path, "r");
  CHECK(f != NULL, "open %s: %s", path, strerror(errno));
  long v = -1;
  CHECK(fscanf(f, "%ld", &v) == 1, "read %s", path);
  fclose(f);
  return v;
}

// Waits up to 20 s for both counters to drop to zero.
static void expect_no_leaks(const char* when) {
  long pinned = -1, live = -1;
  for (int i = 0; i < 200; i++) {
    pinned = driver_counter("pinned_pages");
    live = driver_counter("live_requests");
    if (pinned == 0 && live == 0) break;
    usleep(100 * 1000);
  }
  printf("hz_drvtest: %s: pinned_pages %ld live_requests %ld\n", when, pinned, live);
  CHECK(pinned == 0 && live == 0, "%s: pins or requests left behind", when);
}

// A blocking request on the control queue with one result buffer.
static struct hz_ioc_submit control_call(int fd, uint16_t opcode, const void* args,
                                         uint32_t args_len, void* result, uint32_t result_len) {
  struct hz_ioc_seg seg = {.addr = (uintptr_t)result, .len = result_len, .flags = HZ_SEG_F_WRITE};
  struct hz_ioc_submit sub = {.opcode = opcode,
                              .queue = HZ_QUEUE_CONTROL,
                              .args_ptr = (uintptr_t)args,
                              .args_len = args_len,
                              .num_segs = result_len ? 1 : 0,
                              .segs_ptr = (uintptr_t)&seg};
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) == 0, "submit opcode 0x%x: %s", opcode, strerror(errno));
  return sub;
}

// A process killed while its request is held by the device (a COMM_INIT
// waiting for a second rank): the driver keeps the pinned buffer until the
// device returns the request, then frees everything.
static int cmd_exitmid(void) {
  int fd = open_dev();
  struct hz_ioc_submit sub;
  struct hz_hello_result hres;
  session_hello(fd, &hres);
  struct hz_comm_uid_result uid;
  sub = control_call(fd, HZ_OP_COMM_UID, NULL, 0, &uid, sizeof(uid));
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "COMM_UID status %s", status_name(sub.status));

  struct hz_comm_init_args init = {.uid = uid.uid, .nranks = 2, .rank = 0};
  init.constraints.timeout_ms = 60000;
  pid_t child = fork();
  CHECK(child >= 0, "fork");
  if (child == 0) {
    struct hz_comm_init_result r;
    control_call(fd, HZ_OP_COMM_INIT, &init, sizeof(init), &r, sizeof(r));
    _exit(0);  // not reached before the kill: rank 1 never joins
  }
  long live = 0;
  for (int i = 0; i < 100 && live < 1; i++) {
    usleep(50 * 1000);
    live = driver_counter("live_requests");
  }
  CHECK(live >= 1, "rank 0's COMM_INIT is not in flight");
  CHECK(kill(child, SIGKILL) == 0, "kill");
  int wst = 0;
  CHECK(waitpid(child, &wst, 0) == child && WIFSIGNALED(wst), "child did not die by the signal");
  long pinned = driver_counter("pinned_pages");
  live = driver_counter("live_requests");
  printf("hz_drvtest: rank 0 killed mid-request: live_requests %ld pinned_pages %ld\n", live,
         pinned);
  CHECK(live == 1 && pinned >= 1, "the abandoned request was released while the device held it");

  // Rank 1 joins: the device completes both, and the abandoned one is freed.
  init.rank = 1;
  struct hz_comm_init_result r1;
  sub = control_call(fd, HZ_OP_COMM_INIT, &init, sizeof(init), &r1, sizeof(r1));
  printf("hz_drvtest: rank 1 COMM_INIT status %s comm 0x%" PRIx64 "\n", status_name(sub.status),
         (uint64_t)r1.comm);
  CHECK(sub.error == 0, "rank 1 COMM_INIT error %d", sub.error);
  close(fd);
  expect_no_leaks("after the abandoned request completed");
  return 0;
}

// Events: enabled on the file, subscribed on the device, read as records.
// Waits for COUNT events (argument 3, default 1), prints each with its
// payload, acknowledges the last one with EVENT_ACK and checks, by
// subscribing again from the cursor, that the device recorded the ACK.
// "HZ-EVENTS: subscribed" tells the host half when to inject.
static int cmd_events(int count) {
  int fd = open_dev();
  uint32_t on = 1;
  CHECK(ioctl(fd, HZ_IOC_EVENTS_ENABLE, &on) == 0, "EVENTS_ENABLE: %s", strerror(errno));
  struct hz_ioc_submit sub;
  struct hz_hello_result hres;
  session_hello(fd, &hres);
  CHECK(hres.device_features & (1u << HZ_F_EVENTS), "the device did not grant HZ_F_EVENTS");
  struct hz_event_subscribe_args sargs = {.topics = HZ_TOPIC_ALL, .from_seq = 1};
  struct hz_event_subscribe_result sres;
  sub = control_call(fd, HZ_OP_EVENT_SUBSCRIBE, &sargs, sizeof(sargs), &sres, sizeof(sres));
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "EVENT_SUBSCRIBE status %s",
        status_name(sub.status));
  printf("HZ-EVENTS: subscribed cursor %" PRIu64 " next_seq %" PRIu64 " waiting for %d\n",
         (uint64_t)sres.cursor, (uint64_t)sres.next_seq, count);
  int got = 0;
  uint64_t last_seq = 0;
  while (got < count) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    CHECK(poll(&p, 1, 60000) == 1 && (p.revents & POLLIN), "no event after %d", got);
    struct hz_record rec;
    CHECK(read(fd, &rec, sizeof(rec)) == sizeof(rec), "read event");
    if (rec.type != HZ_REC_EVENT) continue;
    struct hz_event ev;
    memcpy(&ev, rec.event, sizeof(ev));
    char hex[2 * 32 + 1];
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", ev.payload[i]);
    printf("HZ-EVENT: seq %" PRIu64 " topic %u kind %u flags 0x%x deadline_s %" PRIu64
           " payload %s\n",
           (uint64_t)ev.seq, ev.topic, ev.kind, ev.flags, (uint64_t)ev.deadline_s, hex);
    CHECK(ev.seq > last_seq, "event seq %" PRIu64 " not increasing", (uint64_t)ev.seq);
    last_seq = ev.seq;
    got++;
  }

  // An ACK beyond what was delivered is refused; the real one moves the cursor.
  struct hz_event_ack_args ack = {.seq = last_seq + 1000};
  sub = control_call(fd, HZ_OP_EVENT_ACK, &ack, sizeof(ack), NULL, 0);
  CHECK(sub.error == 0 && sub.status == HZ_S_EINVAL, "ACK of an undelivered seq: status %s",
        status_name(sub.status));
  ack.seq = last_seq;
  sub = control_call(fd, HZ_OP_EVENT_ACK, &ack, sizeof(ack), NULL, 0);
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "EVENT_ACK status %s", status_name(sub.status));
  sargs.from_seq = HZ_SEQ_CURSOR;
  sub = control_call(fd, HZ_OP_EVENT_SUBSCRIBE, &sargs, sizeof(sargs), &sres, sizeof(sres));
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "re-SUBSCRIBE status %s", status_name(sub.status));
  printf("HZ-EVENTS: acked seq %" PRIu64 ": cursor %" PRIu64 " next_seq %" PRIu64 "\n", last_seq,
         (uint64_t)sres.cursor, (uint64_t)sres.next_seq);
  CHECK(sres.cursor == last_seq, "cursor %" PRIu64 " after ACK of %" PRIu64, (uint64_t)sres.cursor,
        last_seq);
  CHECK(sres.next_seq == last_seq + 1, "next_seq %" PRIu64, (uint64_t)sres.next_seq);
  close(fd);
  return 0;
}

// Against vm-hostile-backend, which completes each request as the first u32
// of its arguments asks: every lie must come back as -EPROTO, never as data.
static int cmd_hostiledev(void) {
  static const char* const lies[] = {
      "well formed",      "used below result_len + 24", "used below 24", "status out of range",
      "wrong request id", "result_len too long",        "used length 0"};
  int fd = open_dev();
  uint32_t on = 1;
  CHECK(ioctl(fd, HZ_IOC_EVENTS_ENABLE, &on) == 0, "EVENTS_ENABLE: %s", strerror(errno));
  for (uint32_t mode = 0; mode < sizeof(lies) / sizeof(lies[0]); mode++) {
    uint8_t result[64];
    struct hz_ioc_submit sub =
        control_call(fd, HZ_OP_TOPOLOGY_GET, &mode, sizeof(mode), result, sizeof(result));
    printf("hz_drvtest: device lie '%s': error %d status %u result_len %u\n", lies[mode], sub.error,
           sub.status, sub.result_len);
    if (mode == 0)
      CHECK(sub.error == 0 && sub.status == HZ_S_OK && sub.result_len == 0, "well-formed reply");
    else
      CHECK(sub.error == -EPROTO && sub.result_len == 0, "lie '%s' accepted", lies[mode]);
  }
  // The same through the asynchronous path.
  uint32_t mode = 3;
  uint8_t result[64];
  struct hz_ioc_seg seg = {
      .addr = (uintptr_t)result, .len = sizeof(result), .flags = HZ_SEG_F_WRITE};
  struct hz_ioc_submit sub = {.opcode = HZ_OP_TOPOLOGY_GET,
                              .queue = HZ_QUEUE_CONTROL,
                              .flags = HZ_SUBMIT_F_ASYNC,
                              .args_ptr = (uintptr_t)&mode,
                              .args_len = sizeof(mode),
                              .num_segs = 1,
                              .segs_ptr = (uintptr_t)&seg,
                              .user_data = 77};
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) == 0, "async submit: %s", strerror(errno));
  struct hz_record rec;
  CHECK(read(fd, &rec, sizeof(rec)) == sizeof(rec), "read completion");
  CHECK(rec.type == HZ_REC_COMPLETION && rec.completion.user_data == 77 &&
            rec.completion.error == -EPROTO,
        "async lie: type %u error %d", rec.type, rec.completion.error);

  // A short event is dropped; the well-formed one after it arrives.
  mode = 7;
  sub = control_call(fd, HZ_OP_TOPOLOGY_GET, &mode, sizeof(mode), result, sizeof(result));
  CHECK(sub.error == 0, "event trigger");
  struct pollfd p = {.fd = fd, .events = POLLIN};
  CHECK(poll(&p, 1, 20000) == 1, "no event");
  CHECK(read(fd, &rec, sizeof(rec)) == sizeof(rec) && rec.type == HZ_REC_EVENT, "event record");
  struct hz_event ev;
  memcpy(&ev, rec.event, sizeof(ev));
  printf("hz_drvtest: event after a short one: seq %" PRIu64 " topic %u\n", (uint64_t)ev.seq,
         ev.topic);
  CHECK(ev.seq == 2, "the short event was delivered (seq %" PRIu64 ")", (uint64_t)ev.seq);
  CHECK(fcntl(fd, F_SETFL, O_NONBLOCK) == 0, "fcntl");
  CHECK(read(fd, &rec, sizeof(rec)) < 0 && errno == EAGAIN, "unexpected extra record");
  close(fd);
  printf("hz_drvtest: every device lie was refused\n");
  return 0;
}

// Two ranks in one guest (two processes, one device session): each registers
// its own region, and an FP32 ALLREDUCE(SUM) on a request queue leaves
// a + b in both ranks' receive slices, written by the host into guest memory.
static int allreduce_rank(int fd, const struct hz_comm_uid* uid, uint32_t rank, uint32_t n) {
  size_t bytes = (size_t)n * sizeof(float);
  size_t len = 2 * bytes;
  float* buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(buf != MAP_FAILED, "mmap");
  for (uint32_t i = 0; i < n; i++) {
    buf[i] = (float)(rank == 0 ? i : 1000 * i);
    buf[n + i] = -1;
  }
  struct hz_ioc_region reg = {
      .addr = (uintptr_t)buf, .len = len, .flags = HZ_REGION_RW_READ | HZ_REGION_RW_WRITE};
  CHECK(ioctl(fd, HZ_IOC_REGION_REGISTER, &reg) == 0, "rank %u register: %s", rank,
        strerror(errno));

  struct hz_comm_init_args init = {.uid = *uid, .nranks = 2, .rank = rank};
  init.constraints.timeout_ms = 150000;  // a second guest may take long to boot under TCG
  struct hz_comm_init_result comm;
  struct hz_ioc_submit sub =
      control_call(fd, HZ_OP_COMM_INIT, &init, sizeof(init), &comm, sizeof(comm));
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "rank %u COMM_INIT status %s", rank,
        status_name(sub.status));

  struct hz_coll_args args = {
      .comm = comm.comm,
      .seq = 0,
      .count = n,
      .dtype = HZ_FP32,
      .redop = HZ_SUM,
      .send = {.region_id = reg.region_id, .offset = 0, .length = bytes},
      .recv = {.region_id = reg.region_id, .offset = bytes, .length = bytes}};
  struct hz_ioc_submit coll = {.opcode = HZ_OP_ALLREDUCE,
                               .queue = (uint16_t)rank,  // each rank on its own request queue
                               .args_ptr = (uintptr_t)&args,
                               .args_len = sizeof(args)};
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &coll) == 0, "rank %u ALLREDUCE: %s", rank, strerror(errno));
  CHECK(coll.error == 0 && coll.status == HZ_S_OK, "rank %u ALLREDUCE error %d status %s detail %u",
        rank, coll.error, status_name(coll.status), coll.detail);
  for (uint32_t i = 0; i < n; i++)
    CHECK(buf[n + i] == (float)(1001 * i), "rank %u element %u: %g", rank, i, buf[n + i]);
  struct hz_comm_args destroy = {.comm = comm.comm};
  control_call(fd, HZ_OP_COMM_DESTROY, &destroy, sizeof(destroy), NULL, 0);
  printf("hz_drvtest: rank %u: ALLREDUCE of %u floats correct (request queue %u)\n", rank, n, rank);
  return 0;
}

// Ranks in two VMs on one host: rank 0 prints the communicator uid on the
// console (HZ-UID: hex) for the host to hand to rank 1's guest.
static int cmd_xvm(int rank, const char* uid_hex) {
  enum { kFloats = 4096 };
  int fd = open_dev();
  struct hz_ioc_submit sub;
  struct hz_hello_result hres;
  session_hello(fd, &hres);
  struct hz_comm_uid_result uid;
  if (rank == 0) {
    sub = control_call(fd, HZ_OP_COMM_UID, NULL, 0, &uid, sizeof(uid));
    CHECK(sub.error == 0 && sub.status == HZ_S_OK, "COMM_UID status %s", status_name(sub.status));
    printf("HZ-UID: ");
    for (int i = 0; i < HZ_UID_BYTES; i++) printf("%02x", uid.uid.bytes[i]);
    printf("\n");
  } else {
    CHECK(uid_hex != NULL && strlen(uid_hex) == 2 * HZ_UID_BYTES, "uid argument");
    for (int i = 0; i < HZ_UID_BYTES; i++) {
      unsigned int b;
      CHECK(sscanf(uid_hex + 2 * i, "%2x", &b) == 1, "uid hex");
      uid.uid.bytes[i] = (uint8_t)b;
    }
  }
  allreduce_rank(fd, &uid.uid, (uint32_t)rank, kFloats);
  close(fd);
  return 0;
}

static void parse_uid(const char* hex, struct hz_comm_uid* uid) {
  CHECK(hex != NULL && strlen(hex) == 2 * HZ_UID_BYTES, "uid argument");
  for (int i = 0; i < HZ_UID_BYTES; i++) {
    unsigned int b;
    CHECK(sscanf(hex + 2 * i, "%2x", &b) == 1, "uid hex");
    uid->bytes[i] = (uint8_t)b;
  }
}

static void hello_or_die(int fd) {
  struct hz_hello_result hres;
  session_hello(fd, &hres);
  CHECK(hres.device_features & (1u << HZ_F_COLLECTIVES), "collectives not granted");
}

// The values every rank of vm_mixed_tenant_ranks contributes (the host rank,
// tests/vm/host_rank, computes the same): small integers, so FP32 sums are
// exact in any order.
static float mixed_reduce_value(uint32_t rank, uint32_t i) {
  return (float)((rank + 1) * (i % 251));
}
static float mixed_gather_value(uint32_t rank, uint32_t i) {
  return (float)(rank * 1000 + i % 997);
}

// One collective on request queue 0, blocking; returns the device status.
static uint32_t coll_call(int fd, uint16_t opcode, struct hz_coll_args* args) {
  struct hz_ioc_submit coll = {
      .opcode = opcode, .queue = 0, .args_ptr = (uintptr_t)args, .args_len = sizeof(*args)};
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &coll) == 0, "collective 0x%x: %s", opcode, strerror(errno));
  CHECK(coll.error == 0, "collective 0x%x error %d", opcode, coll.error);
  if (coll.status != HZ_S_OK)
    printf("hz_drvtest: collective 0x%x status %s detail %u\n", opcode, status_name(coll.status),
           coll.detail);
  return coll.status;
}

// One rank of a communicator whose uid another party (the host) created.
// The region holds send, all-reduce result and all-gather result for the
// largest size; its pages are faulted in interleaved with a second mapping so
// that they are not physically contiguous and the region spans many extents.
static int cmd_ranks(const char* uid_hex, uint32_t nranks, uint32_t rank) {
  static const uint32_t sizes[] = {1, 1000, 4096, 200003};
  const uint32_t max_n = 200003;
  CHECK(nranks >= 2 && nranks <= 16 && rank < nranks, "nranks %u rank %u", nranks, rank);
  struct hz_comm_uid uid;
  parse_uid(uid_hex, &uid);
  int fd = open_dev();
  hello_or_die(fd);

  size_t floats = (size_t)max_n * (2 + nranks);
  size_t len = (floats * sizeof(float) + 4095) & ~(size_t)4095;
  float* buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  volatile char* spacer =
      mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(buf != MAP_FAILED && spacer != MAP_FAILED, "mmap");
  for (size_t off = 0; off < len; off += 4096) {
    ((volatile char*)buf)[off] = 0;
    spacer[off] = 1;
  }
  struct hz_ioc_region reg = {
      .addr = (uintptr_t)buf, .len = len, .flags = HZ_REGION_RW_READ | HZ_REGION_RW_WRITE};
  CHECK(ioctl(fd, HZ_IOC_REGION_REGISTER, &reg) == 0, "register %zu bytes: %s", len,
        strerror(errno));
  printf("hz_drvtest: rank %u: region of %zu bytes in %u extents\n", rank, len, reg.num_extents);
  CHECK(reg.num_extents > 1, "the region is one extent; the test needs several");

  struct hz_comm_init_args init = {.uid = uid, .nranks = nranks, .rank = rank};
  init.constraints.timeout_ms = 150000;  // the other guest may take long to boot under TCG
  struct hz_comm_init_result comm;
  struct hz_ioc_submit sub =
      control_call(fd, HZ_OP_COMM_INIT, &init, sizeof(init), &comm, sizeof(comm));
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "rank %u COMM_INIT status %s", rank,
        status_name(sub.status));

  uint64_t seq = 0;
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
    uint32_t n = sizes[k];
    uint64_t bytes = (uint64_t)n * sizeof(float);
    float* send = buf;
    float* sum = buf + max_n;
    float* gathered = buf + 2 * (size_t)max_n;
    for (uint32_t i = 0; i < n; i++) {
      send[i] = mixed_reduce_value(rank, i);
      sum[i] = -1;
    }
    struct hz_coll_args ar = {
        .comm = comm.comm,
        .seq = seq++,
        .count = n,
        .dtype = HZ_FP32,
        .redop = HZ_SUM,
        .send = {.region_id = reg.region_id, .offset = 0, .length = bytes},
        .recv = {.region_id = reg.region_id, .offset = max_n * sizeof(float), .length = bytes}};
    CHECK(coll_call(fd, HZ_OP_ALLREDUCE, &ar) == HZ_S_OK, "rank %u ALLREDUCE of %u", rank, n);
    for (uint32_t i = 0; i < n; i++) {
      float want = 0;
      for (uint32_t r = 0; r < nranks; r++) want += mixed_reduce_value(r, i);
      CHECK(sum[i] == want, "rank %u ALLREDUCE of %u: element %u is %g, want %g", rank, n, i,
            sum[i], want);
    }
    printf("hz_drvtest: rank %u: ALLREDUCE of %u floats correct\n", rank, n);

    for (uint32_t i = 0; i < n; i++) send[i] = mixed_gather_value(rank, i);
    for (size_t i = 0; i < (size_t)n * nranks; i++) gathered[i] = -1;
    struct hz_coll_args ag = {.comm = comm.comm,
                              .seq = seq++,
                              .count = n,
                              .dtype = HZ_FP32,
                              .send = {.region_id = reg.region_id, .offset = 0, .length = bytes},
                              .recv = {.region_id = reg.region_id,
                                       .offset = 2ull * max_n * sizeof(float),
                                       .length = bytes * nranks}};
    CHECK(coll_call(fd, HZ_OP_ALLGATHER, &ag) == HZ_S_OK, "rank %u ALLGATHER of %u", rank, n);
    for (uint32_t r = 0; r < nranks; r++)
      for (uint32_t i = 0; i < n; i++)
        CHECK(gathered[(size_t)r * n + i] == mixed_gather_value(r, i),
              "rank %u ALLGATHER of %u: rank %u's element %u is %g", rank, n, r, i,
              gathered[(size_t)r * n + i]);
    printf("hz_drvtest: rank %u: ALLGATHER of %u floats correct\n", rank, n);
  }
  struct hz_comm_args destroy = {.comm = comm.comm};
  control_call(fd, HZ_OP_COMM_DESTROY, &destroy, sizeof(destroy), NULL, 0);
  close(fd);
  printf("hz_drvtest: rank %u of %u: every size correct\n", rank, nranks);
  return 0;
}

// A small registered region: send at 0, receive at kFloats.
struct kill_rank {
  int fd;
  float* buf;
  uint32_t region_id;
  uint64_t comm;
  uint64_t seq;
};

enum { kKillFloats = 4096 };

static void kill_rank_init(struct kill_rank* k, const struct hz_comm_uid* uid, uint32_t nranks,
                           uint32_t rank, int keep_fd) {
  if (!keep_fd) {
    k->fd = open_dev();
    hello_or_die(k->fd);
    size_t len = 2 * kKillFloats * sizeof(float);
    k->buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(k->buf != MAP_FAILED, "mmap");
    struct hz_ioc_region reg = {
        .addr = (uintptr_t)k->buf, .len = len, .flags = HZ_REGION_RW_READ | HZ_REGION_RW_WRITE};
    CHECK(ioctl(k->fd, HZ_IOC_REGION_REGISTER, &reg) == 0, "register: %s", strerror(errno));
    k->region_id = reg.region_id;
  }
  struct hz_comm_init_args init = {.uid = *uid, .nranks = nranks, .rank = rank};
  init.constraints.timeout_ms = 150000;
  struct hz_comm_init_result comm;
  struct hz_ioc_submit sub =
      control_call(k->fd, HZ_OP_COMM_INIT, &init, sizeof(init), &comm, sizeof(comm));
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "rank %u of %u COMM_INIT status %s", rank, nranks,
        status_name(sub.status));
  k->comm = comm.comm;
  k->seq = 0;
}

// ALLREDUCE(SUM) of (rank + 1) * i; returns the status, checks the data on OK.
static uint32_t kill_rank_allreduce(struct kill_rank* k, uint32_t nranks, uint32_t rank) {
  for (uint32_t i = 0; i < kKillFloats; i++) {
    k->buf[i] = (float)((rank + 1) * i);
    k->buf[kKillFloats + i] = -1;
  }
  uint64_t bytes = kKillFloats * sizeof(float);
  struct hz_coll_args ar = {.comm = k->comm,
                            .seq = k->seq++,
                            .count = kKillFloats,
                            .dtype = HZ_FP32,
                            .redop = HZ_SUM,
                            .send = {.region_id = k->region_id, .offset = 0, .length = bytes},
                            .recv = {.region_id = k->region_id, .offset = bytes, .length = bytes}};
  uint32_t st = coll_call(k->fd, HZ_OP_ALLREDUCE, &ar);
  if (st == HZ_S_OK) {
    float factor = (float)(nranks * (nranks + 1) / 2);
    for (uint32_t i = 0; i < kKillFloats; i++)
      CHECK(k->buf[kKillFloats + i] == factor * (float)i, "rank %u element %u: %g", rank, i,
            k->buf[kKillFloats + i]);
  }
  return st;
}

static int cmd_victim(const char* uid_hex) {
  struct hz_comm_uid uid;
  parse_uid(uid_hex, &uid);
  struct kill_rank k;
  kill_rank_init(&k, &uid, 3, 2, 0);
  CHECK(kill_rank_allreduce(&k, 3, 2) == HZ_S_OK, "first ALLREDUCE");
  printf("hz_drvtest: rank 2: first ALLREDUCE correct\n");
  printf("HZ-VICTIM-READY\n");
  for (;;) pause();  // the host kills this VM
}

static int cmd_survivor(const char* uid_hex) {
  struct hz_comm_uid uid;
  parse_uid(uid_hex, &uid);
  struct kill_rank k;
  kill_rank_init(&k, &uid, 3, 1, 0);
  CHECK(kill_rank_allreduce(&k, 3, 1) == HZ_S_OK, "first ALLREDUCE");
  printf("hz_drvtest: rank 1: first ALLREDUCE correct\n");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  uint32_t st = kill_rank_allreduce(&k, 3, 1);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("hz_drvtest: rank 1: ALLREDUCE with rank 2's VM gone: status %s after %ld s\n",
         status_name(st), (long)(t1.tv_sec - t0.tv_sec));
  CHECK(st == HZ_S_EABORTED || st == HZ_S_ETIMEDOUT, "status %s", status_name(st));
  struct hz_comm_args destroy = {.comm = k.comm};
  control_call(k.fd, HZ_OP_COMM_DESTROY, &destroy, sizeof(destroy), NULL, 0);

  // The survivors start over: this rank creates the uid, the host joins.
  struct hz_comm_uid_result fresh;
  struct hz_ioc_submit sub = control_call(k.fd, HZ_OP_COMM_UID, NULL, 0, &fresh, sizeof(fresh));
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "COMM_UID status %s", status_name(sub.status));
  printf("HZ-UID2: ");
  for (int i = 0; i < HZ_UID_BYTES; i++) printf("%02x", fresh.uid.bytes[i]);
  printf("\n");
  kill_rank_init(&k, &fresh.uid, 2, 1, 1);
  CHECK(kill_rank_allreduce(&k, 2, 1) == HZ_S_OK, "ALLREDUCE among the survivors");
  printf("hz_drvtest: rank 1: ALLREDUCE among the survivors correct\n");
  destroy.comm = k.comm;
  control_call(k.fd, HZ_OP_COMM_DESTROY, &destroy, sizeof(destroy), NULL, 0);
  close(k.fd);
  return 0;
}

static int cmd_hello(void);

// A request the device holds: COMM_INIT of rank 0 of 2, which nobody joins.
static int cmd_pending(void) {
  int fd = open_dev();
  hello_or_die(fd);
  struct hz_comm_uid_result uid;
  struct hz_ioc_submit sub = control_call(fd, HZ_OP_COMM_UID, NULL, 0, &uid, sizeof(uid));
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "COMM_UID status %s", status_name(sub.status));
  struct hz_comm_init_args init = {.uid = uid.uid, .nranks = 2, .rank = 0};
  init.constraints.timeout_ms = 5000;
  struct hz_comm_init_result r;
  printf("hz_drvtest: COMM_INIT in flight\n");
  sub = control_call(fd, HZ_OP_COMM_INIT, &init, sizeof(init), &r, sizeof(r));
  printf("hz_drvtest: pending COMM_INIT ended: error %d status %s\n", sub.error,
         status_name(sub.status));
  CHECK(sub.error == 0 && sub.status == HZ_S_ETIMEDOUT, "expected ETIMEDOUT");
  close(fd);
  return 0;
}

// COMM_INIT with a uid that another tenant created: the device refuses it
// with EPERM, at once, and the session still works.
static int cmd_refused(const char* uid_hex) {
  struct hz_comm_uid uid;
  parse_uid(uid_hex, &uid);
  int fd = open_dev();
  hello_or_die(fd);
  struct hz_comm_init_args init = {.uid = uid, .nranks = 2, .rank = 1};
  init.constraints.timeout_ms = 60000;
  struct hz_comm_init_result comm;
  struct hz_ioc_submit sub =
      control_call(fd, HZ_OP_COMM_INIT, &init, sizeof(init), &comm, sizeof(comm));
  printf("hz_drvtest: COMM_INIT with another tenant's uid: error %d status %s\n", sub.error,
         status_name(sub.status));
  CHECK(sub.error == 0 && sub.status == HZ_S_EPERM, "not refused with EPERM");
  // The session is intact: its own uid still works.
  struct hz_comm_uid_result own;
  sub = control_call(fd, HZ_OP_COMM_UID, NULL, 0, &own, sizeof(own));
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "COMM_UID after the refusal: %s",
        status_name(sub.status));
  close(fd);
  return cmd_hello();
}

static int cmd_allreduce(void) {
  enum { kFloats = 4096 };
  int fd = open_dev();
  struct hz_ioc_submit sub;
  struct hz_hello_result hres;
  session_hello(fd, &hres);
  CHECK(hres.device_features & (1u << HZ_F_COLLECTIVES), "collectives not granted");
  struct hz_comm_uid_result uid;
  sub = control_call(fd, HZ_OP_COMM_UID, NULL, 0, &uid, sizeof(uid));
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "COMM_UID status %s", status_name(sub.status));
  pid_t child = fork();
  CHECK(child >= 0, "fork");
  if (child == 0) {
    int cfd = open_dev();
    _exit(allreduce_rank(cfd, &uid.uid, 1, kFloats));
  }
  allreduce_rank(fd, &uid.uid, 0, kFloats);
  int wst = 0;
  CHECK(waitpid(child, &wst, 0) == child && WIFEXITED(wst) && WEXITSTATUS(wst) == 0,
        "rank 1 failed (status %d)", wst);
  close(fd);
  return 0;
}

static int cmd_info(void) {
  int fd = open_dev();
  struct hz_ioc_info info;
  CHECK(ioctl(fd, HZ_IOC_INFO, &info) == 0, "HZ_IOC_INFO: %s", strerror(errno));
  struct hz_config cfg;
  memcpy(&cfg, info.config, sizeof(cfg));
  printf("hz_drvtest: info uapi %u request_queues %u features 0x%" PRIx64
         " max_segments %u max_args %u\n",
         info.uapi_version, info.num_request_queues, (uint64_t)info.features, info.max_segments,
         info.max_args_len);
  printf("hz_drvtest: config magic 0x%08x version %u.%u request_queues %u status 0x%x\n", cfg.magic,
         cfg.version_major, cfg.version_minor, cfg.num_request_queues, cfg.status);
  CHECK(info.uapi_version == HZ_UAPI_VERSION, "uapi version %u", info.uapi_version);
  CHECK(cfg.magic == HZ_CONFIG_MAGIC, "config magic 0x%08x", cfg.magic);
  close(fd);
  return 0;
}

// The driver's own HELLO: its result through HZ_IOC_HELLO, and a HELLO from
// user space, which would end every other process's session, refused.
static int cmd_hello(void) {
  int fd = open_dev();
  struct hz_ioc_hello h;
  memset(&h, 0, sizeof(h));
  CHECK(ioctl(fd, HZ_IOC_HELLO, &h) == 0, "HZ_IOC_HELLO: %s", strerror(errno));
  printf("hz_drvtest: driver HELLO error %d status %s result_len %u\n", h.error,
         status_name(h.status), h.result_len);
  CHECK(h.error == 0, "HELLO error %d", h.error);
  CHECK(h.status == HZ_S_OK, "HELLO status %s", status_name(h.status));
  struct hz_hello_result res;
  CHECK(h.result_len == sizeof(res), "HELLO result_len %u", h.result_len);
  memcpy(&res, h.result, sizeof(res));
  printf("hz_drvtest: HELLO version %u.%u request_queues %u features 0x%" PRIx64
         " session 0x%" PRIx64 " max_regions %u event_record_size %u\n",
         res.version_major, res.version_minor, res.num_request_queues,
         (uint64_t)res.device_features, (uint64_t)res.session_id, res.max_regions,
         res.event_record_size);
  CHECK(res.version_major == HZ_VERSION_MAJOR, "device version %u", res.version_major);

  struct hz_ioc_submit sub;
  struct hz_hello_args args;
  struct hz_ioc_seg seg;
  struct hz_hello_result again;
  hello_submit(&sub, &args, &seg, &again);
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) < 0 && errno == EPERM, "HELLO from user space not refused");
  sub.flags = HZ_SUBMIT_F_ASYNC;
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) < 0 && errno == EPERM, "async HELLO not refused");
  // A second file shares the session: same id.
  int fd2 = open_dev();
  memset(&h, 0, sizeof(h));
  CHECK(ioctl(fd2, HZ_IOC_HELLO, &h) == 0 && h.status == HZ_S_OK, "second file HZ_IOC_HELLO");
  memcpy(&again, h.result, sizeof(again));
  CHECK(again.session_id == res.session_id, "a second open started a new session");
  close(fd2);
  close(fd);
  return 0;
}

static int cmd_async(void) {
  enum { kN = 8 };
  int fd = open_dev();
  struct hz_ioc_submit sub[kN];
  struct hz_ioc_seg seg[kN];
  struct hz_comm_uid_result res[kN];
  static const struct hz_comm_uid zero_uid;
  int seen[kN] = {0};
  for (int i = 0; i < kN; i++) {
    uid_submit(&sub[i], &seg[i], &res[i]);
    sub[i].flags = HZ_SUBMIT_F_ASYNC;
    sub[i].user_data = 1000 + i;
    CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub[i]) == 0, "async submit %d: %s", i, strerror(errno));
  }
  int done = 0;
  while (done < kN) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    CHECK(poll(&p, 1, 20000) == 1 && (p.revents & POLLIN), "poll: %d revents 0x%x", done,
          p.revents);
    struct hz_record rec[4];
    ssize_t n = read(fd, rec, sizeof(rec));
    CHECK(n > 0 && n % sizeof(rec[0]) == 0, "read returned %zd", n);
    for (size_t j = 0; j < (size_t)n / sizeof(rec[0]); j++) {
      CHECK(rec[j].type == HZ_REC_COMPLETION, "record type %u", rec[j].type);
      struct hz_ioc_completion* c = &rec[j].completion;
      uint64_t i = c->user_data - 1000;
      CHECK(i < kN && !seen[i], "unexpected user_data %" PRIu64, (uint64_t)c->user_data);
      CHECK(c->token == sub[i].token, "token %" PRIu64 " != %" PRIu64, (uint64_t)c->token,
            (uint64_t)sub[i].token);
      CHECK(c->error == 0 && c->status == HZ_S_OK, "completion %" PRIu64 " error %d status %s", i,
            c->error, status_name(c->status));
      CHECK(memcmp(&res[i].uid, &zero_uid, sizeof(zero_uid)) != 0, "result %" PRIu64 " not written",
            i);
      seen[i] = 1;
      done++;
    }
  }
  // Nothing is left to read.
  CHECK(fcntl(fd, F_SETFL, O_NONBLOCK) == 0, "fcntl");
  struct hz_record extra;
  CHECK(read(fd, &extra, sizeof(extra)) < 0 && errno == EAGAIN, "extra record");
  printf("hz_drvtest: %d async COMM_UIDs completed\n", kN);
  close(fd);
  return 0;
}

// The process's locked memory in KiB (VmLck, where pinned regions are charged).
static long vm_locked_kib(void) {
  FILE* f = fopen("/proc/self/status", "r");
  CHECK(f != NULL, "open /proc/self/status");
  char line[256];
  long kib = -1;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "VmLck: %ld kB", &kib) == 1) break;
  fclose(f);
  CHECK(kib >= 0, "no VmLck in /proc/self/status");
  return kib;
}

static int cmd_region(void) {
  int fd = open_dev();
  // Small enough that its extents fit in one request however fragmented
  // guest memory is.
  size_t len = 64 << 10;
  void* buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(buf != MAP_FAILED, "mmap");
  memset(buf, 0x5a, len);
  struct hz_ioc_region reg = {
      .addr = (uintptr_t)buf, .len = len, .flags = HZ_REGION_RW_READ | HZ_REGION_RW_WRITE};
  long locked_before = vm_locked_kib();
  CHECK(ioctl(fd, HZ_IOC_REGION_REGISTER, &reg) == 0, "register: %s", strerror(errno));
  long locked = vm_locked_kib();
  printf("hz_drvtest: region id %u extents %u, VmLck %ld -> %ld kB\n", reg.region_id,
         reg.num_extents, locked_before, locked);
  CHECK(locked - locked_before == (long)(len >> 10), "region not charged to VmLck");
  CHECK(reg.region_id != HZ_REGION_NONE && reg.region_id != HZ_REGION_INLINE, "region id");
  CHECK(reg.num_extents >= 1 && reg.num_extents <= len / 4096, "extents %u", reg.num_extents);
  uint32_t id = reg.region_id;
  CHECK(ioctl(fd, HZ_IOC_REGION_UNREGISTER, &id) == 0, "unregister: %s", strerror(errno));
  CHECK(vm_locked_kib() == locked_before, "VmLck not given back by unregister");
  CHECK(ioctl(fd, HZ_IOC_REGION_UNREGISTER, &id) < 0 && errno == ENOENT, "double unregister");

  struct hz_ioc_region bad = {.addr = (uintptr_t)buf + 1, .len = 4096, .flags = HZ_REGION_RW_READ};
  CHECK(ioctl(fd, HZ_IOC_REGION_REGISTER, &bad) < 0 && errno == EINVAL, "misaligned region");
  bad.addr = (uintptr_t)buf;
  bad.flags = 0;
  CHECK(ioctl(fd, HZ_IOC_REGION_REGISTER, &bad) < 0 && errno == EINVAL, "region without access");

  // Pins are charged against RLIMIT_MEMLOCK once CAP_IPC_LOCK is gone.
  struct rlimit lim = {.rlim_cur = 16 << 10, .rlim_max = RLIM_INFINITY};
  CHECK(setrlimit(RLIMIT_MEMLOCK, &lim) == 0, "setrlimit");
  pid_t child = fork();
  CHECK(child >= 0, "fork");
  if (child == 0) {
    // Drop every capability (the guest runs as root), then try.
    struct {
      uint32_t version;
      int pid;
    } hdr = {0x20080522, 0};
    uint32_t data[6] = {0};
    if (syscall(SYS_capset, &hdr, data) != 0) _exit(3);
    int r = ioctl(fd, HZ_IOC_REGION_REGISTER, &reg);
    _exit(r < 0 && errno == ENOMEM ? 0 : 4);
  }
  int wst = 0;
  CHECK(waitpid(child, &wst, 0) == child && WIFEXITED(wst) && WEXITSTATUS(wst) == 0,
        "over-limit region not refused with ENOMEM (child status %d)", wst);

  // A process that exits with a region registered: exit closes its file
  // after its address space is gone, and the region is still released.
  pid_t quitter = fork();
  CHECK(quitter >= 0, "fork");
  if (quitter == 0) {
    int cfd = open(g_dev, O_RDWR);
    struct hz_ioc_region creg = {
        .addr = (uintptr_t)buf, .len = len, .flags = HZ_REGION_RW_READ | HZ_REGION_RW_WRITE};
    _exit(cfd >= 0 && ioctl(cfd, HZ_IOC_REGION_REGISTER, &creg) == 0 ? 0 : 5);
  }
  CHECK(waitpid(quitter, &wst, 0) == quitter && WIFEXITED(wst) && WEXITSTATUS(wst) == 0,
        "child region registration (status %d)", wst);

  // Left registered on purpose: close() must release it.
  CHECK(ioctl(fd, HZ_IOC_REGION_REGISTER, &reg) == 0, "register again: %s", strerror(errno));
  close(fd);
  munmap(buf, len);
  printf("hz_drvtest: region checks passed\n");
  return 0;
}

static int cmd_hostile(void) {
  int fd = open_dev();
  struct hz_ioc_submit sub;
  struct hz_hello_args args;
  struct hz_ioc_seg seg;
  struct hz_comm_uid_result res;

  uid_submit(&sub, &seg, &res);
  sub.flags = 0x80;
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) < 0 && errno == EINVAL, "unknown flag");

  uid_submit(&sub, &seg, &res);
  sub.opcode = HZ_OP_REGION_REGISTER;
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) < 0 && errno == EPERM, "region opcode via submit");

  struct hz_hello_result hres;
  hello_submit(&sub, &args, &seg, &hres);
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) < 0 && errno == EPERM, "HELLO via submit");

  uid_submit(&sub, &seg, &res);
  sub.queue = 1000;
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) < 0 && errno == EINVAL, "bad queue");

  uid_submit(&sub, &seg, &res);
  sub.args_ptr = (uintptr_t)&args;
  sub.args_len = 1u << 30;
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) < 0 && errno == E2BIG, "huge args");

  uid_submit(&sub, &seg, &res);
  sub.num_segs = 100000;
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) < 0 && errno == E2BIG, "too many segments");

  uid_submit(&sub, &seg, &res);
  seg.addr = 0x10;  // unmapped
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) < 0 && errno == EFAULT, "unmapped buffer");

  uid_submit(&sub, &seg, &res);
  seg.addr = UINT64_MAX - 8;
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) < 0 && errno == EINVAL, "wrapping buffer");

  struct hz_ioc_seg two[2] = {{.addr = (uintptr_t)&res, .len = 8, .flags = HZ_SEG_F_WRITE},
                              {.addr = (uintptr_t)&args, .len = 8, .flags = 0}};
  uid_submit(&sub, &seg, &res);
  sub.num_segs = 2;
  sub.segs_ptr = (uintptr_t)two;
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) < 0 && errno == EINVAL, "readable after writable");

  struct hz_record rec;
  CHECK(read(fd, &rec, 8) < 0 && errno == EINVAL, "short read buffer");
  CHECK(ioctl(fd, _IO(HZ_IOC_MAGIC, 0x7f)) < 0 && errno == ENOTTY, "unknown ioctl");

  // The device still works afterwards.
  uid_submit(&sub, &seg, &res);
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) == 0 && sub.status == HZ_S_OK,
        "COMM_UID after hostile input");
  close(fd);
  printf("hz_drvtest: hostile input refused cleanly\n");
  return 0;
}

static void write_sysfs(const char* path, const char* value) {
  int f = open(path, O_WRONLY);
  CHECK(f >= 0, "open %s: %s", path, strerror(errno));
  CHECK(write(f, value, strlen(value)) == (ssize_t)strlen(value), "write %s to %s: %s", value, path,
        strerror(errno));
  close(f);
}

// The device goes away while a file is open, with a registered region and a
// completion not yet read: by driver unbind, or (pci) by removing the PCI
// function as a hot unplug would. The file must report -ENODEV, drain what
// was queued and close cleanly; the device then comes back (rebind or PCI
// rescan) and works.
static int cmd_unplug(int pci) {
  int fd = open_dev();
  char link[256], vpath[320], rpath[PATH_MAX + 16], pcidev[PATH_MAX];
  ssize_t n = readlink("/sys/class/misc/harmonaize0/device", link, sizeof(link) - 1);
  CHECK(n > 0, "readlink device: %s", strerror(errno));
  link[n] = 0;
  const char* name = strrchr(link, '/') ? strrchr(link, '/') + 1 : link;
  snprintf(vpath, sizeof(vpath), "/sys/bus/virtio/devices/%s/..", name);
  CHECK(realpath(vpath, pcidev) != NULL, "realpath %s: %s", vpath, strerror(errno));

  size_t len = 16 << 10;
  void* buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(buf != MAP_FAILED, "mmap");
  memset(buf, 1, len);
  struct hz_ioc_region reg = {.addr = (uintptr_t)buf, .len = len, .flags = HZ_REGION_RW_READ};
  CHECK(ioctl(fd, HZ_IOC_REGION_REGISTER, &reg) == 0, "register: %s", strerror(errno));

  // A completion waiting to be read must survive the removal.
  struct hz_ioc_submit sub;
  struct hz_ioc_seg seg;
  struct hz_comm_uid_result res;
  uid_submit(&sub, &seg, &res);
  sub.flags = HZ_SUBMIT_F_ASYNC;
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) == 0, "async submit: %s", strerror(errno));

  if (pci) {
    snprintf(rpath, sizeof(rpath), "%s/remove", pcidev);
    write_sysfs(rpath, "1");
    printf("hz_drvtest: removed PCI function %s with the file open\n", strrchr(pcidev, '/') + 1);
  } else {
    write_sysfs("/sys/bus/virtio/drivers/harmonaize/unbind", name);
    printf("hz_drvtest: unbound %s with the file open\n", name);
  }

  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) < 0 && errno == ENODEV, "submit after removal: %s",
        strerror(errno));
  struct pollfd p = {.fd = fd, .events = POLLIN};
  CHECK(poll(&p, 1, 1000) == 1 && (p.revents & (POLLHUP | POLLERR)), "poll revents 0x%x",
        p.revents);
  struct hz_record rec;
  n = read(fd, &rec, sizeof(rec));
  CHECK(n == sizeof(rec) && rec.type == HZ_REC_COMPLETION && rec.completion.token == sub.token,
        "completion after removal: n %zd", n);
  printf("hz_drvtest: completion after removal: error %d status %s\n", rec.completion.error,
         status_name(rec.completion.status));
  CHECK(read(fd, &rec, sizeof(rec)) < 0 && errno == ENODEV, "read after drain");
  uint32_t id = reg.region_id;
  CHECK(ioctl(fd, HZ_IOC_REGION_UNREGISTER, &id) < 0 && errno == ENODEV,
        "unregister after removal");
  CHECK(driver_counter("pinned_pages") >= 4, "the open file's region lost its pins early");
  close(fd);
  munmap(buf, len);
  expect_no_leaks("after close on a removed device");

  if (pci) {
    write_sysfs("/sys/bus/pci/rescan", "1");
    printf("hz_drvtest: rescanned the PCI bus\n");
  } else {
    write_sysfs("/sys/bus/virtio/drivers/harmonaize/bind", name);
    printf("hz_drvtest: rebound %s\n", name);
  }
  for (int i = 0; i < 100 && access(g_dev, F_OK) != 0; i++) usleep(100 * 1000);
  return cmd_hello();
}

// One FP32 ALLREDUCE(SUM) on request queue 0 over comm, send at offset 0 and
// receive at bytes of region; returns -errno when the driver refused the
// submit, else the device status.
static int owner_allreduce(int fd, uint64_t comm, uint64_t seq, uint32_t region, uint32_t n) {
  uint64_t bytes = (uint64_t)n * sizeof(float);
  struct hz_coll_args args = {.comm = comm,
                              .seq = seq,
                              .count = n,
                              .dtype = HZ_FP32,
                              .redop = HZ_SUM,
                              .send = {.region_id = region, .offset = 0, .length = bytes},
                              .recv = {.region_id = region, .offset = bytes, .length = bytes}};
  struct hz_ioc_submit coll = {.opcode = HZ_OP_ALLREDUCE,
                               .queue = 0,
                               .args_ptr = (uintptr_t)&args,
                               .args_len = sizeof(args)};
  if (ioctl(fd, HZ_IOC_SUBMIT, &coll) != 0) return -errno;
  CHECK(coll.error == 0, "ALLREDUCE error %d", coll.error);
  return (int)coll.status;
}

// A submit from another file naming what file 1 owns: the driver refuses it.
static void expect_refused(int fd, struct hz_ioc_submit* sub, int want, const char* what) {
  int rc = ioctl(fd, HZ_IOC_SUBMIT, sub);
  printf("hz_drvtest: second file: %s: %s (status %s)\n", what,
         rc == 0 ? "submitted" : strerror(errno), rc == 0 ? status_name(sub->status) : "-");
  CHECK(rc < 0 && errno == want, "second file: %s not refused with %s", what, strerror(want));
}

// What the second file tries with file 1's region and communicator.
static int owner_intruder(uint32_t region, uint64_t comm, uint32_t n) {
  int fd = open_dev();
  uint64_t bytes = (uint64_t)n * sizeof(float);
  struct hz_coll_args args = {.comm = comm,
                              .count = n,
                              .dtype = HZ_FP32,
                              .redop = HZ_SUM,
                              .send = {.region_id = region, .offset = 0, .length = bytes},
                              .recv = {.region_id = region, .offset = bytes, .length = bytes}};
  struct hz_ioc_submit sub = {.opcode = HZ_OP_ALLREDUCE,
                              .queue = 0,
                              .args_ptr = (uintptr_t)&args,
                              .args_len = sizeof(args)};
  expect_refused(fd, &sub, ENOENT, "ALLREDUCE on file 1's communicator and region");

  // Its own region, file 1's communicator.
  size_t len = 2 * bytes;
  void* mine = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(mine != MAP_FAILED, "mmap");
  struct hz_ioc_region reg = {
      .addr = (uintptr_t)mine, .len = len, .flags = HZ_REGION_RW_READ | HZ_REGION_RW_WRITE};
  CHECK(ioctl(fd, HZ_IOC_REGION_REGISTER, &reg) == 0, "second file register: %s", strerror(errno));
  args.send.region_id = reg.region_id;
  args.recv.region_id = reg.region_id;
  expect_refused(fd, &sub, ENOENT, "ALLREDUCE on file 1's communicator");
  struct hz_comm_args destroy = {.comm = comm};
  struct hz_ioc_submit ds = {.opcode = HZ_OP_COMM_DESTROY,
                             .queue = HZ_QUEUE_CONTROL,
                             .args_ptr = (uintptr_t)&destroy,
                             .args_len = sizeof(destroy)};
  expect_refused(fd, &ds, ENOENT, "COMM_DESTROY of file 1's communicator");
  ds.opcode = HZ_OP_COMM_ABORT;
  expect_refused(fd, &ds, ENOENT, "COMM_ABORT of file 1's communicator");

  // A checkpoint of file 1's region: the region is in the slice table.
  struct hz_ckpt_save_args save = {.stream = 1, .num_slices = 1, .step = 1};
  struct hz_slice slice = {.region_id = region, .offset = 0, .length = bytes};
  uint8_t result[16];
  struct hz_ioc_seg segs[2] = {
      {.addr = (uintptr_t)&slice, .len = sizeof(slice)},
      {.addr = (uintptr_t)result, .len = sizeof(result), .flags = HZ_SEG_F_WRITE}};
  struct hz_ioc_submit cs = {.opcode = HZ_OP_CKPT_SAVE,
                             .queue = 0,
                             .args_ptr = (uintptr_t)&save,
                             .args_len = sizeof(save),
                             .num_segs = 2,
                             .segs_ptr = (uintptr_t)segs};
  expect_refused(fd, &cs, ENOENT, "CKPT_SAVE of file 1's region");
  struct hz_ckpt_restore_args restore = {.stream = 1, .num_slices = 1, .step = HZ_STEP_LATEST};
  cs.opcode = HZ_OP_CKPT_RESTORE;
  cs.args_ptr = (uintptr_t)&restore;
  cs.args_len = sizeof(restore);
  expect_refused(fd, &cs, ENOENT, "CKPT_RESTORE into file 1's region");

  // Events it does not receive, it cannot acknowledge.
  struct hz_event_ack_args ack = {.seq = 1};
  struct hz_ioc_submit as = {.opcode = HZ_OP_EVENT_ACK,
                             .queue = HZ_QUEUE_CONTROL,
                             .args_ptr = (uintptr_t)&ack,
                             .args_len = sizeof(ack)};
  expect_refused(fd, &as, EPERM, "EVENT_ACK without events enabled");
  close(fd);
  return 0;
}

// Two files of one session, as a training job and an admin's `hz status`:
// file 1 registers a region and makes a one-rank communicator; a second
// process opens the device and tries a HELLO of its own; file 1's ALLREDUCE
// still works. Then a second file names file 1's region and communicator in
// every kind of request that carries them, and is refused each time.
static int cmd_owner(void) {
  enum { kFloats = 1024 };
  int fd = open_dev();
  struct hz_hello_result hres;
  session_hello(fd, &hres);
  size_t bytes = kFloats * sizeof(float);
  float* buf = mmap(NULL, 2 * bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(buf != MAP_FAILED, "mmap");
  struct hz_ioc_region reg = {
      .addr = (uintptr_t)buf, .len = 2 * bytes, .flags = HZ_REGION_RW_READ | HZ_REGION_RW_WRITE};
  CHECK(ioctl(fd, HZ_IOC_REGION_REGISTER, &reg) == 0, "register: %s", strerror(errno));
  struct hz_comm_uid_result uid;
  struct hz_ioc_submit sub = control_call(fd, HZ_OP_COMM_UID, NULL, 0, &uid, sizeof(uid));
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "COMM_UID status %s", status_name(sub.status));
  struct hz_comm_init_args init = {.uid = uid.uid, .nranks = 1, .rank = 0};
  struct hz_comm_init_result comm;
  sub = control_call(fd, HZ_OP_COMM_INIT, &init, sizeof(init), &comm, sizeof(comm));
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "COMM_INIT status %s", status_name(sub.status));
  for (uint32_t i = 0; i < kFloats; i++) buf[i] = (float)i;
  int st = owner_allreduce(fd, comm.comm, 0, reg.region_id, kFloats);
  CHECK(st == HZ_S_OK, "first ALLREDUCE: %d", st);

  pid_t child = fork();
  CHECK(child >= 0, "fork");
  if (child == 0) {
    int fd2 = open_dev();
    struct hz_ioc_submit hs;
    struct hz_hello_args hargs;
    struct hz_ioc_seg hseg;
    struct hz_hello_result hr;
    hello_submit(&hs, &hargs, &hseg, &hr);
    int rc = ioctl(fd2, HZ_IOC_SUBMIT, &hs);
    printf("hz_drvtest: second process's HELLO: %s\n",
           rc == 0 ? status_name(hs.status) : strerror(errno));
    close(fd2);
    _exit(0);
  }
  int wst = 0;
  CHECK(waitpid(child, &wst, 0) == child && WIFEXITED(wst) && WEXITSTATUS(wst) == 0,
        "second process (status %d)", wst);
  for (uint32_t i = 0; i < kFloats; i++) buf[kFloats + i] = -1;
  st = owner_allreduce(fd, comm.comm, 1, reg.region_id, kFloats);
  printf("hz_drvtest: file 1's ALLREDUCE after another process opened the device: %s\n",
         st < 0 ? strerror(-st) : status_name((uint32_t)st));
  CHECK(st == HZ_S_OK, "file 1's ALLREDUCE failed after another process opened the device");
  for (uint32_t i = 0; i < kFloats; i++)
    CHECK(buf[kFloats + i] == (float)i, "element %u: %g", i, buf[kFloats + i]);

  child = fork();
  CHECK(child >= 0, "fork");
  if (child == 0) _exit(owner_intruder(reg.region_id, comm.comm, kFloats));
  CHECK(waitpid(child, &wst, 0) == child && WIFEXITED(wst) && WEXITSTATUS(wst) == 0,
        "second file's checks (status %d)", wst);

  // Nothing the second file tried touched file 1's session state.
  for (uint32_t i = 0; i < kFloats; i++) buf[kFloats + i] = -1;
  st = owner_allreduce(fd, comm.comm, 2, reg.region_id, kFloats);
  CHECK(st == HZ_S_OK, "file 1's ALLREDUCE after the refused requests: %d", st);
  struct hz_comm_args destroy = {.comm = comm.comm};
  sub = control_call(fd, HZ_OP_COMM_DESTROY, &destroy, sizeof(destroy), NULL, 0);
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "own COMM_DESTROY status %s",
        status_name(sub.status));
  close(fd);
  printf("hz_drvtest: regions and communicators belong to their file\n");
  return 0;
}

// Drops every capability (the guest runs as root) so that RLIMIT_MEMLOCK applies.
static int drop_capabilities(void) {
  struct {
    uint32_t version;
    int pid;
  } hdr = {0x20080522, 0};
  uint32_t data[6] = {0};
  return (int)syscall(SYS_capset, &hdr, data);
}

// One COMM_UID whose result space is len bytes of buf: returns 0 or errno.
static int big_submit(int fd, void* buf, size_t len) {
  struct hz_ioc_seg seg = {.addr = (uintptr_t)buf, .len = len, .flags = HZ_SEG_F_WRITE};
  struct hz_ioc_submit sub = {.opcode = HZ_OP_COMM_UID,
                              .queue = HZ_QUEUE_CONTROL,
                              .num_segs = 1,
                              .segs_ptr = (uintptr_t)&seg};
  if (ioctl(fd, HZ_IOC_SUBMIT, &sub) != 0) return errno;
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "big submit status %s", status_name(sub.status));
  return 0;
}

static int memlock_child(void) {
  enum { kLen = 128 << 10 };
  int fd = open_dev();
  struct hz_hello_result hres;
  session_hello(fd, &hres);
  void* buf = mmap(NULL, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(buf != MAP_FAILED, "mmap");
  memset(buf, 0, kLen);
  // Without CAP_SYS_RESOURCE only the soft limit can move, up to the hard one.
  struct rlimit lim = {.rlim_cur = 32 << 10, .rlim_max = 1 << 20};
  CHECK(setrlimit(RLIMIT_MEMLOCK, &lim) == 0, "setrlimit: %s", strerror(errno));
  CHECK(drop_capabilities() == 0, "capset");
  int err = big_submit(fd, buf, kLen);
  printf("hz_drvtest: %d KiB submit under a 32 KiB RLIMIT_MEMLOCK: %s\n", kLen >> 10,
         err ? strerror(err) : "accepted");
  CHECK(err == ENOMEM, "a submit beyond RLIMIT_MEMLOCK was not refused with ENOMEM");
  lim.rlim_cur = 1 << 20;
  CHECK(setrlimit(RLIMIT_MEMLOCK, &lim) == 0, "raise setrlimit: %s", strerror(errno));
  err = big_submit(fd, buf, kLen);
  printf("hz_drvtest: the same submit under a 1 MiB limit: %s\n", err ? strerror(err) : "accepted");
  CHECK(err == 0, "the submit failed within the limit");
  CHECK(vm_locked_kib() == 0, "the request's pins were not uncharged (VmLck %ld kB)",
        vm_locked_kib());
  close(fd);
  return 0;
}

// Per-request pins count against RLIMIT_MEMLOCK like regions do.
static int cmd_memlock(void) {
  pid_t child = fork();
  CHECK(child >= 0, "fork");
  if (child == 0) _exit(memlock_child());
  int wst = 0;
  CHECK(waitpid(child, &wst, 0) == child && WIFEXITED(wst) && WEXITSTATUS(wst) == 0,
        "memlock checks (status %d)", wst);
  return 0;
}

// Against vm-hostile-backend: the device goes silent (mode 8 of its
// arguments) with regions registered and a request in flight. close()
// returns anyway; what the device never released stays pinned until the
// device is removed, which releases it.
static int cmd_silentclose(void) {
  enum { kRegions = 8 };
  int fd = open_dev();
  void* buf =
      mmap(NULL, kRegions * 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(buf != MAP_FAILED, "mmap");
  memset(buf, 1, kRegions * 4096);
  for (int i = 0; i < kRegions; i++) {
    struct hz_ioc_region reg = {
        .addr = (uintptr_t)buf + i * 4096, .len = 4096, .flags = HZ_REGION_RW_READ};
    CHECK(ioctl(fd, HZ_IOC_REGION_REGISTER, &reg) == 0, "register %d: %s", i, strerror(errno));
  }
  uint32_t mode = 8;
  uint8_t result[64];
  struct hz_ioc_submit sub =
      control_call(fd, HZ_OP_TOPOLOGY_GET, &mode, sizeof(mode), result, sizeof(result));
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "silence trigger");
  mode = 0;
  struct hz_ioc_seg seg = {
      .addr = (uintptr_t)result, .len = sizeof(result), .flags = HZ_SEG_F_WRITE};
  sub = (struct hz_ioc_submit){.opcode = HZ_OP_TOPOLOGY_GET,
                               .queue = HZ_QUEUE_CONTROL,
                               .flags = HZ_SUBMIT_F_ASYNC,
                               .args_ptr = (uintptr_t)&mode,
                               .args_len = sizeof(mode),
                               .num_segs = 1,
                               .segs_ptr = (uintptr_t)&seg};
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) == 0, "async submit: %s", strerror(errno));
  printf("hz_drvtest: the device is silent; closing a file with %d regions\n", kRegions);
  close(fd);
  long pinned = driver_counter("pinned_pages");
  printf("hz_drvtest: close returned; pinned_pages %ld\n", pinned);
  CHECK(pinned >= kRegions, "pages the device never released were unpinned");

  char link[256];
  ssize_t n = readlink("/sys/class/misc/harmonaize0/device", link, sizeof(link) - 1);
  CHECK(n > 0, "readlink device: %s", strerror(errno));
  link[n] = 0;
  write_sysfs("/sys/bus/virtio/drivers/harmonaize/unbind",
              strrchr(link, '/') ? strrchr(link, '/') + 1 : link);
  expect_no_leaks("after the silent device was removed");
  munmap(buf, kRegions * 4096);
  return 0;
}

// A blocking request with readable data and one result buffer on queue q.
static struct hz_ioc_submit data_call(int fd, uint16_t q, uint16_t opcode, const void* args,
                                      uint32_t args_len, const void* data, uint32_t data_len,
                                      void* result, uint32_t result_len) {
  struct hz_ioc_seg segs[2];
  uint32_t n = 0;
  if (data_len) segs[n++] = (struct hz_ioc_seg){.addr = (uintptr_t)data, .len = data_len};
  if (result_len)
    segs[n++] =
        (struct hz_ioc_seg){.addr = (uintptr_t)result, .len = result_len, .flags = HZ_SEG_F_WRITE};
  struct hz_ioc_submit sub = {.opcode = opcode,
                              .queue = q,
                              .args_ptr = (uintptr_t)args,
                              .args_len = args_len,
                              .num_segs = n,
                              .segs_ptr = (uintptr_t)segs};
  CHECK(ioctl(fd, HZ_IOC_SUBMIT, &sub) == 0, "submit opcode 0x%x: %s", opcode, strerror(errno));
  CHECK(sub.error == 0, "opcode 0x%x error %d", opcode, sub.error);
  return sub;
}

// Checkpoint: a policy, a save of a registered slice with metadata, the
// slice scribbled over, a restore that brings back every byte.
static void families_checkpoint(int fd) {
  enum { kLen = 64 << 10, kStream = 7 };
  uint8_t* buf = mmap(NULL, kLen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(buf != MAP_FAILED, "mmap");
  for (uint32_t i = 0; i < kLen; i++) buf[i] = (uint8_t)(i * 131 + 7);
  struct hz_ioc_region reg = {
      .addr = (uintptr_t)buf, .len = kLen, .flags = HZ_REGION_RW_READ | HZ_REGION_RW_WRITE};
  CHECK(ioctl(fd, HZ_IOC_REGION_REGISTER, &reg) == 0, "register: %s", strerror(errno));
  struct hz_ckpt_policy_args pol = {.stream = kStream,
                                    .retention = 1,
                                    .tier = HZ_TIER_HOST_MEMORY,
                                    .stall_budget_ms = 10000,
                                    .rpo_s = 60};
  struct hz_ioc_submit sub = control_call(fd, HZ_OP_CKPT_POLICY, &pol, sizeof(pol), NULL, 0);
  CHECK(sub.error == 0 && sub.status == HZ_S_OK, "CKPT_POLICY status %s", status_name(sub.status));

  static const char meta[] = "vm-checkpoint-meta";
  struct {
    struct hz_slice slice;
    char meta[sizeof(meta)];
  } __attribute__((packed)) data;
  memset(&data, 0, sizeof(data));
  data.slice = (struct hz_slice){.region_id = reg.region_id, .offset = 4096, .length = kLen - 8192};
  memcpy(data.meta, meta, sizeof(meta));
  struct hz_ckpt_save_args save = {
      .stream = kStream, .num_slices = 1, .step = 42, .meta_len = sizeof(meta)};
  struct hz_ckpt_save_result saved;
  sub = data_call(fd, 0, HZ_OP_CKPT_SAVE, &save, sizeof(save), &data, sizeof(data), &saved,
                  sizeof(saved));
  printf("hz_drvtest: CKPT_SAVE status %s step %" PRIu64 " state %u\n", status_name(sub.status),
         (uint64_t)saved.step, saved.state);
  CHECK(sub.status == HZ_S_OK && saved.step == 42, "CKPT_SAVE");

  uint8_t* want = malloc(kLen);
  CHECK(want != NULL, "malloc");
  memcpy(want, buf, kLen);
  memset(buf + 4096, 0xee, kLen - 8192);
  struct hz_ckpt_restore_args restore = {
      .stream = kStream, .num_slices = 1, .step = HZ_STEP_LATEST};
  struct {
    struct hz_ckpt_restore_result r;
    char meta[64];
  } out;
  memset(&out, 0, sizeof(out));
  sub = data_call(fd, 0, HZ_OP_CKPT_RESTORE, &restore, sizeof(restore), &data.slice,
                  sizeof(data.slice), &out, sizeof(out));
  printf("hz_drvtest: CKPT_RESTORE status %s step %" PRIu64 " bytes %" PRIu64 " meta_len %u\n",
         status_name(sub.status), (uint64_t)out.r.step, (uint64_t)out.r.bytes, out.r.meta_len);
  CHECK(sub.status == HZ_S_OK && out.r.step == 42 && out.r.bytes == kLen - 8192, "CKPT_RESTORE");
  CHECK(out.r.meta_len == sizeof(meta) && memcmp(out.meta, meta, sizeof(meta)) == 0, "metadata");
  CHECK(memcmp(buf, want, kLen) == 0, "the restored bytes differ from the saved ones");
  printf("hz_drvtest: checkpoint restored bit-exact (%d bytes)\n", kLen - 8192);
  free(want);
}

// Topology summary, batch-size hints, and a negotiation declined.
static void families_scheduler(int fd) {
  uint8_t topo[4096];
  struct hz_ioc_submit sub = control_call(fd, HZ_OP_TOPOLOGY_GET, NULL, 0, topo, sizeof(topo));
  struct hz_topo_header th;
  memcpy(&th, topo, sizeof(th));
  printf("hz_drvtest: TOPOLOGY_GET status %s version %u devices %u groups %u hosts %u\n",
         status_name(sub.status), th.version, th.num_devices, th.num_groups, th.num_hosts);
  CHECK(sub.status == HZ_S_OK && sub.result_len >= sizeof(th) && th.version == 1, "TOPOLOGY_GET");

  struct hz_hint_declare_args hint = {.min_batch = 16, .max_batch = 256, .step = 16};
  struct hz_hint_declare_result hres;
  sub = control_call(fd, HZ_OP_HINT_DECLARE, &hint, sizeof(hint), &hres, sizeof(hres));
  printf("hz_drvtest: HINT_DECLARE status %s suggested %u\n", status_name(sub.status),
         hres.suggested);
  CHECK(sub.status == HZ_S_OK && hres.suggested >= 16 && hres.suggested <= 256 &&
            (hres.suggested - 16) % 16 == 0,
        "HINT_DECLARE");

  time_t now = time(NULL);
  struct hz_neg_request req = {.kind = HZ_DEV_GPU,
                               .count = 1,
                               .locality = HZ_LOC_ANY,
                               .priority_class = HZ_PRIO_NORMAL,
                               .earliest_start_s = (uint64_t)now,
                               .latest_start_s = (uint64_t)now + 60,
                               .duration_s = 600};
  struct {
    struct hz_neg_result r;
    struct hz_neg_offer offers[HZ_NEG_MAX_OFFERS];
  } neg;
  memset(&neg, 0, sizeof(neg));
  sub = control_call(fd, HZ_OP_NEG_REQUEST, &req, sizeof(req), &neg, sizeof(neg));
  printf("hz_drvtest: NEG_REQUEST status %s negotiation %" PRIu64 " offers %u round %u\n",
         status_name(sub.status), (uint64_t)neg.r.negotiation_id, neg.r.num_offers, neg.r.round);
  CHECK(sub.status == HZ_S_OK && neg.r.negotiation_id != 0 && neg.r.num_offers >= 1, "NEG_REQUEST");
  CHECK(neg.offers[0].offer_id != 0 && neg.offers[0].count == 1, "the offer");
  struct hz_neg_decline_args decline = {.negotiation_id = neg.r.negotiation_id};
  sub = control_call(fd, HZ_OP_NEG_DECLINE, &decline, sizeof(decline), NULL, 0);
  CHECK(sub.status == HZ_S_OK, "NEG_DECLINE status %s", status_name(sub.status));
  printf("hz_drvtest: offer %" PRIu64 " declined\n", (uint64_t)neg.offers[0].offer_id);
}

// Every opcode family the collectives tests leave out, through the driver.
static int cmd_families(void) {
  int fd = open_dev();
  struct hz_hello_result hres;
  session_hello(fd, &hres);
  uint64_t need = (1ull << HZ_F_CHECKPOINT) | (1ull << HZ_F_NEGOTIATION) | (1ull << HZ_F_TOPOLOGY) |
                  (1ull << HZ_F_HINTS);
  CHECK((hres.device_features & need) == need, "features 0x%" PRIx64 " granted",
        (uint64_t)hres.device_features);
  families_checkpoint(fd);
  families_scheduler(fd);
  close(fd);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2) {
    fprintf(stderr, "usage: hz_drvtest COMMAND [DEV] (commands: see the top of hz_drvtest.c)\n");
    return 2;
  }
  if (argc > 2) g_dev = argv[2];
  const char* cmd = argv[1];
  if (!strcmp(cmd, "info")) return cmd_info();
  if (!strcmp(cmd, "hello")) return cmd_hello();
  if (!strcmp(cmd, "async")) return cmd_async();
  if (!strcmp(cmd, "region")) return cmd_region();
  if (!strcmp(cmd, "hostile")) return cmd_hostile();
  if (!strcmp(cmd, "unplug")) return cmd_unplug(0);
  if (!strcmp(cmd, "pciunplug")) return cmd_unplug(1);
  if (!strcmp(cmd, "exitmid")) return cmd_exitmid();
  if (!strcmp(cmd, "allreduce")) return cmd_allreduce();
  if (!strcmp(cmd, "xvm-rank0")) return cmd_xvm(0, NULL);
  if (!strcmp(cmd, "xvm-rank1")) return cmd_xvm(1, argc > 3 ? argv[3] : NULL);
  if (!strcmp(cmd, "hostiledev")) return cmd_hostiledev();
  if (!strcmp(cmd, "ranks") && argc > 5)
    return cmd_ranks(argv[3], (uint32_t)atoi(argv[4]), (uint32_t)atoi(argv[5]));
  if (!strcmp(cmd, "refused") && argc > 3) return cmd_refused(argv[3]);
  if (!strcmp(cmd, "pending")) return cmd_pending();
  if (!strcmp(cmd, "victim") && argc > 3) return cmd_victim(argv[3]);
  if (!strcmp(cmd, "survivor") && argc > 3) return cmd_survivor(argv[3]);
  if (!strcmp(cmd, "events")) return cmd_events(argc > 3 ? atoi(argv[3]) : 1);
  if (!strcmp(cmd, "owner")) return cmd_owner();
  if (!strcmp(cmd, "families")) return cmd_families();
  if (!strcmp(cmd, "memlock")) return cmd_memlock();
  if (!strcmp(cmd, "silentclose")) return cmd_silentclose();
  if (!strcmp(cmd, "noleaks")) {
    expect_no_leaks("now");
    return 0;
  }
  fprintf(stderr, "hz_drvtest: unknown command %s\n", cmd);
  return 2;
}
