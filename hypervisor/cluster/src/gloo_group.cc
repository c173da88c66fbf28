// InterHostGroup on Gloo: TCP transport on the data address, rendezvous
// through the cluster store (GlooStore), Gloo's own collective algorithms.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "gloo_store.h"
#include "hz/cluster/inter_host.h"

namespace hz::cluster {

namespace {

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// Gloo reports failures by throwing; each becomes a Status here. Gloo's
// messages say "Timed out" for a member that never answered.
Status FromGloo(const std::exception& e) {
  const std::string what = e.what();
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

// bfloat16 reductions for Gloo: in fp32, rounded once per step.
template <typename Combine>
void Bf16Reduce(void* c, const void* a, const void* b, size_t n) {
  auto* out = static_cast<uint16_t*>(c);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = ToBf16(Combine()(FromBf16(x[i]), FromBf16(y[i])));
}

struct Min {
  float operator()(float a, float b) const { return std::min(a, b); }
};
struct Max {
  float operator()(float a, float b) const { return std::max(a, b); }
};

ReduceFn Bf16ReduceFor(InterHostOp op) {
  switch (op) {
    case InterHostOp::kSum:
      return &Bf16Reduce<std::plus<float>>;
    case InterHostOp::kProd:
      return &Bf16Reduce<std::multiplies<float>>;
    case InterHostOp::kMin:
      return &Bf16Reduce<Min>;
    case InterHostOp::kMax:
      return &Bf16Reduce<Max>;
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
        return Reduce(static_cast<float*>(data), count, op, algorithm);
      case InterHostType::kF64:
        return Reduce(static_cast<double*>(data), count, op, algorithm);
      case InterHostType::kI8:
        return Reduce(static_cast<int8_t*>(data), count, op, algorithm);
      case InterHostType::kU8:
        return Reduce(static_cast<uint8_t*>(data), count, op, algorithm);
      case InterHostType::kI32:
        return Reduce(static_cast<int32_t*>(data), count, op, algorithm);
      case InterHostType::kU32:
        return Reduce(static_cast<uint32_t*>(data), count, op, algorithm);
      case InterHostType::kI64:
        return Reduce(static_cast<int64_t*>(data), count, op, algorithm);
      case InterHostType::kU64:
        return Reduce(static_cast<uint64_t*>(data), count, op, algorithm);
      case InterHostType::kBF16:
        return Reduce(static_cast<uint16_t*>(data), count, op, algorithm, Bf16ReduceFor(op));
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

 private:
  template <typename T>
  Status Reduce(T* data, size_t count, InterHostOp op, InterHostAlgorithm algorithm,
                ReduceFn fn = nullptr) {
    if (fn == nullptr) fn = ReduceFor<T>(op);
    if (fn == nullptr) return Status::InvalidArgument("inter-host leg: unknown reduction");
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
  bool broken_ = false;
};

}  // namespace

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float FromBf16(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

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
