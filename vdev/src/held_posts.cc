#include "held_posts.h"

#include <utility>

namespace vdev {
namespace {

thread_local HeldPosts* t_open = nullptr;

}  // namespace

HeldPosts::HeldPosts() {
  if (t_open != nullptr) return;
  outermost_ = true;
  t_open = this;
}

HeldPosts::~HeldPosts() {
  if (!outermost_) return;
  running_ = true;
  for (std::function<void()>& fn : held_) fn();
  t_open = nullptr;
}

bool HeldPosts::Holding(boost::asio::io_context& io) {
  return t_open != nullptr && !t_open->running_ && io.get_executor().running_in_this_thread();
}

void HeldPosts::Hold(std::function<void()> fn) {
  t_open->held_.push_back(std::move(fn));
}

}  // namespace vdev
