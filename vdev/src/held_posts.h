// Work that a handler of a one-thread io_context posts to that same
// io_context, run as the handler ends instead of behind its queue.
//
// A connection thread that completes an operation on the spot (a small
// collective whose last rank it just served) hands each rank's VM its
// completion through the connection's Post. Posted, each completion waits
// behind the io_context's queue: an epoll_wait and the strands' bookkeeping,
// about 3 us of a 2-rank 4 KiB all-reduce's critical path on a 2-CPU host,
// where a rank that yields its CPU comes round every 5 us. Held, they run
// when the handler that posted them ends, in the order posted.
//
// Only for an io_context that this one thread runs: nothing else can then be
// inside the receiving connection's strand meanwhile, and what that strand
// has queued runs after, as it would have had the post come a moment
// earlier. What held work posts in turn is not held again: it goes through
// the queue, so a chain of handlers (a turn that grants the next) cannot
// keep the thread from its other work.
#ifndef VDEV_HELD_POSTS_H_
#define VDEV_HELD_POSTS_H_

#include <functional>
#include <vector>

#include <boost/asio/io_context.hpp>

namespace vdev {

class HeldPosts {
 public:
  // Opens a scope on the calling thread, or joins the one open.
  HeldPosts();
  // The outermost scope runs what it holds.
  ~HeldPosts();
  HeldPosts(const HeldPosts&) = delete;
  HeldPosts& operator=(const HeldPosts&) = delete;

  // Whether work posted to io now would be held: a scope is open on this
  // thread, which is running io, and the scope is not running what it held.
  static bool Holding(boost::asio::io_context& io);
  // Holds fn; only while Holding(the io_context fn is for).
  static void Hold(std::function<void()> fn);

 private:
  bool outermost_ = false;
  bool running_ = false;
  std::vector<std::function<void()>> held_;
};

}  // namespace vdev

#endif  // VDEV_HELD_POSTS_H_
