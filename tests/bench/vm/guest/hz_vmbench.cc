// One rank of the VM all-reduce benchmark (tests/bench/vm), run inside a
// guest: the same fp32 SUM all-reduce, same sizes and iteration counts,
// first through the HarmonAIze device (libharmonaize over /dev/harmonaize0,
// buffers from hz_mem_alloc) and then with Gloo's ring all-reduce over the
// guests' virtio-net (the tcp transport bound to this guest's address).
//
//   hz_vmbench --rank R --self IP --root IP [--port P] [--sizes B,B,..]
//              [--iters N] [--warmup W]
//
// Rendezvous: rank 0 serves a small key-value store over TCP on --root:--port
// (Gloo's FileStore cannot span VMs); rank 0 puts the device communicator's
// uid there and Gloo exchanges its pair addresses through it. Each timed
// phase is barrier; t0; N all-reduces; t1. Every result is checked (sum of
// rank+1 over both ranks). One line per size:
//   HZ-BENCH: {"rank":R,"size":B,"iters":N,"device_us":..,"gloo_us":..,"check":"ok"}
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "harmonaize/hz.h"
#include "transport.h"

namespace hz::lib {
// The guest has no virtio-user transport: a "vhost-user:" spec is refused.
int OpenVirtioUser(const std::string&, std::unique_ptr<Transport>*) {
  return HZ_ENOTSUP;
}
}  // namespace hz::lib

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::printf("hz_vmbench: FAIL: %s\n", what.c_str());
  std::fflush(stdout);
  _exit(1);
}

bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool ReadString(int fd, std::string* s) {
  uint32_t len = 0;
  if (!ReadAll(fd, &len, sizeof(len)) || len > (64u << 20)) return false;
  s->resize(len);
  return ReadAll(fd, s->data(), len);
}

bool WriteString(int fd, const std::string& s) {
  uint32_t len = static_cast<uint32_t>(s.size());
  return WriteAll(fd, &len, sizeof(len)) && WriteAll(fd, s.data(), s.size());
}

// Rank 0's key-value server: 'S' key value -> 'k'; 'G' key -> value once set
// (waits up to 60 s; an empty reply with status 'x' on timeout).
class StoreServer {
 public:
  explicit StoreServer(int listen_fd) : listen_fd_(listen_fd) {
    std::thread([this] { Accept(); }).detach();
  }

 private:
  void Accept() {
    for (;;) {
      int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      std::thread([this, fd] { Serve(fd); }).detach();
    }
  }

  void Serve(int fd) {
    char op = 0;
    std::string key, value;
    while (ReadAll(fd, &op, 1) && ReadString(fd, &key)) {
      if (op == 'S') {
        if (!ReadString(fd, &value)) break;
        {
          std::lock_guard<std::mutex> l(mu_);
          kv_[key] = value;
        }
        cv_.notify_all();
        if (!WriteAll(fd, "k", 1)) break;
      } else if (op == 'G') {
        std::unique_lock<std::mutex> l(mu_);
        bool found = cv_.wait_for(l, std::chrono::seconds(60), [&] { return kv_.count(key) > 0; });
        value = found ? kv_[key] : std::string();
        l.unlock();
        if (!WriteAll(fd, found ? "v" : "x", 1) || !WriteString(fd, value)) break;
      } else {
        break;
      }
    }
    close(fd);
  }

  int listen_fd_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> kv_;
};

sockaddr_in Addr(const std::string& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) Die("bad address " + ip);
  return a;
}

// The client side, as Gloo's rendezvous store.
class TcpStore : public gloo::rendezvous::Store {
 public:
  TcpStore(const std::string& root, uint16_t port) {
    sockaddr_in a = Addr(root, port);
    // Rank 0's guest may still be booting: retry for up to 120 s.
    for (int i = 0; i < 1200; ++i) {
      fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd_ < 0) Die("socket");
      if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return;
      close(fd_);
      usleep(100 * 1000);
    }
    Die("no store at " + root);
  }

  void set(const std::string& key, const std::vector<char>& data) override {
    char ack = 0;
    if (!WriteAll(fd_, "S", 1) || !WriteString(fd_, key) ||
        !WriteString(fd_, std::string(data.begin(), data.end())) || !ReadAll(fd_, &ack, 1) ||
        ack != 'k')
      throw std::runtime_error("store set " + key);
  }

  std::vector<char> get(const std::string& key) override {
    char st = 0;
    std::string v;
    if (!WriteAll(fd_, "G", 1) || !WriteString(fd_, key) || !ReadAll(fd_, &st, 1) ||
        !ReadString(fd_, &v) || st != 'v')
      throw std::runtime_error("store get " + key);
    return std::vector<char>(v.begin(), v.end());
  }

  void wait(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) get(k);
  }

 private:
  int fd_ = -1;
};

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void HzOk(int rc, const char* what) {
  if (rc != HZ_OK) Die(std::string(what) + ": " + hz_strerror(rc));
}

bool AllEqual(const float* v, size_t n, float want) {
  for (size_t i = 0; i < n; ++i)
    if (v[i] != want) return false;
  return true;
}

std::vector<size_t> ParseSizes(const std::string& list) {
  std::vector<size_t> out;
  size_t pos = 0;
  while (pos < list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    unsigned long long b = std::strtoull(list.substr(pos, comma - pos).c_str(), nullptr, 10);
    if (b < sizeof(float) || b % sizeof(float) != 0 || b > (256ull << 20))
      Die("--sizes: each size must be a multiple of 4 bytes, at most 256 MiB");
    out.push_back(static_cast<size_t>(b));
    pos = comma + 1;
  }
  if (out.empty()) Die("--sizes is empty");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int rank = -1, iters = 5, warmup = 1;
  std::string self, root;
  uint16_t port = 29500;
  std::vector<size_t> sizes = {64 << 10, 1 << 20, 8 << 20};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--rank")
      rank = std::atoi(v.c_str());
    else if (k == "--self")
      self = v;
    else if (k == "--root")
      root = v;
    else if (k == "--port")
      port = static_cast<uint16_t>(std::atoi(v.c_str()));
    else if (k == "--sizes")
      sizes = ParseSizes(v);
    else if (k == "--iters")
      iters = std::atoi(v.c_str());
    else if (k == "--warmup")
      warmup = std::atoi(v.c_str());
    else
      Die("unknown option " + k);
  }
  if ((rank != 0 && rank != 1) || self.empty() || root.empty() || iters < 1 || iters > 10000 ||
      warmup < 0 || warmup > 100 || port == 0)
    Die("usage: hz_vmbench --rank 0|1 --self IP --root IP [--port P] [--sizes B,..] "
        "[--iters N] [--warmup W]");
  const int nranks = 2;
  const float want = 3.0f;  // (0 + 1) + (1 + 1)

  if (rank == 0) {
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a = Addr(root, port);
    if (lfd < 0 || bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        listen(lfd, 16) != 0)
      Die("store listen on " + root + ": " + std::strerror(errno));
    new StoreServer(lfd);  // lives until the process exits
  }
  TcpStore store(root, port);

  // The device side: one communicator of two ranks, one rank per VM.
  size_t max_bytes = 0;
  for (size_t s : sizes) max_bytes = std::max(max_bytes, s);
  hz_device_t* dev = nullptr;
  HzOk(hz_open(nullptr, &dev), "hz_open");
  void* mem = nullptr;
  HzOk(hz_mem_alloc(dev, 2 * max_bytes, &mem), "hz_mem_alloc");
  hz_uid_t uid;
  if (rank == 0) {
    HzOk(hz_comm_get_uid(dev, &uid), "hz_comm_get_uid");
    const char* p = reinterpret_cast<const char*>(&uid);
    store.set("hz-uid", std::vector<char>(p, p + sizeof(uid)));
  } else {
    std::vector<char> v = store.get("hz-uid");
    if (v.size() != sizeof(uid)) Die("bad uid in the store");
    std::memcpy(&uid, v.data(), sizeof(uid));
  }
  hz_comm_t* comm = nullptr;
  HzOk(hz_comm_init(dev, &uid, nranks, static_cast<uint32_t>(rank), nullptr, &comm),
       "hz_comm_init");
  std::printf("hz_vmbench: rank %d: device communicator of %d ranks ready\n", rank, nranks);

  // The Gloo side over virtio-net.
  gloo::rendezvous::PrefixStore gstore("gloo", store);
  gloo::transport::tcp::attr attr(self.c_str());
  attr.ai_family = AF_INET;
  auto gdev = gloo::transport::tcp::CreateDevice(attr);
  auto gctx = std::make_shared<gloo::rendezvous::Context>(rank, nranks);
  gctx->setTimeout(std::chrono::seconds(120));
  gctx->connectFullMesh(gstore, gdev);
  std::shared_ptr<gloo::Context> ctx = gctx;
  std::printf("hz_vmbench: rank %d: gloo connected over %s\n", rank, self.c_str());

  float* dsend = static_cast<float*>(mem);
  float* drecv = dsend + max_bytes / sizeof(float);
  bool all_ok = true;
  for (size_t bytes : sizes) {
    const size_t n = bytes / sizeof(float);
    // Device: registered send and receive buffers.
    std::fill(dsend, dsend + n, static_cast<float>(rank + 1));
    for (int i = 0; i < warmup; ++i)
      HzOk(hz_allreduce(comm, dsend, drecv, n, HZ_FP32, HZ_SUM), "hz_allreduce");
    HzOk(hz_barrier(comm), "hz_barrier");
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i)
      HzOk(hz_allreduce(comm, dsend, drecv, n, HZ_FP32, HZ_SUM), "hz_allreduce");
    auto t1 = std::chrono::steady_clock::now();
    const double device_s = Seconds(t0, t1) / iters;
    const bool device_ok = AllEqual(drecv, n, want);

    // Gloo: the same reduction, ring algorithm, over TCP.
    std::vector<float> gsend(n, static_cast<float>(rank + 1)), grecv(n, 0.0f);
    auto gloo_allreduce = [&] {
      gloo::AllreduceOptions o(ctx);
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      o.setInput(gsend.data(), n);
      o.setOutput(grecv.data(), n);
      o.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      gloo::allreduce(o);
    };
    for (int i = 0; i < warmup; ++i) gloo_allreduce();
    gloo::BarrierOptions b(ctx);
    gloo::barrier(b);
    auto g0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) gloo_allreduce();
    auto g1 = std::chrono::steady_clock::now();
    const double gloo_s = Seconds(g0, g1) / iters;
    const bool gloo_ok = AllEqual(grecv.data(), n, want);

    const bool ok = device_ok && gloo_ok;
    all_ok &= ok;
    std::printf(
        "HZ-BENCH: {\"rank\":%d,\"size\":%zu,\"iters\":%d,\"device_us\":%.1f,\"gloo_us\":%.1f,"
        "\"check\":\"%s\"}\n",
        rank, bytes, iters, device_s * 1e6, gloo_s * 1e6,
        ok ? "ok" : (device_ok ? "gloo FAILED" : "device FAILED"));
  }
  // Neither rank leaves before both are done with the other's buffers.
  gloo::BarrierOptions b(ctx);
  gloo::barrier(b);
  HzOk(hz_comm_destroy(comm), "hz_comm_destroy");
  HzOk(hz_mem_free(dev, mem), "hz_mem_free");
  hz_close(dev);
  std::printf("hz_vmbench: rank %d: %s\n", rank, all_ok ? "done" : "FAILED");
  std::fflush(stdout);
  _exit(all_ok ? 0 : 1);  // the store's threads are still blocked in accept/read
}
