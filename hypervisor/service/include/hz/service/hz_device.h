// The HarmonAIze device of one VM connection, on top of vdev.
//
// Queue 0 carries control requests, queue 1 holds event buffers, queues 2..
// carry data requests (collectives). Each request is framed and validated
// (request.h), checked for its queue and the HELLO state, then dispatched by
// opcode family. HELLO and REGION_* belong to the session and are handled
// here; every other family has a handler (family_handler.h) that owns its
// state and talks to one engine interface: collectives (CollBackend),
// checkpoints (CkptBackend), the event queue (EventBackend) and the provider
// side (ProviderBackend). Requests answered later wait in one PendingTable.
// Engine completions come back from engine threads through the DeviceLink,
// so every piece of device state is touched on the connection's executor.
#ifndef HZ_SERVICE_HZ_DEVICE_H_
#define HZ_SERVICE_HZ_DEVICE_H_

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "hz/service/ckpt_backend.h"
#include "hz/service/ckpt_handler.h"
#include "hz/service/coll_backend.h"
#include "hz/service/coll_handler.h"
#include "hz/service/config.h"
#include "hz/service/device_link.h"
#include "hz/service/device_state.h"
#include "hz/service/energy_handler.h"
#include "hz/service/event_backend.h"
#include "hz/service/event_handler.h"
#include "hz/service/family_handler.h"
#include "hz/service/metrics.h"
#include "hz/service/pending_table.h"
#include "hz/service/provider_backend.h"
#include "hz/service/provider_handler.h"
#include "hz/service/region_handler.h"
#include "hz/service/region_table.h"
#include "hz/service/request.h"
#include "hz/service/tenants.h"
#include "protocol/harmonaize.h"
#include "vdev/device.h"

namespace hz::service {

class HzDevice;

// Live devices, for the operator's views and for shutdown (any thread).
// A device is created for a connection and is open until that connection
// closes (OnDisconnect) or the device goes, whichever comes first.
class DeviceRegistry {
 public:
  void Add(HzDevice* d) {
    std::lock_guard<std::mutex> lock(mu_);
    devices_.push_back(d);
    open_++;
  }
  // The device's connection closed and its session ended (once per device).
  void Closed() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--open_ == 0) closed_.notify_all();
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
  // Waits until every device's connection has closed; false if timeout
  // passed first.
  bool WaitAllClosed(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return closed_.wait_for(lock, timeout, [this] { return open_ == 0; });
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable closed_;
  std::vector<HzDevice*> devices_;
  size_t open_ = 0;  // devices whose connection has not closed yet
};

// What every device of the service shares. Each engine sits behind the one
// interface its family handler uses; a null one is not offered to the VMs.
struct DeviceEnv {
  DeviceLimits limits;
  Metrics* metrics = nullptr;  // may be null in tests
  const std::atomic<bool>* draining = nullptr;
  DeviceRegistry* registry = nullptr;   // may be null in tests
  CollBackend* coll = nullptr;          // communicators and collectives
  CkptBackend* ckpt = nullptr;          // checkpoint streams
  EventBackend* events = nullptr;       // event subscriptions
  ProviderBackend* provider = nullptr;  // topology, negotiation, hints
  EnergyBackend* energy = nullptr;      // energy slack
  // Where region registrations are prepared; null: on the connection
  // thread (tests).
  BackgroundExecutor background;
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
  HzDevice(DeviceEnv env, std::shared_ptr<Tenant> tenant, std::string socket_path);
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
  // Live upgrade (hz_device_handoff.cc): the session, its regions,
  // communicators and event subscription go on in the next process.
  void OnQueueFreezing(vdev::Queue& queue) override;
  bool SaveState(std::string* state) const override;
  bool RestoreState(std::string_view state) override;
  void OnHandedOver() override;
  // Crash recovery (vdev/crash_recovery.h), in the same format: the session,
  // its regions and event subscription; its communicators as lost. The
  // journal is written again whenever one of these changes.
  std::string DurableState() const override;
  bool RecoverState(std::string_view state) override { return RestoreState(state); }

  // Runs fn on this device's executor while it is connected; returns false
  // (and drops fn) otherwise. Any thread.
  bool PostToDevice(std::function<void(HzDevice&)> fn);

  // Service shutdown, on the executor: answers every in-flight request and
  // every held event buffer with HZ_S_ESHUTDOWN and reports DRAINING in the
  // config space. Requests arriving later get HZ_S_ESHUTDOWN at once.
  void Drain();

  DeviceInfo Info() const;  // any thread
  const std::string& socket_path() const { return socket_path_; }
  uint64_t in_flight() const { return pending_.in_flight(); }

 private:
  void HandleChain(vdev::Queue& queue, const vdev::Chain& chain);
  // Serves what waits in the request rings (after communicators re-formed).
  void ServeWaiting();
  // The checks every request passes before its family sees it (SPEC §6).
  uint32_t Admit(const vdev::Queue& queue, const Request& req) const;
  // One line per opcode family.
  Reply Dispatch(const vdev::Queue& queue, const Request& req);
  // Completes req at once and counts it (timed from req.taken).
  void Finish(vdev::Queue& queue, const vdev::Chain& chain, const Request& req, const Reply& r);
  uint64_t OfferedFeatures() const;
  // Tells the registry, once, that this device's connection is gone.
  void MarkClosed();
  // What the family handlers share with the device.
  HandlerContext Context();
  // Ends the session: every family answers or forgets its requests in
  // flight and lets go of what it holds, then the regions go.
  void Teardown(SessionEnd end);
  void UpdateInfo();
  // The state document: SaveState's, or with durable the crash journal's.
  bool WriteState(bool durable, std::string* state) const;
  // Asks vdev to write the journal again when the durable state changed.
  void JournalIfChanged();

  // HELLO belongs to the session itself.
  Reply HandleHello(const Request& req);

  DeviceEnv env_;
  std::shared_ptr<Tenant> tenant_;
  std::string socket_path_;
  std::shared_ptr<DeviceLink> link_;

  // Executor state.
  vdev::DeviceContext* ctx_ = nullptr;
  SessionState session_;
  QueueSlots queues_;
  RequestCounters counters_;
  PendingTable pending_;
  RegionTable regions_;  // the session's; handlers resolve slices through it
  RegionHandler region_;
  CollectiveHandler coll_;
  CheckpointHandler ckpt_;
  EventQueueHandler events_;
  ProviderHandler provider_;
  EnergyHandler energy_;
  // Every family handler, for the session hooks, with the name of its part
  // of the state a live upgrade hands over.
  struct Family {
    const char* name;
    FamilyHandler* handler;
  };
  std::array<Family, 6> families_;
  bool closed_ = false;    // told the registry that the connection closed
  std::string journaled_;  // what the journal last saw of the durable state

  mutable std::mutex info_mu_;
  DeviceInfo info_;
};

}  // namespace hz::service

#endif  // HZ_SERVICE_HZ_DEVICE_H_
