#include "vdev/echo_device.h"

#include <algorithm>
#include <cstring>

namespace vdev {

EchoDevice::EchoDevice(Options options) : options_(options) {
  uint32_t size = std::min(options_.config_size, vu::kMaxConfigSize);
  config_.resize(size);
  const uint8_t head[kReadOnlyConfigBytes] = {'E',
                                              'C',
                                              'H',
                                              'O',
                                              static_cast<uint8_t>(options_.queues & 0xff),
                                              static_cast<uint8_t>(options_.queues >> 8),
                                              0,
                                              0};
  for (uint32_t i = 0; i < size; ++i) {
    config_[i] = i < kReadOnlyConfigBytes ? head[i] : static_cast<uint8_t>(i & 0xff);
  }
}

bool EchoDevice::SetConfig(uint32_t offset, std::span<const uint8_t> data) {
  if (offset < kReadOnlyConfigBytes) return false;
  std::copy(data.begin(), data.end(), config_.begin() + offset);
  return true;
}

bool EchoDevice::SaveState(std::string* state) const {
  state->assign(config_.begin(), config_.end());
  return true;
}

bool EchoDevice::RestoreState(std::string_view state) {
  // Another configuration (size, queue count) is another device.
  if (state.size() != config_.size() ||
      !std::equal(config_.begin(),
                  config_.begin() + std::min<size_t>(config_.size(), kReadOnlyConfigBytes),
                  reinterpret_cast<const uint8_t*>(state.data()))) {
    return false;
  }
  config_.assign(state.begin(), state.end());
  return true;
}

namespace {

// Any number of segments on either side.
[[gnu::noinline]] size_t EchoSegments(const Chain& chain, size_t total) {
  const std::span<const Segment> src = chain.readable();
  const std::span<const Segment> dst = chain.writable();
  size_t si = 0, so = 0, di = 0, dof = 0, done = 0;
  while (done < total) {
    // Skip exhausted (or zero-length) segments.
    while (so == src[si].len) {
      ++si;
      so = 0;
    }
    while (dof == dst[di].len) {
      ++di;
      dof = 0;
    }
    size_t n = std::min({src[si].len - so, dst[di].len - dof, total - done});
    std::memmove(dst[di].data + dof, src[si].data + so, n);
    so += n;
    dof += n;
    done += n;
  }
  return total;
}

// EchoChain, inline for OnKick's loop.
[[gnu::always_inline]] inline size_t Echo(const Chain& chain) {
  const size_t total = std::min(chain.readable_bytes(), chain.writable_bytes());
  const std::span<const Segment> src = chain.readable();
  const std::span<const Segment> dst = chain.writable();
  // The usual request/response chain: one buffer each way.
  if (src.size() == 1 && dst.size() == 1) [[likely]] {
    std::memmove(dst[0].data, src[0].data, total);
    return total;
  }
  return EchoSegments(chain, total);
}

}  // namespace

size_t EchoChain(const Chain& chain) {
  return Echo(chain);
}

void EchoDevice::OnKick(Queue& queue) {
  uint64_t total = 0;
  for (;;) {
    const size_t n = queue.PopBatch(chains_);
    for (size_t i = 0; i < n; ++i) written_[i] = static_cast<uint32_t>(Echo(chains_[i]));
    queue.CompleteBatch({chains_, n}, {written_, n});
    total += n;
    if (n < kBatch) break;  // the queue has nothing more for this turn
  }
  chains_echoed_.fetch_add(total, std::memory_order_relaxed);
  queue.Flush();
}

}  // namespace vdev
