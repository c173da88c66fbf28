#include "vdev/post_batch.h"

#include <boost/asio/post.hpp>

namespace vdev {
namespace {

thread_local PostBatch* t_open = nullptr;

}  // namespace

PostBatch::PostBatch() {
  if (t_open != nullptr) return;
  outermost_ = true;
  t_open = this;
}

PostBatch::~PostBatch() {
  if (!outermost_) return;
  t_open = nullptr;
  for (auto& [io, fns] : held_) {
    boost::asio::post(*io, [fns = std::move(fns)] {
      for (const std::function<void()>& fn : fns) fn();
    });
  }
}

void PostBatch::Post(boost::asio::io_context& io, std::function<void()> fn) {
  if (t_open == nullptr) {
    boost::asio::post(io, std::move(fn));
    return;
  }
  auto& held = t_open->held_;
  auto it = held.begin();
  while (it != held.end() && it->first != &io) ++it;
  if (it == held.end()) it = held.insert(held.end(), {&io, {}});
  it->second.push_back(std::move(fn));
}

bool PostBatch::Open() {
  return t_open != nullptr;
}

}  // namespace vdev
