// Helpers to drive a Session (or a socket) with the messages a front-end sends.
#ifndef VDEV_TESTS_UNIT_SESSION_UTIL_H_
#define VDEV_TESTS_UNIT_SESSION_UTIL_H_

#include <sys/eventfd.h>

#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "vdev/echo_device.h"
#include "vdev/message.h"
#include "vdev/session.h"

namespace vdev::testing {

template <typename T>
Message Msg(uint32_t request, const T& payload, bool need_reply = false) {
  Message m;
  m.header = {request, vu::kVersion | (need_reply ? vu::kFlagNeedReply : 0u),
              static_cast<uint32_t>(sizeof(T))};
  std::memcpy(m.payload, &payload, sizeof(T));
  return m;
}

inline Message Msg0(uint32_t request, bool need_reply = false) {
  Message m;
  m.header = {request, vu::kVersion | (need_reply ? vu::kFlagNeedReply : 0u), 0};
  return m;
}

inline Message WithFd(Message m, int fd) {
  m.fds.emplace_back(fd);
  return m;
}

struct ParsedReply {
  vu::Header header{};
  std::vector<uint8_t> payload;
  uint64_t u64() const {
    uint64_t v = 0;
    if (payload.size() == 8) std::memcpy(&v, payload.data(), 8);
    return v;
  }
};

inline ParsedReply Parse(const std::vector<uint8_t>& bytes) {
  ParsedReply r;
  if (bytes.size() < sizeof(vu::Header)) return r;
  std::memcpy(&r.header, bytes.data(), sizeof(vu::Header));
  r.payload.assign(bytes.begin() + sizeof(vu::Header), bytes.end());
  return r;
}

// A device that echoes like EchoDevice and records its callbacks.
class RecordingDevice : public Device {
 public:
  explicit RecordingDevice(uint16_t queues = 2, uint32_t config_size = 16)
      : echo_(EchoDevice::Options{.queues = queues, .config_size = config_size}) {}
  uint64_t Features() const override { return echo_.Features(); }
  uint16_t NumQueues() const override { return echo_.NumQueues(); }
  std::vector<uint8_t> ConfigSpace() const override { return echo_.ConfigSpace(); }
  bool SetConfig(uint32_t offset, std::span<const uint8_t> data) override {
    return echo_.SetConfig(offset, data);
  }
  void OnConnect(DeviceContext& ctx) override { ctx_ = &ctx; }
  void OnFeatures(uint64_t f) override { features = f; }
  void OnMemory(const MemoryMapPtr& m) override { memory_updates++, memory = m; }
  void OnQueueStarted(Queue& q) override { events.push_back("start" + std::to_string(q.index())); }
  void OnQueueStopped(uint16_t i) override { events.push_back("stop" + std::to_string(i)); }
  void OnQueueStopping(Queue& q) override {
    events.push_back("stopping" + std::to_string(q.index()));
  }
  void OnKick(Queue& q) override {
    ++kicks;
    if (complete_by_post) {
      // Like a device that finishes a request on the spot and answers it
      // through its executor (DeviceContext::Post).
      HoldAll(q);
      if (before_post) before_post();
      ctx_->Post([this] {
        events.push_back("completed");
        CompleteHeld();
      });
      return;
    }
    if (!hold) {
      echo_.OnKick(q);
      return;
    }
    // Like a device whose requests complete later (worker threads).
    HoldAll(q);
  }
  void HoldAll(Queue& q) {
    Chain c;
    while (q.Pop(&c)) held.push_back(c);
    held_queue = &q;
  }
  void CompleteHeld() {
    for (const Chain& c : held) held_queue->Complete(c, static_cast<uint32_t>(EchoChain(c)));
    held.clear();
    held_queue->Flush();
  }
  void OnReset() override { ++resets; }
  void OnDisconnect() override { ++disconnects; }

  uint64_t chains() const { return echo_.chains(); }
  DeviceContext* ctx_ = nullptr;
  uint64_t features = 0;
  int memory_updates = 0;
  MemoryMapPtr memory;
  std::vector<std::string> events;
  int kicks = 0;
  int resets = 0;
  int disconnects = 0;
  bool hold = false;
  bool complete_by_post = false;
  std::function<void()> before_post;  // with complete_by_post: runs before the post
  std::vector<Chain> held;
  Queue* held_queue = nullptr;

 private:
  EchoDevice echo_;
};

class FakeHost : public SessionHost {
 public:
  void Post(std::function<void()> fn) override { posted.push_back(std::move(fn)); }
  void WatchKick(uint16_t queue, int fd) override { watched[queue] = fd; }
  void UnwatchKick(uint16_t queue) override { watched.erase(queue); }
  void SetPolling(bool on) override { polling = on; }
  std::vector<std::function<void()>> posted;
  std::map<uint16_t, int> watched;
  bool polling = false;
};

}  // namespace vdev::testing

#endif  // VDEV_TESTS_UNIT_SESSION_UTIL_H_
