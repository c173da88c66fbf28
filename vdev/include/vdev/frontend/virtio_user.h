// A user-space virtio driver speaking vhost-user as the front-end
// ("virtio-user"): it lets a host process or a container drive a vhost-user
// back-end the way a VM's driver would, with memfd-backed guest memory and
// split virtqueues laid out in it.
//
// Typical use:
//   vdev::frontend::VirtioUser dev;
//   VirtioUser::Options opt;  opt.config_size = 64;
//   Status s = dev.Connect("/run/dev.sock", opt);
//   uint64_t req_gpa, resp_gpa;
//   void* req = dev.Allocate(64, &req_gpa);   void* resp = dev.Allocate(64, &resp_gpa);
//   Buffer in{req_gpa, 64}, out{resp_gpa, 64};
//   dev.AddChain(0, {&in, 1}, {&out, 1}, /*cookie=*/7);
//   dev.Kick(0);
//   Completion c[8]; size_t n;
//   dev.WaitUsed(0, std::chrono::seconds(1), c, 8, &n);
//
// Threading:
//   - Control-plane calls (memory changes, config reads, StopQueue/StartQueue,
//     Stop) are serialized internally and may come from any thread.
//   - Data-path calls for one queue (AddChain, Kick, PollUsed, WaitUsed) must
//     come from one thread at a time; different queues may be driven from
//     different threads concurrently. StopQueue/StartQueue of a queue must not
//     overlap data-path calls on that queue.
//   - Connect, Disconnect and destruction must not overlap any other call.
//
// Memory: guest memory outlives connections. Extra regions (for example a
// tenant's shared memfd arena) are added with AddMemory/AddMemoryFd at any
// time; while connected they are registered with the back-end at once
// (ADD_MEM_REG when CONFIGURE_MEM_SLOTS is negotiated, else a new
// SET_MEM_TABLE).
#ifndef VDEV_FRONTEND_VIRTIO_USER_H_
#define VDEV_FRONTEND_VIRTIO_USER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "vdev/frontend/channel.h"
#include "vdev/frontend/guest_memory.h"
#include "vdev/frontend/split_ring.h"
#include "vdev/frontend/status.h"

namespace vdev::frontend {

// A buffer named by its address in this process (it must lie in guest memory).
struct HostBuffer {
  const void* data = nullptr;
  uint32_t len = 0;
};

class VirtioUser {
 public:
  struct Options {
    // Queues to set up; 0 means every queue the back-end offers.
    uint16_t num_queues = 0;
    uint16_t queue_size = 256;
    // Device-specific feature bits the driver accepts. VERSION_1 and the
    // ring features below are handled by the front-end itself.
    uint64_t driver_features = 0;
    bool event_idx = true;  // negotiate VIRTIO_RING_F_EVENT_IDX if offered
    bool indirect = true;   // negotiate VIRTIO_RING_F_INDIRECT_DESC if offered
    // No kick/call eventfds (vhost-user NOFD): the back-end polls the avail
    // rings and the caller polls the used rings.
    bool busy_poll = false;
    // Config-space bytes fetched at connect time (0: none). Needs F_CONFIG.
    uint32_t config_size = 0;
    // Size of the allocatable guest memory created on first connect; rings
    // and Allocate() come from it.
    uint64_t memory_size = 4ull << 20;
    std::chrono::milliseconds reply_timeout{2000};
    std::chrono::milliseconds connect_timeout{2000};
  };

  VirtioUser();
  ~VirtioUser();
  VirtioUser(const VirtioUser&) = delete;
  VirtioUser& operator=(const VirtioUser&) = delete;

  // Connects and brings the device up, in QEMU's order: GET_FEATURES,
  // GET/SET_PROTOCOL_FEATURES, GET_QUEUE_NUM, GET_MAX_MEM_SLOTS, SET_OWNER,
  // GET_CONFIG, SET_FEATURES, SET_MEM_TABLE, then per queue
  // SET_VRING_NUM/BASE/ADDR/KICK/CALL and SET_VRING_ENABLE. Every queue is
  // started with empty rings. On failure the connection is closed.
  Status Connect(const std::string& socket_path, const Options& options);
  // Stops every started queue (GET_VRING_BASE) and closes the connection.
  Status Stop();
  // Closes the connection without telling the back-end anything more. The
  // rings' memory returns to the allocator; call Stop() first when the
  // back-end may still be processing them.
  void Disconnect();
  bool connected() const { return connected_.load(std::memory_order_acquire); }

  uint64_t device_features() const { return device_features_; }
  uint64_t features() const { return features_; }  // negotiated
  uint64_t protocol_features() const { return protocol_features_; }
  bool has_protocol_feature(uint64_t bit) const { return (protocol_features_ >> bit) & 1; }
  uint16_t num_queues() const { return static_cast<uint16_t>(queues_.size()); }
  uint16_t max_queues() const { return max_queues_; }  // back-end's GET_QUEUE_NUM
  uint64_t max_mem_slots() const { return max_mem_slots_; }
  const Options& options() const { return options_; }

  // Config space fetched at connect time, and a fresh GET_CONFIG.
  const std::vector<uint8_t>& config() const { return config_; }
  Status ReadConfig(uint32_t offset, uint32_t size, void* out);

  // Guest memory.
  GuestMemory& memory() { return memory_; }
  void* Allocate(size_t len, uint64_t* gpa = nullptr, size_t align = 64) {
    return memory_.Allocate(len, align, gpa);
  }
  void Free(void* p) { memory_.Free(p); }
  Status AddMemory(uint64_t size, bool allocatable, RegionInfo* out, uint64_t gpa = 0);
  Status AddMemoryFd(int fd, uint64_t offset, uint64_t size, RegionInfo* out, uint64_t gpa = 0);
  // Unregisters the region at gpa from the back-end, then unmaps it. Refused
  // (with nothing sent) while Allocate() memory, such as the rings, lives in
  // it. Chains still in flight that point into it are the caller's problem:
  // the back-end completes them with length 0 once the region is gone.
  Status RemoveMemory(uint64_t gpa);

  // Data path. AddChain queues a chain (not yet visible); Kick publishes all
  // queued chains of the queue and notifies the back-end if it asked to be.
  // (Inline: the busy-poll data path adds chains at tens of millions a second.)
  [[gnu::always_inline]] Status AddChain(uint16_t queue, std::span<const Buffer> readable,
                                         std::span<const Buffer> writable, uint64_t cookie = 0,
                                         uint16_t* head = nullptr, bool indirect = false) {
    if (queue >= queues_.size()) [[unlikely]] {
      return NoSuchQueue();
    }
    return queues_[queue].ring->AddChain(readable, writable, cookie, indirect, head);
  }
  // Queues a batch of direct chains (SplitRing::AddChains): cheaper per
  // chain than AddChain when a caller posts many at once. Stops at the first
  // chain AddChain would refuse; *added counts those queued before it.
  Status AddChains(uint16_t queue, std::span<const ChainBuffers> chains, size_t* added) {
    if (queue >= queues_.size()) [[unlikely]] {
      *added = 0;
      return NoSuchQueue();
    }
    return queues_[queue].ring->AddChains(chains, added);
  }
  Status AddChain(uint16_t queue, std::span<const HostBuffer> readable,
                  std::span<const HostBuffer> writable, uint64_t cookie = 0,
                  uint16_t* head = nullptr, bool indirect = false);
  Status Kick(uint16_t queue);
  // How many times Kick notified the back-end on that queue: publishing
  // when the back-end polls the ring notifies nobody.
  uint64_t kicks_sent(uint16_t queue) const {
    return queue < queues_.size() ? queues_[queue].kicks_sent : 0;
  }
  // Collects completions without waiting. *error (optional) is set when the
  // back-end wrote a bogus used entry.
  size_t PollUsed(uint16_t queue, Completion* out, size_t max, Status* error = nullptr);
  // Waits until at least one completion arrives (sleeping on the call eventfd,
  // or spinning in busy-poll mode), the timeout passes (kTimeout) or the
  // back-end goes away (kDisconnected). In interrupt mode it first spins
  // for up to `spin` (within the timeout) with the device's notifications
  // off: a completion that arrives meanwhile costs neither side a wake-up.
  // That spin yields the CPU on every pass, so a thread that shares it (the
  // back-end's, another rank) runs at once.
  Status WaitUsed(uint16_t queue, std::chrono::nanoseconds timeout, Completion* out, size_t max,
                  size_t* n, std::chrono::nanoseconds spin = std::chrono::nanoseconds(0));

  // Ring lifecycle. StopQueue sends GET_VRING_BASE and returns the index of
  // the next avail entry the back-end would have processed; StartQueue
  // re-sends NUM/ADDR/BASE/KICK/CALL/ENABLE, resuming at base.
  Status StopQueue(uint16_t queue, uint16_t* base);
  Status StartQueue(uint16_t queue, uint16_t base);

  SplitRing& ring(uint16_t queue) { return *queues_[queue].ring; }
  int kick_fd(uint16_t queue) const { return queues_[queue].kick_fd; }
  int call_fd(uint16_t queue) const { return queues_[queue].call_fd; }

 private:
  struct Queue {
    std::unique_ptr<SplitRing> ring;
    int kick_fd = -1;
    int call_fd = -1;
    bool started = false;
    bool broken = false;  // the back-end wrote a bogus used entry
    uint64_t kicks_sent = 0;
  };

  // Sends a message that has no reply of its own; with REPLY_ACK it asks for
  // and checks the ack.
  Status Request(uint32_t request, const void* payload, uint32_t size,
                 std::span<const int> fds = {});
  Status RequestU64(uint32_t request, uint64_t value, std::span<const int> fds = {});
  Status Query(uint32_t request, void* reply, uint32_t size);
  Status GetU64(uint32_t request, uint64_t* value);
  Status SendMemTable();
  Status RegisterRegion(const RegionInfo& region);
  Status ReadConfigLocked(uint32_t offset, uint32_t size, void* out);
  Status StartQueueLocked(uint16_t queue, uint16_t base);
  Status Handshake(const std::string& socket_path);
  Status CheckQueue(uint16_t queue) const;
  static Status NoSuchQueue();
  size_t PollQueue(Queue& q, Completion* out, size_t max, Status* error);
  void CloseQueues();

  Options options_;
  GuestMemory memory_;
  bool memory_created_ = false;

  std::mutex mu_;  // control plane: the channel and queue set-up
  Channel channel_;
  std::atomic<bool> connected_{false};

  uint64_t device_features_ = 0;
  uint64_t features_ = 0;
  uint64_t protocol_features_ = 0;
  uint16_t max_queues_ = 0;
  uint64_t max_mem_slots_ = 0;
  std::vector<uint8_t> config_;
  std::vector<Queue> queues_;
};

}  // namespace vdev::frontend

#endif  // VDEV_FRONTEND_VIRTIO_USER_H_
