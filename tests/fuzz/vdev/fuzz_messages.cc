// Fuzzes vhost-user message handling: a byte stream is framed by
// MessageReader and dispatched by a Session serving the echo device, with
// real file descriptors attached where the input asks for them.
//
// Input: a sequence of steps. Each step is a control byte, then up to Want()
// stream bytes. Control byte: bits 0-3 number of fds to attach (values above
// 9 mean none), bits 4-5 fd kind (0 eventfd, 1 guest RAM memfd, 2 socket,
// 3 /dev/null), bit 6 feed a single byte only (short reads).
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>

#include "spdlog/spdlog.h"
#include "vdev/echo_device.h"
#include "vdev/message.h"
#include "vdev/session.h"

namespace {

constexpr size_t kGuestRam = 1 << 16;

class NullHost : public vdev::SessionHost {
 public:
  void Post(std::function<void()>) override {}
  void WatchKick(uint16_t, int) override {}
  void UnwatchKick(uint16_t) override {}
  void SetPolling(bool) override {}
  bool SendBackendMessage(int, const std::vector<uint8_t>&) override { return true; }
};

struct GuestRam {
  GuestRam() {
    fd = memfd_create("vdev-fuzz-ram", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd >= 0 && ftruncate(fd, kGuestRam) == 0) {
      void* p = mmap(nullptr, kGuestRam, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) view = static_cast<uint8_t*>(p);
    }
  }
  int fd = -1;
  uint8_t* view = nullptr;
};

GuestRam& Ram() {
  static GuestRam ram;
  return ram;
}

int GuestRamFd() {
  return Ram().fd;
}

int MakeFd(int kind) {
  switch (kind) {
    case 0:
      return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    case 1:
      return fcntl(GuestRamFd(), F_DUPFD_CLOEXEC, 0);
    case 2: {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
      close(sv[1]);
      return sv[0];
    }
    default:
      return open("/dev/null", O_RDWR | O_CLOEXEC);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The back-end writes ring fields into guest RAM; start every input from
  // the same (zeroed) memory so runs are reproducible.
  if (Ram().view != nullptr) std::memset(Ram().view, 0, kGuestRam);
  NullHost host;
  vdev::SessionOptions options;
  options.max_mem_slots = 4;
  auto device = std::make_unique<vdev::EchoDevice>(
      vdev::EchoDevice::Options{.queues = 2, .config_size = 16, .max_queue_size = 256});
  vdev::Session session(std::move(device), &host, options, "fuzz");
  session.Start();
  vdev::MessageReader reader;
  size_t pos = 0;
  while (pos < size) {
    uint8_t ctl = data[pos++];
    size_t want = reader.Want();
    size_t chunk = std::min(want, size - pos);
    if (ctl & 0x40) chunk = std::min<size_t>(chunk, 1);
    std::vector<vdev::UniqueFd> fds;
    int nfds = ctl & 0xf;
    if (nfds > 9) nfds = 0;
    for (int i = 0; i < nfds; ++i) fds.emplace_back(MakeFd((ctl >> 4) & 3));
    vdev::Error e = reader.Feed(data + pos, chunk, &fds);
    pos += chunk;
    if (!e.empty()) break;
    if (!reader.Ready()) continue;
    vdev::Session::Result r = session.Handle(reader.Take());
    if (r.close) break;
    // Whatever rings the stream started get walked over the guest RAM.
    for (uint16_t q = 0; q < session.num_queues(); ++q) session.Kick(q);
    session.Poll();
  }
  session.Disconnect();
  return 0;
}
