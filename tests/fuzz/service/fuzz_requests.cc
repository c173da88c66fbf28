// Fuzzes the per-VM device's request path: framing (ParseRequest), argument
// reading and every handler (regions, communicators, collectives, checkpoints,
// events, topology, negotiation, hints), with whatever a hostile guest can put
// in its chains.
//
// Input: a sequence of records, each
//   u8 queue, u8 chunk, u16 writable, u16 readable_len, readable bytes.
// The readable bytes (request header, arguments, data) go into guest RAM,
// split into segments of at most `chunk` bytes; `writable` bytes of result
// space follow. The device starts after a valid HELLO (all features), so the
// fuzzer spends its time past the handshake; a record can send another.
// Collectives reach a scripted backend that keeps them pending, as a peer
// that never posts would. Checkpoint, event, provider and energy requests reach the
// unit tests' scripted engines: after each record the checkpoint work they
// queued runs, waiting negotiations are decided and an event is published,
// so completions race the next record as they would in the daemon. The device
// is torn down at the end of each input.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

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
using hz::service::testing::FakeEnergyBackend;
using hz::service::testing::FakeEventBackend;
using hz::service::testing::FakeProviderBackend;
using hz::service::testing::FakeQueue;
using hz::service::testing::GuestRam;
using hz::service::testing::RequestBytes;

// Chains take at most this many bytes, so ChainBuilder stays inside RAM.
constexpr size_t kMaxChainBytes = 64 * 1024;

struct Harness {
  GuestRam ram{1 << 20};
  FakeContext ctx{ram.map()};
  FakeBackend backend;
  FakeCkptBackend ckpt;
  FakeEventBackend bus;
  FakeProviderBackend provider;
  FakeEnergyBackend energy;
  std::shared_ptr<Tenant> tenant;
  std::unique_ptr<HzDevice> dev;
  std::vector<std::unique_ptr<FakeQueue>> queues;
  ChainBuilder cb{&ram};

  Harness() {
    TenantSpec spec;
    spec.name = "fuzz";
    spec.limits.max_regions = 16;
    spec.limits.max_region_bytes = 1 << 20;
    tenant = std::make_shared<Tenant>(spec);
    DeviceEnv env;
    env.coll = &backend;
    env.ckpt = &ckpt;
    env.events = &bus;
    env.provider = &provider;
    env.energy = &energy;
    dev = std::make_unique<HzDevice>(env, tenant, "/run/fuzz.sock");
    dev->OnConnect(ctx);
    for (uint16_t i = 0; i < dev->NumQueues(); ++i) {
      queues.push_back(std::make_unique<FakeQueue>(i));
      dev->OnQueueStarted(*queues.back());
    }
  }

  ~Harness() {
    dev->OnDisconnect();
    dev.reset();
  }

  void Submit(uint16_t q, const std::vector<uint8_t>& readable, size_t writable, size_t chunk) {
    // Reuse the second half of RAM from its start when it would run out:
    // chains the device still holds then see their bytes change, as a
    // hostile guest could do anyway.
    if (cb.next_gpa + 2 * kMaxChainBytes > ram.base() + ram.size()) {
      cb.next_gpa = ram.base() + ram.size() / 2;
    }
    queues[q]->avail.push_back(cb.Make(readable, writable, chunk));
    dev->OnKick(*queues[q]);
    ctx.RunPosted();
    ckpt.RunQueued();
    provider.Decide(++decisions);
    bus.Publish(HZ_TOPIC_MAINTENANCE);
    ctx.RunPosted();
  }
  uint64_t decisions = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Harness h;
  hz_hello_args hello{};
  hello.version_major = HZ_VERSION_MAJOR;
  hello.version_minor = HZ_VERSION_MINOR;  // 1.1: ENERGY_SLACK too
  hello.driver_features = ~0ull;
  h.Submit(0, RequestBytes(HZ_OP_HELLO, hello, 1), 256, 0);

  size_t off = 0;
  while (size - off >= 6) {
    uint16_t q = data[off] % h.queues.size();
    size_t chunk = data[off + 1];
    uint16_t writable, readable_len;
    std::memcpy(&writable, data + off + 2, 2);
    std::memcpy(&readable_len, data + off + 4, 2);
    off += 6;
    size_t n = std::min<size_t>(readable_len, size - off);
    n = std::min(n, kMaxChainBytes / 2);
    std::vector<uint8_t> readable(data + off, data + off + n);
    off += n;
    h.Submit(q, readable, std::min<size_t>(writable, kMaxChainBytes / 2), chunk);
  }
  return 0;
}
