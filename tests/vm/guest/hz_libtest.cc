// libharmonaize inside the test VM, over the driver transport: a static guest
// program built from hz.h's implementation (guest/lib, without the
// virtio-user transport, which needs a vhost-user back-end of its own).
// Exits 0 only when every check held; each check prints what it saw.
//   hz_libtest  open, device info, registered memory, a one-rank communicator
//               (blocking and asynchronous ALLREDUCE, registered and staged
//               buffers), invalid arguments, ENOTSUP for features not granted
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "harmonaize/hz.h"
#include "transport.h"

namespace hz::lib {
// This program has no virtio-user transport: a "vhost-user:" spec is refused.
int OpenVirtioUser(const std::string&, std::unique_ptr<Transport>*) {
  return HZ_ENOTSUP;
}
}  // namespace hz::lib

namespace {

#define LIB_CHECK(cond, ...)                         \
  do {                                               \
    if (!(cond)) {                                   \
      std::printf("hz_libtest: FAIL: " __VA_ARGS__); \
      std::printf(" (%s:%d)\n", __FILE__, __LINE__); \
      std::exit(1);                                  \
    }                                                \
  } while (0)

#define LIB_OK(call)                                            \
  do {                                                          \
    int rc_ = (call);                                           \
    LIB_CHECK(rc_ == HZ_OK, "%s: %s", #call, hz_strerror(rc_)); \
  } while (0)

#define LIB_RC(call, want)                                                                   \
  do {                                                                                       \
    int rc_ = (call);                                                                        \
    LIB_CHECK(rc_ == (want), "%s: %s, want %s", #call, hz_strerror(rc_), hz_strerror(want)); \
  } while (0)

constexpr size_t kCount = 65536;  // 256 KiB of floats

float Val(size_t i) {
  return static_cast<float>(i % 1009) * 0.5f;
}

// A one-rank ALLREDUCE(SUM) leaves send in recv; recv starts as -1.
void CheckAllReduce(hz_comm_t* comm, float* send, float* recv, bool async, const char* what) {
  for (size_t i = 0; i < kCount; ++i) {
    send[i] = Val(i);
    recv[i] = -1;
  }
  if (async) {
    hz_request_t* req = nullptr;
    LIB_OK(hz_allreduce_async(comm, send, recv, kCount, HZ_FP32, HZ_SUM, &req));
    LIB_CHECK(req != nullptr, "no request");
    LIB_OK(hz_wait(req, 60000));
  } else {
    LIB_OK(hz_allreduce(comm, send, recv, kCount, HZ_FP32, HZ_SUM));
  }
  for (size_t i = 0; i < kCount; ++i)
    LIB_CHECK(recv[i] == Val(i), "%s: element %zu is %g", what, i, static_cast<double>(recv[i]));
  std::printf("hz_libtest: %s ALLREDUCE of %zu floats correct\n", what, kCount);
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  hz_device_t* dev = nullptr;
  LIB_RC(hz_open(nullptr, nullptr), HZ_EINVAL);
  LIB_RC(hz_open("/dev/harmonaize-none", &dev), HZ_ENODEV);
  LIB_CHECK(dev == nullptr, "a failed hz_open left a device");
  LIB_RC(hz_open("vhost-user:/run/none.sock", &dev), HZ_ENOTSUP);

  LIB_OK(hz_open(nullptr, &dev));
  hz_device_info info;
  LIB_OK(hz_device_get_info(dev, &info));
  std::printf(
      "hz_libtest: hz_open(NULL): transport %s path %s version %u.%u request_queues %u "
      "features 0x%llx max_regions %u max_comm_ranks %u\n",
      info.transport, info.path, info.version_major, info.version_minor, info.num_request_queues,
      static_cast<unsigned long long>(info.features), info.max_regions, info.max_comm_ranks);
  LIB_CHECK(std::strcmp(info.transport, "driver") == 0, "transport %s", info.transport);
  LIB_CHECK(std::strcmp(info.path, "/dev/harmonaize0") == 0, "path %s", info.path);
  LIB_CHECK(info.version_major == HZ_VERSION_MAJOR, "version %u", info.version_major);
  LIB_CHECK(info.num_request_queues >= 1, "no request queues");
  LIB_CHECK(info.features & (1ull << HZ_F_COLLECTIVES), "collectives not granted");
  LIB_RC(hz_device_get_info(dev, nullptr), HZ_EINVAL);

  // Registered memory: pinned pages, readable and writable.
  void* mem = nullptr;
  LIB_OK(hz_mem_alloc(dev, 2 * kCount * sizeof(float), &mem));
  LIB_CHECK(mem != nullptr, "hz_mem_alloc gave NULL");
  std::memset(mem, 0x5a, 2 * kCount * sizeof(float));
  int local = 0;
  LIB_CHECK(hz_mem_free(dev, &local) != HZ_OK, "hz_mem_free of memory it did not allocate");

  hz_uid_t uid;
  LIB_OK(hz_comm_get_uid(dev, &uid));
  hz_comm_t* comm = nullptr;
  LIB_RC(hz_comm_init(dev, &uid, 0, 0, nullptr, &comm), HZ_EINVAL);
  LIB_RC(hz_comm_init(dev, &uid, 1, 1, nullptr, &comm), HZ_EINVAL);
  LIB_OK(hz_comm_init(dev, &uid, 1, 0, nullptr, &comm));
  LIB_CHECK(hz_comm_rank(comm) == 0 && hz_comm_size(comm) == 1, "rank %d size %d",
            hz_comm_rank(comm), hz_comm_size(comm));

  float* send = static_cast<float*>(mem);
  float* recv = send + kCount;
  CheckAllReduce(comm, send, recv, false, "registered, blocking");
  CheckAllReduce(comm, send, recv, true, "registered, async");
  std::vector<float> hs(kCount), hr(kCount);  // not registered: staged by the library
  CheckAllReduce(comm, hs.data(), hr.data(), false, "staged, blocking");
  CheckAllReduce(comm, hs.data(), hr.data(), true, "staged, async");

  // Invalid arguments are refused before anything reaches the device.
  LIB_RC(hz_allreduce(nullptr, send, recv, kCount, HZ_FP32, HZ_SUM), HZ_EINVAL);
  LIB_RC(hz_allreduce(comm, nullptr, recv, kCount, HZ_FP32, HZ_SUM), HZ_EINVAL);
  LIB_RC(hz_allreduce(comm, send, recv, kCount, static_cast<hz_dtype>(200), HZ_SUM), HZ_EINVAL);
  LIB_RC(hz_broadcast(comm, send, recv, kCount, HZ_FP32, 5), HZ_EINVAL);
  std::printf("hz_libtest: invalid arguments refused\n");
  // The communicator still works after the refusals.
  CheckAllReduce(comm, send, recv, false, "after refusals, blocking");
  LIB_OK(hz_comm_destroy(comm));

  // Operations whose feature the device did not grant: HZ_ENOTSUP at once.
  int checked = 0;
  auto not_granted = [&](int feature) { return (info.features & (1ull << feature)) == 0; };
  if (not_granted(HZ_F_CHECKPOINT)) {
    LIB_RC(hz_ckpt_delete(dev, 1, 1), HZ_ENOTSUP);
    ++checked;
  }
  if (not_granted(HZ_F_EVENTS)) {
    LIB_RC(hz_event_subscribe(dev, HZ_TOPIC_ALL, 1), HZ_ENOTSUP);
    ++checked;
  }
  if (not_granted(HZ_F_TOPOLOGY)) {
    hz_topology* t = nullptr;
    LIB_RC(hz_topology_get(dev, &t), HZ_ENOTSUP);
    ++checked;
  }
  if (not_granted(HZ_F_NEGOTIATION)) {
    LIB_RC(hz_neg_decline(dev, 1), HZ_ENOTSUP);
    ++checked;
  }
  if (not_granted(HZ_F_HINTS)) {
    uint32_t suggested = 0;
    LIB_RC(hz_hint_declare(dev, 1, 8, 1, &suggested), HZ_ENOTSUP);
    ++checked;
  }
  // A device that grants every feature leaves nothing to check here.
  std::printf("hz_libtest: ENOTSUP for %d features the device did not grant\n", checked);

  LIB_OK(hz_mem_free(dev, mem));
  hz_close(dev);
  std::printf("hz_libtest: every check passed\n");
  return 0;
}
