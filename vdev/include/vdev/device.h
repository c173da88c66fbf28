// The interface between vdev (generic vhost-user plumbing) and a device
// implementation such as harmonaized's per-VM device or the test echo device.
//
// Data flows one way: vdev validates ring entries and hands the device a Chain
// of host views over guest memory; the device completes the Chain with the
// number of bytes it wrote. Nothing here knows what the bytes mean.
#ifndef VDEV_DEVICE_H_
#define VDEV_DEVICE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vdev {

class MemoryMap;
class SplitQueue;
// Chains and device-held translations keep the mappings they point into alive,
// so a SET_MEM_TABLE or REM_MEM_REG never unmaps memory still in use.
using MemoryMapPtr = std::shared_ptr<const MemoryMap>;

// A contiguous host view of guest bytes.
struct Segment {
  uint8_t* data = nullptr;
  size_t len = 0;
};

// One validated descriptor chain: readable segments first, then writable ones.
// Lengths and bounds were checked against the memory map by vdev.
//
// The segments live in one array, readable then writable, held inline for
// the usual short chain (no allocation, and refilling a Chain in place costs
// a few stores); longer chains spill to the heap. The spans readable() and
// writable() return stay valid until the Chain is refilled, assigned, moved
// from or destroyed.
class Chain {
 public:
  // Segments held without a heap allocation.
  static constexpr uint32_t kInlineSegments = 8;

  Chain() = default;
  // Builds a chain by hand (devices' tests); copies the segments.
  Chain(uint16_t head, const std::vector<Segment>& readable, const std::vector<Segment>& writable,
        MemoryMapPtr memory);
  Chain(const Chain& other);
  Chain& operator=(const Chain& other);
  Chain(Chain&& other) noexcept;
  Chain& operator=(Chain&& other) noexcept;
  ~Chain() = default;

  uint16_t head() const { return head_; }
  std::span<const Segment> readable() const { return {segments_, num_readable_}; }
  std::span<const Segment> writable() const {
    return {segments_ + num_readable_, num_segments_ - num_readable_};
  }
  size_t readable_bytes() const { return readable_bytes_; }
  size_t writable_bytes() const { return writable_bytes_; }
  const MemoryMapPtr& memory() const { return memory_; }

  // Gathers up to len readable bytes starting at offset; returns bytes copied.
  size_t Read(size_t offset, void* dst, size_t len) const;
  // Scatters up to len bytes into the writable part at offset; returns bytes copied.
  size_t Write(size_t offset, const void* src, size_t len) const;

 private:
  // Empties the segment list, keeping its capacity.
  void ClearSegments() {
    num_segments_ = 0;
    num_readable_ = 0;
  }
  void Append(Segment s) {
    if (num_segments_ == capacity_) [[unlikely]]
      Grow();
    segments_[num_segments_++] = s;
  }
  // Doubles the capacity (moving to the heap when it leaves the inline array).
  [[gnu::noinline]] void Grow();
  // Replaces the segments with a copy of r followed by w.
  void AssignSegments(std::span<const Segment> r, std::span<const Segment> w);
  void CopyFrom(const Chain& other);

  uint16_t head_ = 0;
  uint32_t num_segments_ = 0;
  uint32_t num_readable_ = 0;  // the first num_readable_ segments are readable
  uint32_t capacity_ = kInlineSegments;
  Segment* segments_ = inline_;  // inline_ or heap_.get()
  size_t readable_bytes_ = 0;
  size_t writable_bytes_ = 0;
  MemoryMapPtr memory_;
  // Which started instance of a ring the chain was popped from, so completing
  // it after the ring stopped (or restarted) is recognised and ignored.
  uint64_t ring_id_ = 0;
  std::unique_ptr<Segment[]> heap_;
  Segment inline_[kInlineSegments];

  // The queue refills a Chain in place, reusing its segment capacity.
  friend class SplitQueue;
};

// The device's handle on one started virtqueue. Every method must be called on
// the connection's executor (see DeviceContext::Post).
class Queue {
 public:
  virtual ~Queue() = default;
  virtual uint16_t index() const = 0;
  virtual uint16_t size() const = 0;
  // Pops the next available chain into *out. Returns false when the ring is
  // empty or stopped. A malformed chain is logged, completed with length 0 and
  // skipped; it never reaches the device.
  virtual bool Pop(Chain* out) = 0;
  // Puts a chain on the used ring. Publication is batched until Flush().
  // Completing a chain of a queue that was stopped since it was popped is a
  // no-op: the ring it belonged to is gone.
  virtual void Complete(const Chain& chain, uint32_t written) = 0;
  // Publishes pending used entries and notifies the driver unless
  // notifications are suppressed (EVENT_IDX / NO_INTERRUPT).
  virtual void Flush() = 0;
  // Hands a popped chain back unserved (a live upgrade is freezing the
  // session: Device::OnQueueFreezing). The chain stays the back-end's, and
  // Pop yields it again before anything new: in this process if the
  // hand-over does not happen, else in the successor. Only for chains the
  // device has not acted on, since they will be served from scratch.
  virtual void Return(const Chain& chain) = 0;

  // Batch forms for devices that serve many small chains per kick: the same
  // results as the loops below (which are the defaults), with the queue's
  // per-call checks paid once per batch.
  //
  // Pops up to out.size() chains into out[0, n) and returns n; fewer than
  // out.size() means Pop would have returned false next. The contents of
  // out[n, out.size()) are unspecified afterwards.
  virtual size_t PopBatch(std::span<Chain> out) {
    size_t n = 0;
    while (n < out.size() && Pop(&out[n])) ++n;
    return n;
  }
  // Complete(chains[i], written[i]) for every i, in order; the spans have the
  // same size.
  virtual void CompleteBatch(std::span<const Chain> chains, std::span<const uint32_t> written) {
    for (size_t i = 0; i < chains.size(); ++i) Complete(chains[i], written[i]);
  }
};

// What vdev gives a device for the lifetime of one front-end connection.
class DeviceContext {
 public:
  virtual ~DeviceContext() = default;
  // Runs fn on the connection's executor; safe from any thread. Completions
  // produced by worker threads come back through here.
  virtual void Post(std::function<void()> fn) = 0;
  // The current guest memory map (may be empty before SET_MEM_TABLE).
  virtual MemoryMapPtr Memory() const = 0;
  // Raises a config-change interrupt when the front-end supports it.
  virtual void NotifyConfigChanged() = 0;
  // Serves ring `queue` by polling for a while instead of waiting for
  // kicks, for a device that expects the driver's next chain soon (a
  // low-latency client between its operations): the driver is asked not to
  // kick, and the ring is polled until `window` passes with nothing new on
  // it, after which kicks are asked for again. Each call restarts the
  // window; the longest asked for holds. Polling ends by itself, so an idle
  // ring costs nothing. Polling starts only while the driver polls the ring
  // for its completions too (it asked for no interrupt): one that sleeps
  // until interrupted sends its next chain after a wake-up, not at once. A
  // ring polled for good anyway is left as it is. On the executor.
  virtual void PollAwhile(uint16_t /*queue*/, std::chrono::microseconds /*window*/) {}
  // Crash recovery (crash_recovery.h): the device's durable state changed;
  // the journal is written again (Device::DurableState), before this
  // returns. On the executor. Nothing happens without a journal.
  virtual void StateChanged() {}
};

// A device implementation. vdev calls these on the connection's executor.
class Device {
 public:
  virtual ~Device() = default;

  // Device feature bits to offer (device-specific bits and ring features such
  // as VIRTIO_RING_F_EVENT_IDX). vdev adds VIRTIO_F_VERSION_1 and
  // VHOST_USER_F_PROTOCOL_FEATURES itself.
  virtual uint64_t Features() const = 0;
  virtual uint16_t NumQueues() const = 0;
  virtual uint16_t MaxQueueSize() const { return 1024; }
  // The whole config space; GET_CONFIG serves byte ranges of it.
  virtual std::vector<uint8_t> ConfigSpace() const = 0;
  // SET_CONFIG: the driver writes bytes [offset, offset+data.size()) of the
  // config space (range already checked against ConfigSpace()). Return false
  // to refuse (read-only fields); the default refuses everything.
  virtual bool SetConfig(uint32_t /*offset*/, std::span<const uint8_t> /*data*/) { return false; }

  virtual void OnConnect(DeviceContext& /*ctx*/) {}
  virtual void OnFeatures(uint64_t /*acked*/) {}
  virtual void OnMemory(const MemoryMapPtr& /*memory*/) {}
  // The queue is started and enabled; the reference is valid until
  // OnQueueStopped for the same index.
  virtual void OnQueueStarted(Queue& /*queue*/) {}
  virtual void OnQueueStopped(uint16_t /*index*/) {}
  // The front-end is stopping the queue (GET_VRING_BASE) while the device
  // still holds chains popped from it. Pop finds nothing from now on, but
  // Complete and Flush still work: finish or hand back (length 0) what it
  // holds, now or through later Posts. vdev waits for those completions, up to
  // SessionOptions::stop_drain_timeout, before it answers and stops the queue;
  // completions after that are dropped. Devices that hold buffers
  // indefinitely (event queues) should complete them here.
  virtual void OnQueueStopping(Queue& /*queue*/) {}
  // The driver kicked the queue (or the busy-poll loop found work).
  virtual void OnKick(Queue& queue) = 0;
  // RESET_DEVICE, SET_STATUS 0 or disconnect: drop all per-driver state.
  virtual void OnReset() {}
  virtual void OnDisconnect() {}

  // Live upgrade (session_snapshot.h). A hand-over is freezing the
  // session: complete, or hand back with Queue::Return, every chain of this
  // queue the device holds, now or through later Posts (event queues hand
  // back the buffers they keep). The hand-over waits, bounded, until no
  // chain is in flight that was not returned.
  virtual void OnQueueFreezing(Queue& /*queue*/) {}
  // The device's state goes into the
  // snapshot as opaque bytes, taken while the session is quiescent (no chain
  // in flight); the successor's device gets it back after OnConnect and
  // OnMemory, before any queue starts. RestoreState returns false for state
  // it cannot take (the hand-over is then refused). The defaults suit a
  // device with no state of its own.
  virtual bool SaveState(std::string* /*state*/) const { return true; }
  virtual bool RestoreState(std::string_view state) { return state.empty(); }
  // Crash recovery (crash_recovery.h). DurableState is what the device
  // needs when the process serving it crashed and the next one goes on:
  // written to the server's journal whenever the session changes or the
  // device calls DeviceContext::StateChanged(). RecoverState gets it back in
  // the next process, after OnConnect and OnMemory, before any queue starts;
  // false refuses it (the session is then closed). Chains in flight at the
  // crash are served again, so a request the device had finished but not
  // completed is seen twice. The defaults suit a device with no state.
  virtual std::string DurableState() const { return {}; }
  virtual bool RecoverState(std::string_view state) { return state.empty(); }
  // The session was handed to a successor: let go of everything without
  // telling anyone (no completions, no notifications, nothing left behind
  // for other sessions to see), since the successor carries on from here.
  virtual void OnHandedOver() {}
};

// Creates one Device per accepted connection (one connection per VM).
using DeviceFactory = std::function<std::unique_ptr<Device>(const std::string& socket_path)>;

}  // namespace vdev

#endif  // VDEV_DEVICE_H_
