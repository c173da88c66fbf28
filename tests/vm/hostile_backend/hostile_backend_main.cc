// vm-hostile-backend: a HarmonAIze device that lies, for the guest driver's
// VM tests. Its config space is valid, but every request completes the way
// the first u32 of its arguments asks (enum Misbehaviour below), so a guest
// test can check that the driver never trusts a device-written length,
// status, request id or result length. Event buffers get one short event and
// one well-formed event each time mode kShortEvent is requested. Region
// registrations are answered properly (with a fresh id), so that a test can
// hold regions when the device goes silent (kGoSilent).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "CLI/CLI.hpp"
#include "protocol/harmonaize.h"
#include "spdlog/spdlog.h"
#include "vdev/device.h"
#include "vdev/server.h"

namespace hz::vmtest {

enum Misbehaviour : uint32_t {
  kWellFormed = 0,       // status OK, used length 24
  kUsedBelowResult = 1,  // used length shorter than result_len + 24
  kUsedTooShort = 2,     // used length below the 24-byte status
  kBadStatus = 3,        // status code outside the defined range
  kWrongRequestId = 4,   // request id not the one in the header
  kResultTooLong = 5,    // result_len larger than the result space
  kUsedZero = 6,         // used length 0 (no status)
  kShortEvent = 7,       // as kWellFormed, plus a short and a good event
  kGoSilent = 8,         // as kWellFormed, then no request is ever answered again
};

class HostileDevice final : public vdev::Device {
 public:
  explicit HostileDevice(uint16_t request_queues) : request_queues_(request_queues) {}

  uint64_t Features() const override { return 0; }
  uint16_t NumQueues() const override { return static_cast<uint16_t>(2 + request_queues_); }
  std::vector<uint8_t> ConfigSpace() const override {
    hz_config cfg{};
    cfg.magic = HZ_CONFIG_MAGIC;
    cfg.version_major = HZ_VERSION_MAJOR;
    cfg.version_minor = HZ_VERSION_MINOR;
    cfg.num_request_queues = request_queues_;
    cfg.max_segments = 64;
    cfg.status = HZ_CFG_S_READY;
    cfg.max_regions = 16;
    cfg.max_extents = 256;
    cfg.max_region_bytes = 1ull << 30;
    cfg.max_args_bytes = 4096;
    cfg.event_record_size = sizeof(hz_event);
    cfg.max_comm_ranks = 8;
    std::vector<uint8_t> out(sizeof(cfg));
    std::memcpy(out.data(), &cfg, sizeof(cfg));
    return out;
  }

  void OnKick(vdev::Queue& queue) override {
    vdev::Chain chain;
    if (queue.index() == HZ_VQ_EVENT) {
      while (queue.Pop(&chain)) event_buffers_.push_back(chain);
      return;
    }
    while (queue.Pop(&chain)) Answer(queue, chain);
    queue.Flush();
  }

  void OnQueueStarted(vdev::Queue& queue) override {
    if (queue.index() == HZ_VQ_EVENT) event_queue_ = &queue;
  }
  void OnQueueStopped(uint16_t index) override {
    if (index == HZ_VQ_EVENT) {
      event_queue_ = nullptr;
      event_buffers_.clear();
    }
  }

 private:
  void Answer(vdev::Queue& queue, const vdev::Chain& chain) {
    hz_req_hdr hdr{};
    uint32_t mode = kWellFormed;
    chain.Read(0, &hdr, sizeof(hdr));
    chain.Read(sizeof(hdr), &mode, sizeof(mode));
    if (silent_) {
      held_.push_back(chain);  // never completed
      spdlog::info("hostile: silent: holding opcode {:#x} request {}", hdr.opcode, hdr.request_id);
      return;
    }
    if (hdr.opcode == HZ_OP_REGION_REGISTER) {
      AnswerRegister(queue, chain, hdr);
      return;
    }
    size_t w = chain.writable_bytes();
    if (w < sizeof(hz_status)) {
      queue.Complete(chain, 0);
      return;
    }
    hz_status st{};
    st.status = HZ_S_OK;
    st.request_id = hdr.request_id;
    uint32_t used = sizeof(hz_status);
    switch (mode) {
      case kUsedBelowResult:
        // vdev clamps a used length to the writable part, so the lie about
        // lengths it can tell is this one: a result longer than reported.
        st.result_len = 40;
        used = sizeof(hz_status) + 8;
        break;
      case kUsedTooShort:
        used = 10;
        break;
      case kBadStatus:
        st.status = 999;
        break;
      case kWrongRequestId:
        st.request_id = hdr.request_id + 1;
        break;
      case kResultTooLong:
        st.result_len = static_cast<uint32_t>(w);  // more than w - 24
        used = static_cast<uint32_t>(w);
        break;
      case kUsedZero:
        used = 0;
        break;
      default:
        break;
    }
    chain.Write(w - sizeof(st), &st, sizeof(st));
    spdlog::info("hostile: opcode {:#x} request {} mode {} -> used {} status {}", hdr.opcode,
                 hdr.request_id, mode, used, st.status);
    queue.Complete(chain, used);
    if (mode == kShortEvent) SendEvents();
    if (mode == kGoSilent) {
      silent_ = true;
      spdlog::info("hostile: going silent");
    }
  }

  void AnswerRegister(vdev::Queue& queue, const vdev::Chain& chain, const hz_req_hdr& hdr) {
    size_t w = chain.writable_bytes();
    hz_region_register_result res{};
    hz_status st{};
    st.request_id = hdr.request_id;
    if (w < sizeof(res) + sizeof(st)) {
      queue.Complete(chain, 0);
      return;
    }
    res.region_id = next_region_++;
    st.status = HZ_S_OK;
    st.result_len = sizeof(res);
    chain.Write(0, &res, sizeof(res));
    chain.Write(w - sizeof(st), &st, sizeof(st));
    queue.Complete(chain, static_cast<uint32_t>(sizeof(res) + sizeof(st)));
    spdlog::info("hostile: registered region {}", res.region_id);
  }

  // One event completed with a short length, then one well-formed event.
  void SendEvents() {
    if (event_queue_ == nullptr || event_buffers_.size() < 2) {
      spdlog::warn("hostile: no event buffers posted");
      return;
    }
    hz_event ev{};
    ev.seq = ++event_seq_;
    ev.topic = HZ_TOPIC_MAINTENANCE;
    ev.kind = 1;
    event_buffers_.front().Write(0, &ev, sizeof(ev));
    event_queue_->Complete(event_buffers_.front(), 50);
    event_buffers_.pop_front();
    ev.seq = ++event_seq_;
    event_buffers_.front().Write(0, &ev, sizeof(ev));
    event_queue_->Complete(event_buffers_.front(), sizeof(ev));
    event_buffers_.pop_front();
    event_queue_->Flush();
    spdlog::info("hostile: sent a short event and event {}", ev.seq);
  }

  uint16_t request_queues_;
  vdev::Queue* event_queue_ = nullptr;
  std::deque<vdev::Chain> event_buffers_;
  uint64_t event_seq_ = 0;
  bool silent_ = false;
  std::deque<vdev::Chain> held_;
  uint32_t next_region_ = 1000;  // as a mode (unregistration's first u32): well formed
};

}  // namespace hz::vmtest

int main(int argc, char** argv) {
  CLI::App app{"HarmonAIze device that misbehaves on request (guest driver tests)"};
  std::string socket_path;
  uint16_t request_queues = 1;
  app.add_option("--socket", socket_path, "vhost-user socket path")->required();
  app.add_option("--request-queues", request_queues, "request queues after control and event")
      ->check(CLI::Range(1, HZ_MAX_REQUEST_QUEUES));
  CLI11_PARSE(app, argc, argv);

  boost::asio::io_context io;
  vdev::Server server(io, socket_path, [request_queues](const std::string&) {
    return std::make_unique<hz::vmtest::HostileDevice>(request_queues);
  });
  std::string error;
  if (!server.Start(&error)) {
    spdlog::error("vm-hostile-backend: {}", error);
    return 1;
  }
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (ec) return;
    server.Stop();
    io.stop();
  });
  io.run();
  return 0;
}
