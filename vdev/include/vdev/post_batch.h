// Work that one thread posts to connection threads in a burst, handed to
// each of those threads in one go.
//
// A connection thread woken by a post may take the CPU from the thread that
// posted (the kernel places a woken thread on a CPU running only idle-class
// work as on an idle one, and the idle-class thread gives it up at once);
// it then serves what it got and polls for more while the poster waits. A
// collectives worker posting one operation's completions to each rank's VM
// one by one was preempted after each post and waited out a polling window
// each time: about a tenth of a millisecond per rank on a 2-CPU host. While
// a PostBatch is open on a thread, PostBatch::Post holds that thread's posts;
// when the batch ends, each io_context gets one handler that runs all of its
// share in order, so each connection thread wakes once.
#ifndef VDEV_POST_BATCH_H_
#define VDEV_POST_BATCH_H_

#include <functional>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

namespace vdev {

class PostBatch {
 public:
  // Opens a batch on the calling thread; one opened inside another joins it.
  PostBatch();
  // Posts what the batch holds (the outermost batch only).
  ~PostBatch();
  PostBatch(const PostBatch&) = delete;
  PostBatch& operator=(const PostBatch&) = delete;

  // Runs fn on io: held until the calling thread's batch ends when one is
  // open, posted at once otherwise. Any thread.
  static void Post(boost::asio::io_context& io, std::function<void()> fn);
  // Whether the calling thread has a batch open.
  static bool Open();

 private:
  bool outermost_ = false;
  std::vector<std::pair<boost::asio::io_context*, std::vector<std::function<void()>>>> held_;
};

}  // namespace vdev

#endif  // VDEV_POST_BATCH_H_
