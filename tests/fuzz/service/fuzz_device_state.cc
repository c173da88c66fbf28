// Fuzzes the device state a live upgrade hands to the next process
// (HzDevice::RestoreState, protocol/SPEC.md §2.9). The state arrives over a
// socket from another process and names guest memory, region ids, event
// positions and communicators, so it is as untrusted as a guest's requests:
// whatever the bytes, RestoreState either refuses them whole or yields a
// device that serves.
//
// Input: the state bytes. When they are accepted, the restored device is
// exercised as the next process would: its rings start, a waiting
// communicator's rejoin is answered (succeeding or failing by the input's
// last byte; one across hosts is first read as the cluster backend reads
// it), requests on every family are served, and the device's state
// is saved again and must be accepted by yet another device.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cross_host_comm.h"
#include "fakes.h"
#include "hz/service/hz_device.h"

namespace {

using hz::service::DeviceEnv;
using hz::service::HzDevice;
using hz::service::Tenant;
using hz::service::TenantSpec;
using hz::service::testing::ChainBuilder;
using hz::service::testing::FakeBackend;
using hz::service::testing::FakeCkptBackend;
using hz::service::testing::FakeContext;
using hz::service::testing::FakeEventBackend;
using hz::service::testing::FakeMember;
using hz::service::testing::FakeQueue;
using hz::service::testing::GuestRam;
using hz::service::testing::RequestBytes;

struct Harness {
  // 4 MiB of guest memory from 1 MiB, as the unit tests' fixture state names.
  GuestRam ram{4 << 20};
  FakeContext ctx{ram.map()};
  FakeBackend backend;
  FakeCkptBackend ckpt;
  FakeEventBackend bus;
  std::shared_ptr<Tenant> tenant;
  ChainBuilder cb{&ram};

  Harness() {
    TenantSpec spec;
    spec.name = "fuzz";
    spec.limits.max_regions = 16;
    spec.limits.max_region_bytes = 4 << 20;
    tenant = std::make_shared<Tenant>(spec);
  }

  std::unique_ptr<HzDevice> NewDevice() {
    DeviceEnv env;
    env.coll = &backend;
    env.ckpt = &ckpt;
    env.events = &bus;
    auto dev = std::make_unique<HzDevice>(env, tenant, "/run/fuzz.sock");
    dev->OnConnect(ctx);
    return dev;
  }
};

// Serves one request on queue q of dev; the device may answer later.
void Request(Harness& h, HzDevice& dev, std::vector<std::unique_ptr<FakeQueue>>& queues, uint16_t q,
             const std::vector<uint8_t>& bytes) {
  queues[q]->avail.push_back(h.cb.Make(bytes, 256));
  dev.OnKick(*queues[q]);
  h.ctx.RunPosted();
}

void Exercise(Harness& h, HzDevice& dev, bool rejoins_succeed) {
  std::vector<std::unique_ptr<FakeQueue>> queues;
  for (uint16_t i = 0; i < dev.NumQueues(); ++i) {
    queues.push_back(std::make_unique<FakeQueue>(i));
    dev.OnQueueStarted(*queues.back());
  }
  for (auto& rejoin : h.backend.rejoins) {
    // A rank of a communicator across hosts: what the cluster backend reads
    // of it before it rejoins (cluster_coll_backend.cc).
    if (rejoin.backend.is_object() && rejoin.backend.contains("cross_host")) {
      hz::service::SavedMember saved{rejoin.state, rejoin.backend};
      hz::StatusOr<hz::service::CrossHostSaved> x = hz::service::ParseCrossHostSaved(saved, "h0");
      if (x.ok() && (x->layout.local_ranks.empty() || x->layout.nranks != rejoin.state.nranks ||
                     x->local.rank >= x->local.nranks)) {
        std::abort();  // accepted, yet not a rank of this host
      }
    }
    if (rejoins_succeed) {
      rejoin.done(hz::Status::Ok(), std::make_shared<FakeMember>(0, rejoin.state.nranks, 200));
    } else {
      rejoin.done(hz::Status::Aborted("a rank did not come back"), nullptr);
    }
  }
  h.backend.rejoins.clear();
  h.ctx.RunPosted();
  for (uint32_t id = 1; id <= 4; ++id) {
    hz_region_unregister_args u{};
    u.region_id = id;
    Request(h, dev, queues, 0, RequestBytes(HZ_OP_REGION_UNREGISTER, u, id));
    hz_comm_args d{};
    d.comm = id;
    Request(h, dev, queues, 0, RequestBytes(HZ_OP_COMM_DESTROY, d, id));
  }
  hz_event_ack_args ack{};
  ack.seq = 1;
  Request(h, dev, queues, 0, RequestBytes(HZ_OP_EVENT_ACK, ack, 9));
  h.bus.Publish(HZ_TOPIC_MAINTENANCE);
  h.ctx.RunPosted();
  dev.OnDisconnect();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Harness h;
  const std::string state(reinterpret_cast<const char*>(data), size);
  auto dev = h.NewDevice();
  if (!dev->RestoreState(state)) return 0;  // refused whole: nothing to serve

  // Accepted: what it saves again must be accepted again, by a fresh device.
  std::string again;
  auto copy = h.NewDevice();
  bool saved = false;
  {
    std::vector<std::unique_ptr<FakeQueue>> queues;
    for (uint16_t i = 0; i < dev->NumQueues(); ++i) {
      queues.push_back(std::make_unique<FakeQueue>(i));
      dev->OnQueueFreezing(*queues.back());
    }
    h.ctx.RunPosted();
    saved = dev->SaveState(&again);
  }
  if (saved && !copy->RestoreState(again)) abort();
  copy->OnDisconnect();
  Exercise(h, *dev, size > 0 && (data[size - 1] & 1));
  return 0;
}
