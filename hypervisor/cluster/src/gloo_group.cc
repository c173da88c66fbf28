// InterHostGroup on Gloo: TCP transport on the data address, rendezvous
// through the cluster store (GlooStore), Gloo's own collective algorithms,
// and point-to-point through unbound buffers on slots of their own.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <set>

#include "gloo_store.h"
#include "hz/cluster/inter_host.h"
#include "hz/common/half.h"

namespace hz::cluster {

namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// Point-to-point slots: a prefix no Gloo collective uses. Its collectives
// build theirs as Slot::build(prefix, tag) with the prefixes 0x01..0x08 of
// gloo/types.h in the top byte, and Context::nextSlot counts up from 0.
constexpr uint64_t kPointToPointSlots = uint64_t{0xc5} << 56;

// Gloo reports failures by throwing; each becomes a Status here. Gloo's
// messages say "Timed out" for a member that never answered; a timed-out
// wait closes every connection of the group, and the other operations then
// fail with "Application timeout caused pair closure".
Status FromGloo(const std::exception& e) {
  const std::string what = e.what();
  if (what.find("Application timeout caused pair closure") != std::string::npos) {
    return Status::Aborted("inter-host leg: another operation of the group timed out");
  }
  if (what.find("Timed out") != std::string::npos || what.find("timed out") != std::string::npos) {
    return Status::TimedOut("inter-host leg: " + what);
  }
  return Status::IoError("inter-host leg: " + what);
}

template <typename T>
ReduceFn ReduceFor(InterHostOp op) {
  switch (op) {
    case InterHostOp::kSum:
      return &gloo::sum<T>;
    case InterHostOp::kProd:
      return &gloo::product<T>;
    case InterHostOp::kMin:
      return &gloo::min<T>;
    case InterHostOp::kMax:
      return &gloo::max<T>;
  }
  return nullptr;
}

// 16-bit float reductions for Gloo: in fp32, rounded once per step.
template <float (*kToFloat)(uint16_t), uint16_t (*kFromFloat)(float), typename Combine>
void HalfReduce(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<uint16_t*>(c);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = kFromFloat(Combine()(kToFloat(x[i]), kToFloat(y[i])));
}

// As the engine's kernels: the first operand is kept on ties and NaN.
struct Min {
  float operator()(float a, float b) const { return b < a ? b : a; }
};
struct Max {
  float operator()(float a, float b) const { return a < b ? b : a; }
};

// The same in place (x = x op y), as Gloo's halving-doubling takes it.
template <float (*kToFloat)(uint16_t), uint16_t (*kFromFloat)(float), typename Combine>
void HalfReduceInPlace(uint16_t* x, const uint16_t* y, size_t n) {
  HalfReduce<kToFloat, kFromFloat, Combine>(x, x, y, n);
}

template <typename T>
const gloo::ReductionFunction<T>* InPlaceFor(InterHostOp op) {
  switch (op) {
    case InterHostOp::kSum:
      return gloo::ReductionFunction<T>::sum;
    case InterHostOp::kProd:
      return gloo::ReductionFunction<T>::product;
    case InterHostOp::kMin:
      return gloo::ReductionFunction<T>::min;
    case InterHostOp::kMax:
      return gloo::ReductionFunction<T>::max;
  }
  return nullptr;
}

template <float (*kToFloat)(uint16_t), uint16_t (*kFromFloat)(float)>
const gloo::ReductionFunction<uint16_t>* HalfInPlaceFor(InterHostOp op) {
  using Fn = gloo::ReductionFunction<uint16_t>;
  static const Fn sum(gloo::CUSTOM, &HalfReduceInPlace<kToFloat, kFromFloat, std::plus<float>>);
  static const Fn prod(gloo::CUSTOM,
                       &HalfReduceInPlace<kToFloat, kFromFloat, std::multiplies<float>>);
  static const Fn min(gloo::CUSTOM, &HalfReduceInPlace<kToFloat, kFromFloat, Min>);
  static const Fn max(gloo::CUSTOM, &HalfReduceInPlace<kToFloat, kFromFloat, Max>);
  switch (op) {
    case InterHostOp::kSum:
      return &sum;
    case InterHostOp::kProd:
      return &prod;
    case InterHostOp::kMin:
      return &min;
    case InterHostOp::kMax:
      return &max;
  }
  return nullptr;
}

template <float (*kToFloat)(uint16_t), uint16_t (*kFromFloat)(float)>
ReduceFn HalfReduceFor(InterHostOp op) {
  switch (op) {
    case InterHostOp::kSum:
      return &HalfReduce<kToFloat, kFromFloat, std::plus<float>>;
    case InterHostOp::kProd:
      return &HalfReduce<kToFloat, kFromFloat, std::multiplies<float>>;
    case InterHostOp::kMin:
      return &HalfReduce<kToFloat, kFromFloat, Min>;
    case InterHostOp::kMax:
      return &HalfReduce<kToFloat, kFromFloat, Max>;
  }
  return nullptr;
}

class GlooGroup : public InterHostGroup {
 public:
  GlooGroup(std::shared_ptr<gloo::Context> context, std::unique_ptr<GlooStore> store)
      : context_(std::move(context)), store_(std::move(store)) {}

  uint32_t rank() const override { return static_cast<uint32_t>(context_->rank); }
  uint32_t size() const override { return static_cast<uint32_t>(context_->size); }

  Status AllReduce(void* data, size_t count, InterHostType type, InterHostOp op,
                   InterHostAlgorithm algorithm) override {
    switch (type) {
      case InterHostType::kF32:
        return Native(static_cast<float*>(data), count, op, algorithm);
      case InterHostType::kF64:
        return Native(static_cast<double*>(data), count, op, algorithm);
      case InterHostType::kI8:
        return Native(static_cast<int8_t*>(data), count, op, algorithm);
      case InterHostType::kU8:
        return Native(static_cast<uint8_t*>(data), count, op, algorithm);
      case InterHostType::kI32:
        return Native(static_cast<int32_t*>(data), count, op, algorithm);
      case InterHostType::kU32:
        return Native(static_cast<uint32_t*>(data), count, op, algorithm);
      case InterHostType::kI64:
        return Native(static_cast<int64_t*>(data), count, op, algorithm);
      case InterHostType::kU64:
        return Native(static_cast<uint64_t*>(data), count, op, algorithm);
      case InterHostType::kBF16:
        return Reduce(static_cast<uint16_t*>(data), count, algorithm,
                      HalfReduceFor<Bf16ToFloat, FloatToBf16>(op),
                      HalfInPlaceFor<Bf16ToFloat, FloatToBf16>(op));
      case InterHostType::kF16:
        return Reduce(static_cast<uint16_t*>(data), count, algorithm,
                      HalfReduceFor<HalfToFloat, FloatToHalf>(op),
                      HalfInPlaceFor<HalfToFloat, FloatToHalf>(op));
    }
    return Status::InvalidArgument("inter-host leg: unknown element type");
  }

  Status Broadcast(void* data, size_t bytes, uint32_t root) override {
    if (root >= size()) return Status::InvalidArgument("inter-host leg: root out of range");
    return Run([&] {
      gloo::BroadcastOptions o(context_);
      o.setOutput(static_cast<uint8_t*>(data), bytes);
      o.setRoot(static_cast<int>(root));
      gloo::broadcast(o);
    });
  }

  Status AllGather(const void* in, void* out, size_t bytes) override {
    return Run([&] {
      gloo::AllgatherOptions o(context_);
      o.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(in)), bytes);
      o.setOutput(static_cast<uint8_t*>(out), bytes * size());
      gloo::allgather(o);
    });
  }

  Status Barrier() override {
    return Run([&] {
      gloo::BarrierOptions o(context_);
      gloo::barrier(o);
    });
  }

  // Gloo moves an unbound buffer's bytes only once the receiver has posted
  // its recv (it announces it to the sender), so a send never lands in
  // memory nobody waits with; a pair's lock serialises these with the
  // collectives' transfers, on slots of their own.
  Status Send(uint32_t peer, uint64_t tag, const void* data, size_t bytes,
              std::chrono::milliseconds timeout) override {
    if (peer >= size() || tag >= kMaxTag)
      return Status::InvalidArgument("inter-host leg: bad send");
    return PointToPoint(const_cast<void*>(data), bytes, [&](gloo::transport::UnboundBuffer& b) {
      b.send(static_cast<int>(peer), kPointToPointSlots | tag);
      return b.waitSend(timeout);
    });
  }

  Status Recv(uint32_t peer, uint64_t tag, void* data, size_t bytes,
              std::chrono::milliseconds timeout) override {
    if (peer >= size() || tag >= kMaxTag)
      return Status::InvalidArgument("inter-host leg: bad recv");
    return PointToPoint(data, bytes, [&](gloo::transport::UnboundBuffer& b) {
      b.recv(static_cast<int>(peer), kPointToPointSlots | tag);
      return b.waitRecv(timeout);
    });
  }

  void Close() override {
    std::lock_guard<std::mutex> lock(waits_mu_);
    if (closed_) return;
    closed_ = true;
    broken_ = true;
    // Gloo's own abort of a wait; the buffer's thread then returns.
    for (gloo::transport::UnboundBuffer* b : waits_) {
      b->abortWaitSend();
      b->abortWaitRecv();
    }
    context_->closeConnections();
  }

 private:
  // A send or recv on an unbound buffer that Close can abort while it waits
  // (wait returns false then).
  template <typename F>
  Status PointToPoint(void* data, size_t bytes, F&& post_and_wait) {
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    {
      std::lock_guard<std::mutex> lock(waits_mu_);
      if (closed_) return Status::Aborted("inter-host leg: the group was closed");
      buffer = context_->createUnboundBuffer(data, bytes);
      waits_.insert(buffer.get());
    }
    bool completed = false;
    Status s = Run([&] { completed = post_and_wait(*buffer); });
    std::lock_guard<std::mutex> lock(waits_mu_);
    waits_.erase(buffer.get());
    if (s.ok() && !completed) return Status::Aborted("inter-host leg: the group was closed");
    return s;
  }

  template <typename T>
  Status Native(T* data, size_t count, InterHostOp op, InterHostAlgorithm algorithm) {
    return Reduce(data, count, algorithm, ReduceFor<T>(op), InPlaceFor<T>(op));
  }

  // Ring and bcube through Gloo's allreduce (fn: c = a op b); halving and
  // doubling through its algorithm class of that name (in_place: x = x op y).
  template <typename T>
  Status Reduce(T* data, size_t count, InterHostAlgorithm algorithm, ReduceFn fn,
                const gloo::ReductionFunction<T>* in_place) {
    if (fn == nullptr || in_place == nullptr) {
      return Status::InvalidArgument("inter-host leg: unknown reduction");
    }
    if (algorithm == InterHostAlgorithm::kHalvingDoubling) {
      return Run([&] {
        gloo::AllreduceHalvingDoubling<T> hd(context_, {data}, static_cast<int>(count), in_place);
        hd.run();
      });
    }
    return Run([&] {
      gloo::AllreduceOptions o(context_);
      o.setAlgorithm(algorithm == InterHostAlgorithm::kBcube
                         ? gloo::AllreduceOptions::Algorithm::BCUBE
                         : gloo::AllreduceOptions::Algorithm::RING);
      o.setOutput(data, count);
      o.setReduceFunction(fn);
      gloo::allreduce(o);
    });
  }

  template <typename F>
  Status Run(F&& f) {
    if (broken_) return Status::Aborted("inter-host leg: the group failed earlier");
    try {
      f();
      return Status::Ok();
    } catch (const std::exception& e) {
      broken_ = true;
      return FromGloo(e);
    }
  }

  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<GlooStore> store_;
  std::atomic<bool> broken_{false};  // point-to-point runs on other threads
  std::mutex waits_mu_;
  bool closed_ = false;
  std::set<gloo::transport::UnboundBuffer*> waits_;  // point-to-point waiting now
};

}  // namespace

StatusOr<std::unique_ptr<InterHostGroup>> ConnectGlooGroup(const GlooGroupOptions& o) {
  if (o.size == 0 || o.rank >= o.size) {
    return Status::InvalidArgument("inter-host leg: rank must be below size");
  }
  // Rendezvous keys outlive the formation a little, never the store's memory.
  auto store = std::make_unique<GlooStore>(
      o.store, std::min<std::chrono::milliseconds>(o.timeout, std::chrono::seconds(5)), o.timeout,
      o.timeout + std::chrono::minutes(5));
  try {
    gloo::rendezvous::PrefixStore prefixed(o.key, *store);
    gloo::transport::tcp::attr attr(o.data_address.c_str());
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(o.rank),
                                                               static_cast<int>(o.size));
    context->setTimeout(o.timeout);
    context->connectFullMesh(prefixed, device);
    return std::unique_ptr<InterHostGroup>(std::make_unique<GlooGroup>(context, std::move(store)));
  } catch (const std::exception& e) {
    return FromGloo(e);
  }
}

}  // namespace hz::cluster
