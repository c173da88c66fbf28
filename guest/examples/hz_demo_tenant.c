// SPDX-License-Identifier: Apache-2.0
/*
 * One rank of the README demo, written only against the tenant C API.
 *
 *   hz_demo_tenant RANK NRANKS UID_FILE [--maintenance READY_FILE [--notice-timeout-s N]]
 *
 * The device comes from $HZ_DEVICE. Rank 0 asks the device for a
 * communicator uid and writes it to UID_FILE; the others wait for it. Every
 * rank then joins, all-reduces 16 MiB of fp32 from registered memory and
 * checks every element, all-gathers a small buffer that is not registered
 * (the library carries it in the request), and, when the device offers
 * checkpoints, saves and restores its buffer. Each line printed reports
 * something that was done and checked.
 *
 * With --maintenance the rank reacts to the provider's maintenance notices:
 * it subscribes to the MAINTENANCE topic before it starts working and then
 * creates READY_FILE, so whoever publishes the notice knows it will be seen.
 * After its work it waits (at most --notice-timeout-s, default 60) for a
 * SCHEDULED maintenance, saves a checkpoint of its state in reaction,
 * acknowledges the notice approving an early start (the tenant is ready),
 * and only then restores and verifies the checkpoint as usual.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harmonaize/hz.h"

#define COUNT (4u << 20) /* 16 MiB of fp32 */

static double now_s(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int fail(int rank, const char* what, int rc) {
  fprintf(stderr, "rank %d: %s: %s\n", rank, what, hz_strerror(rc));
  return 1;
}

static int exchange_uid(hz_device_t* dev, int rank, const char* path, hz_uid_t* uid) {
  if (rank == 0) {
    char tmp[512];
    FILE* f;
    int rc = hz_comm_get_uid(dev, uid);

    if (rc != HZ_OK) return rc;
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "wb");
    if (!f || fwrite(uid, sizeof(*uid), 1, f) != 1 || fclose(f) != 0) return HZ_EIO;
    return rename(tmp, path) == 0 ? HZ_OK : HZ_EIO;
  }
  for (int i = 0; i < 600; i++) {
    FILE* f = fopen(path, "rb");

    if (f) {
      size_t n = fread(uid, sizeof(*uid), 1, f);

      fclose(f);
      if (n == 1) return HZ_OK;
    }
    usleep(100 * 1000);
  }
  return HZ_ETIMEDOUT;
}

/* One checkpoint stream per rank: each rank saves its own shard. */
static int checkpoint_save(hz_device_t* dev, int rank, float* buf, size_t bytes, const char* why) {
  const uint32_t stream = (uint32_t)rank + 1;
  struct hz_ckpt_policy pol = {0, 2, HZ_TIER_LOCAL_DISK, 1000, 60};
  struct hz_buf slice = {buf, bytes};
  struct hz_ckpt_info info;
  int rc;

  rc = hz_ckpt_set_policy(dev, stream, &pol);
  if (rc == HZ_OK) rc = hz_ckpt_save(dev, stream, 100, &slice, 1, "demo", 4, &info);
  if (rc != HZ_OK) return rc;
  printf("rank %d: checkpoint step 100 saved%s (stream %u, %zu MiB, stall %u us)\n", rank, why,
         stream, bytes >> 20, info.stall_us);
  return HZ_OK;
}

static int checkpoint_restore(hz_device_t* dev, int rank, float* buf, size_t bytes) {
  const uint32_t stream = (uint32_t)rank + 1;
  char meta[64];
  struct hz_buf slice = {buf, bytes};
  struct hz_ckpt_info info;
  float first = buf[0], last = buf[COUNT - 1];
  size_t meta_len = sizeof(meta);
  int rc;

  memset(buf, 0, bytes);
  rc = hz_ckpt_restore(dev, stream, HZ_STEP_LATEST, &slice, 1, meta, &meta_len, &info);
  if (rc != HZ_OK) return rc;
  if (buf[0] != first || buf[COUNT - 1] != last) return HZ_ECORRUPT;
  printf("rank %d: checkpoint step %llu restored and verified\n", rank,
         (unsigned long long)info.step);
  return HZ_OK;
}

/* Subscribes to maintenance notices, then tells the operator side it did. */
static int maintenance_subscribe(hz_device_t* dev, int rank, const char* ready_file) {
  FILE* f;
  int rc = hz_event_subscribe(dev, HZ_TOPIC_MASK(HZ_TOPIC_MAINTENANCE), HZ_SEQ_CURSOR);

  if (rc != HZ_OK) return rc;
  printf("rank %d: subscribed to maintenance notices\n", rank);
  fflush(stdout);
  f = fopen(ready_file, "w");
  if (!f || fclose(f) != 0) return HZ_EIO;
  return HZ_OK;
}

/*
 * Waits for a SCHEDULED maintenance (other records are acknowledged and
 * skipped), checkpoints in reaction, then approves the early start.
 */
static int maintenance_react(hz_device_t* dev, int rank, float* buf, size_t bytes, int timeout_s) {
  struct hz_event ev;
  uint64_t duration_s = 0;
  double deadline = now_s() + timeout_s;
  time_t now;
  int rc;

  for (;;) {
    int left_ms = (int)((deadline - now_s()) * 1e3);

    if (left_ms <= 0) return HZ_ETIMEDOUT;
    rc = hz_event_next(dev, &ev, left_ms);
    if (rc != HZ_OK) return rc;
    if (ev.topic == HZ_TOPIC_MAINTENANCE && ev.kind == 0 /* SCHEDULED */) break;
    rc = hz_event_ack(dev, ev.seq, 0);
    if (rc != HZ_OK) return rc;
  }
  memcpy(&duration_s, ev.payload, sizeof(duration_s)); /* SPEC 8.3.2: duration_s */
  now = time(NULL);
  printf("rank %d: maintenance notice seq %llu: starts in about %lld s, expected impact %llu s%s\n",
         rank, (unsigned long long)ev.seq, (long long)ev.deadline_s - (long long)now,
         (unsigned long long)duration_s,
         (ev.flags & HZ_EVENT_F_APPROVABLE) ? ", early start may be approved" : "");
  rc = checkpoint_save(dev, rank, buf, bytes, " in reaction to the notice");
  if (rc != HZ_OK) return rc;
  if (ev.flags & HZ_EVENT_F_APPROVABLE) {
    rc = hz_event_ack(dev, ev.seq, HZ_ACK_F_APPROVE);
    if (rc != HZ_OK) return rc;
    printf("rank %d: acknowledged notice seq %llu and approved an early start\n", rank,
           (unsigned long long)ev.seq);
  } else {
    rc = hz_event_ack(dev, ev.seq, 0);
    if (rc != HZ_OK) return rc;
    printf("rank %d: acknowledged notice seq %llu\n", rank, (unsigned long long)ev.seq);
  }
  return HZ_OK;
}

int main(int argc, char** argv) {
  hz_device_t* dev = NULL;
  hz_comm_t* comm = NULL;
  struct hz_device_info info;
  hz_uid_t uid;
  float *buf = NULL, small[8], gathered[8 * 64];
  const char* ready_file = NULL;
  int rank, nranks, rc, ret, notice_timeout_s = 60;
  double t0, t1;

  for (int i = 4; i < argc; i++) {
    if (strcmp(argv[i], "--maintenance") == 0 && i + 1 < argc) {
      ready_file = argv[++i];
    } else if (strcmp(argv[i], "--notice-timeout-s") == 0 && i + 1 < argc) {
      notice_timeout_s = atoi(argv[++i]);
    } else {
      argc = 0; /* usage */
    }
  }
  if (argc < 4 || notice_timeout_s < 1 || notice_timeout_s > 3600) {
    fprintf(stderr,
            "usage: %s RANK NRANKS UID_FILE [--maintenance READY_FILE [--notice-timeout-s N]]\n",
            argv[0]);
    return 2;
  }
  rank = atoi(argv[1]);
  nranks = atoi(argv[2]);
  if (nranks < 1 || nranks > 64 || rank < 0 || rank >= nranks) {
    fprintf(stderr, "bad rank/nranks\n");
    return 2;
  }
  rc = hz_open(NULL, &dev);
  if (rc != HZ_OK) return fail(rank, "open device", rc);
  hz_device_get_info(dev, &info);
  printf("rank %d: opened %s device at %s (protocol %u.%u, %u request queues)\n", rank,
         info.transport, info.path, info.version_major, info.version_minor,
         info.num_request_queues);

  if (ready_file) {
    const uint64_t need = (1ull << HZ_F_EVENTS) | (1ull << HZ_F_CHECKPOINT);

    if ((info.features & need) != need) {
      fprintf(stderr, "rank %d: the service offers no events or no checkpoints\n", rank);
      ret = 1;
      goto out;
    }
    rc = maintenance_subscribe(dev, rank, ready_file);
    if (rc != HZ_OK) {
      ret = fail(rank, "subscribe to maintenance notices", rc);
      goto out;
    }
  }

  rc = hz_mem_alloc(dev, COUNT * sizeof(float), (void**)&buf);
  if (rc != HZ_OK) {
    ret = fail(rank, "allocate registered memory", rc);
    goto out;
  }
  rc = exchange_uid(dev, rank, argv[3], &uid);
  if (rc != HZ_OK) {
    ret = fail(rank, "communicator uid", rc);
    goto out;
  }
  rc = hz_comm_init(dev, &uid, nranks, rank, NULL, &comm);
  if (rc != HZ_OK) {
    ret = fail(rank, "join communicator", rc);
    goto out;
  }

  for (unsigned i = 0; i < COUNT; i++) buf[i] = (float)(rank + 1) + (float)(i % 1024);
  t0 = now_s();
  rc = hz_allreduce(comm, buf, buf, COUNT, HZ_FP32, HZ_SUM);
  t1 = now_s();
  if (rc != HZ_OK) {
    ret = fail(rank, "all-reduce", rc);
    goto out;
  }
  for (unsigned i = 0; i < COUNT; i++) {
    float want = 0;

    for (int k = 0; k < nranks; k++) want += (float)(k + 1) + (float)(i % 1024);
    if (buf[i] != want) {
      fprintf(stderr, "rank %d: all-reduce element %u is %g, want %g\n", rank, i, buf[i], want);
      ret = 1;
      goto out;
    }
  }
  printf("rank %d: all-reduce of 16 MiB fp32 across %d ranks verified (%.1f ms, %.2f GB/s algbw)\n",
         rank, nranks, (t1 - t0) * 1e3, COUNT * 4.0 / (t1 - t0) / 1e9);

  for (int i = 0; i < 8; i++) small[i] = (float)(rank * 100 + i);
  rc = hz_allgather(comm, small, gathered, 8, HZ_FP32);
  if (rc != HZ_OK) {
    ret = fail(rank, "all-gather", rc);
    goto out;
  }
  for (int k = 0; k < nranks; k++)
    for (int i = 0; i < 8; i++)
      if (gathered[k * 8 + i] != (float)(k * 100 + i)) {
        ret = fail(rank, "all-gather result", HZ_ECORRUPT);
        goto out;
      }
  printf("rank %d: all-gather from unregistered memory verified\n", rank);

  if (ready_file) {
    rc = maintenance_react(dev, rank, buf, COUNT * sizeof(float), notice_timeout_s);
    if (rc != HZ_OK) {
      ret = fail(rank, "maintenance notice", rc);
      goto out;
    }
    rc = checkpoint_restore(dev, rank, buf, COUNT * sizeof(float));
    if (rc != HZ_OK) {
      ret = fail(rank, "checkpoint", rc);
      goto out;
    }
  } else if (info.features & (1ull << HZ_F_CHECKPOINT)) {
    rc = checkpoint_save(dev, rank, buf, COUNT * sizeof(float), "");
    if (rc == HZ_OK) rc = checkpoint_restore(dev, rank, buf, COUNT * sizeof(float));
    if (rc != HZ_OK) {
      ret = fail(rank, "checkpoint", rc);
      goto out;
    }
  } else if (rank == 0) {
    printf("rank 0: the service offers no checkpoints; none attempted\n");
  }

  rc = hz_barrier(comm);
  if (rc != HZ_OK) {
    ret = fail(rank, "barrier", rc);
    goto out;
  }
  ret = 0;
out:
  /* Every path releases what it holds (the device would on exit too, but
   * a tenant program should not depend on that). */
  if (comm) hz_comm_destroy(comm);
  if (buf) hz_mem_free(dev, buf);
  hz_close(dev);
  return ret;
}
