// The HarmonAIze device of one VM connection, on top of vdev.
//
// Queue 0 carries control requests, queue 1 holds event buffers, queues 2..
// carry data requests (collectives). Each request is framed and validated
// (request.h), checked for queue, HELLO state and negotiated features, then
// dispatched by opcode family. Asynchronous completions (COMM_INIT and the
// collectives) come back from engine threads through DeviceContext::Post, so
// every piece of device state is touched on the connection's executor only.
#ifndef HZ_SERVICE_HZ_DEVICE_H_
#define HZ_SERVICE_HZ_DEVICE_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hz/service/ckpt_backend.h"
#include "hz/service/coll_backend.h"
#include "hz/service/config.h"
#include "hz/service/event_backend.h"
#include "hz/service/metrics.h"
#include "hz/service/provider_backend.h"
#include "hz/service/region_table.h"
#include "hz/service/request.h"
#include "hz/service/tenants.h"
#include "protocol/harmonaize.h"
#include "vdev/device.h"

namespace hz::service {

class HzDevice;

// Live devices, for the operator's views and for shutdown (any thread).
class DeviceRegistry {
 public:
  void Add(HzDevice* d) {
    std::lock_guard<std::mutex> lock(mu_);
    devices_.push_back(d);
  }
  void Remove(HzDevice* d) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase(devices_, d);
  }
  // Calls fn for each live device under the registry lock (a device being
  // destroyed waits, so fn may use it).
  template <typename Fn>
  void ForEach(Fn fn) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (HzDevice* d : devices_) fn(*d);
  }

 private:
  mutable std::mutex mu_;
  std::vector<HzDevice*> devices_;
};

// What every device of the service shares. Each engine sits behind the one
// interface the device uses for it; a null one is not offered to the VMs.
struct DeviceEnv {
  DeviceLimits limits;
  Metrics* metrics = nullptr;  // may be null in tests
  const std::atomic<bool>* draining = nullptr;
  DeviceRegistry* registry = nullptr;   // may be null in tests
  CollBackend* coll = nullptr;          // communicators and collectives
  CkptBackend* ckpt = nullptr;          // checkpoint streams
  EventBackend* events = nullptr;       // event subscriptions
  ProviderBackend* provider = nullptr;  // topology, negotiation, hints
};

// A consistent view of one device for the operator (any thread).
struct DeviceInfo {
  std::string socket_path;
  std::string tenant;
  bool connected = false;
  bool hello = false;
  bool draining = false;
  uint64_t features = 0;
  uint64_t session_id = 0;
  std::vector<uint16_t> queues_started;
  uint64_t regions = 0;
  uint64_t region_bytes = 0;
  struct Comm {
    uint64_t handle = 0;
    uint64_t comm_id = 0;
    uint32_t rank = 0;
    uint32_t nranks = 0;
  };
  std::vector<Comm> comms;
  uint64_t requests = 0;
  uint64_t errors = 0;
  uint64_t in_flight = 0;
  uint64_t events_held = 0;
};

class HzDevice : public vdev::Device {
 public:
  HzDevice(DeviceEnv env, std::shared_ptr<Tenant> tenant, uint64_t tenant_id,
           std::string socket_path);
  ~HzDevice() override;
  HzDevice(const HzDevice&) = delete;
  HzDevice& operator=(const HzDevice&) = delete;

  // vdev::Device
  uint64_t Features() const override;
  uint16_t NumQueues() const override;
  uint16_t MaxQueueSize() const override { return env_.limits.queue_size; }
  std::vector<uint8_t> ConfigSpace() const override;
  void OnConnect(vdev::DeviceContext& ctx) override;
  void OnQueueStarted(vdev::Queue& queue) override;
  void OnQueueStopping(vdev::Queue& queue) override;
  void OnQueueStopped(uint16_t index) override;
  void OnKick(vdev::Queue& queue) override;
  void OnReset() override;
  void OnDisconnect() override;

  // Runs fn on this device's executor while it is connected; returns false
  // (and drops fn) otherwise. Any thread.
  bool PostToDevice(std::function<void(HzDevice&)> fn);

  // Service shutdown, on the executor: answers every in-flight request and
  // every held event buffer with HZ_S_ESHUTDOWN and reports DRAINING in the
  // config space. Requests arriving later get HZ_S_ESHUTDOWN at once.
  void Drain();

  DeviceInfo Info() const;  // any thread
  const std::string& socket_path() const { return socket_path_; }
  uint64_t in_flight() const { return in_flight_.load(); }

 private:
  // Shared with callbacks that may outlive the device.
  struct Link {
    std::recursive_mutex mu;
    vdev::DeviceContext* ctx = nullptr;
    HzDevice* dev = nullptr;
  };

  // A request whose completion comes later.
  struct Pending {
    vdev::Chain chain;
    uint16_t queue = 0;
    uint64_t queue_gen = 0;
    uint64_t request_id = 0;
    uint16_t opcode = 0;
    uint32_t result_len = 0;  // inline recv bytes for collectives
    uint64_t bytes = 0;       // payload, for metrics
    uint64_t comm = 0;        // handle a collective runs on
    std::vector<RegionPin> pins;
  };

  struct CommEntry {
    MemberPtr member;
    uint32_t in_flight = 0;  // collectives posted on this handle
    // COMM_ABORT requests waiting for the handle's operations (SPEC §7.3.4).
    std::vector<std::shared_ptr<Pending>> aborts;
  };

  struct QueueSlot {
    vdev::Queue* queue = nullptr;
    uint64_t gen = 0;
  };

  // Outcome of a synchronous handler.
  struct Reply {
    uint32_t status = HZ_S_OK;
    uint32_t result_len = 0;
    uint32_t detail = 0;
    bool pending = false;  // the handler took the chain; it completes later
  };

  using Handler = Reply (HzDevice::*)(vdev::Queue&, const Request&);

  void HandleChain(vdev::Queue& queue, const vdev::Chain& chain);
  void Finish(vdev::Queue& queue, const vdev::Chain& chain, uint16_t opcode, uint64_t request_id,
              const Reply& r);
  // Completes a pending request if its queue is still the one it came from.
  void FinishPending(const Pending& p, uint32_t status, uint32_t result_len, uint32_t detail = 0);
  uint64_t offered_features() const;
  bool draining() const;
  // Ends the session: leaves every communicator and drops every region.
  // rings_alive: the rings still exist, so in-flight requests will still be
  // answered (a new HELLO); otherwise they are forgotten (reset, disconnect).
  void Teardown(bool rings_alive);
  void UpdateInfo();

  // Handlers, one per opcode family (the dispatch table).
  Reply HandleHello(vdev::Queue& q, const Request& req);
  Reply HandleRegion(vdev::Queue& q, const Request& req);
  Reply HandleComm(vdev::Queue& q, const Request& req);
  Reply HandleCollective(vdev::Queue& q, const Request& req);
  Reply HandleEvent(vdev::Queue& q, const Request& req);       // hz_device_events.cc
  Reply HandleCheckpoint(vdev::Queue& q, const Request& req);  // hz_device_checkpoint.cc

  // Topology, negotiation and hints (hz_device_provider.cc).
  Reply HandleTopology(vdev::Queue& q, const Request& req);
  Reply HandleNegotiation(vdev::Queue& q, const Request& req);
  Reply HandleHint(vdev::Queue& q, const Request& req);
  // NEG_REQUEST/NEG_COUNTER wait for the decision point (hz_device_provider.cc).
  Reply NegPending(vdev::Queue& q, const Request& req, uint64_t counter_id,
                   const hz_neg_request& r);
  void OnDecision(uint64_t op_id, const std::vector<uint8_t>& result);

  // Checkpoint slices resolved to host spans (hz_device_checkpoint.cc).
  struct CkptSpans {
    std::vector<checkpoint::IoSpan> spans;               // one per slice, for the engine
    std::vector<std::vector<checkpoint::IoSpan>> guest;  // each slice's guest extents
    std::vector<std::vector<uint8_t>> bounce;            // for slices over several extents
    std::vector<RegionPin> pins;
  };
  // A CKPT_QUIESCE registration of this session: it holds its regions.
  struct QuiesceReg {
    checkpoint::TenantId tenant = 0;
    std::vector<RegionPin> pins;
  };
  uint32_t ResolveCkptSlices(const std::vector<hz_slice>& slices, bool write, CkptSpans* out,
                             uint32_t* detail);
  Reply CkptQuiesce(const Request& req, checkpoint::TenantId tid);
  void DropQuiesce(uint32_t stream);
  // The session's end for its checkpoint state (called by Teardown): drops
  // the quiescence registrations and stops every CKPT_SAVE/RESTORE in flight
  // from touching guest memory before it returns.
  void DropAllQuiesce();
  // A CKPT_SAVE or CKPT_RESTORE running on a checkpoint-engine thread, so
  // that its copy and disk reads never hold up the connection's executor.
  struct CkptOp;
  Reply StartCkptOp(vdev::Queue& q, const Request& req, std::shared_ptr<CkptOp> op);
  void OnCkptDone(uint64_t id);
  void StopCkptOps();

  // Fills posted event buffers from the subscription (hz_device_events.cc).
  void FillEvents();
  // Completes every held event buffer unused (SPEC §2.8): drain, ring stop.
  void ReturnEventBuffers();

  Reply CommUid(const Request& req);
  Reply CommInit(vdev::Queue& q, const Request& req);
  Reply CommDestroyOrAbort(const Request& req);
  void OnInitDone(uint64_t op_id, coll::Status status, MemberPtr member);
  void OnOpDone(uint64_t op_id, coll::Status status);

  // Resolves one slice of a collective into host spans.
  uint32_t ResolveSlice(const Request& req, const hz_slice& s, uint64_t need, bool write,
                        coll::IoVec* out, Pending* p);

  DeviceEnv env_;
  std::shared_ptr<Tenant> tenant_;
  uint64_t tenant_id_;
  std::string socket_path_;
  std::shared_ptr<Link> link_;
  std::array<Handler, 256> families_{};

  // Executor state.
  vdev::DeviceContext* ctx_ = nullptr;
  std::array<QueueSlot, HZ_VQ_REQUEST_BASE + HZ_MAX_REQUEST_QUEUES> queues_{};
  uint64_t next_gen_ = 1;
  bool hello_ = false;
  bool drained_ = false;
  uint64_t features_ = 0;
  uint64_t session_id_ = 0;
  RegionTable regions_;
  std::map<uint64_t, CommEntry> comms_;  // handle -> membership
  uint64_t next_handle_ = 1;
  std::map<uint64_t, std::shared_ptr<Pending>> pending_;
  uint64_t next_op_ = 1;
  std::vector<std::pair<vdev::Chain, uint64_t>> events_;  // held buffers and their queue gen
  std::unique_ptr<EventSubscription> delivery_;           // the session's subscription
  std::map<uint32_t, QuiesceReg> quiesce_;                // stream -> registration
  std::map<uint64_t, std::shared_ptr<CkptOp>> ckpt_ops_;  // CKPT_SAVE/RESTORE in flight
  uint64_t next_ckpt_op_ = 1;

  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<uint64_t> in_flight_{0};

  mutable std::mutex info_mu_;
  DeviceInfo info_;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_HZ_DEVICE_H_
