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

bool HeldPosts::Hold(boost::asio::io_context& io, std::function<void()>& fn) {
  if (t_open == nullptr || t_open->running_ || !io.get_executor().running_in_this_thread()) {
    return false;
  }
  t_open->held_.push_back(std::move(fn));
  return true;
}

}  // namespace vdev
