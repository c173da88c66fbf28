// The bus's writer thread: rewrites tenants' state files (cursors,
// approvals) off the threads that acknowledge events, so an EVENT_ACK never
// makes a VM's connection thread wait for the disk.
//
// A job writes one tenant's state once and says whether more is due (acks
// arrived meanwhile); it then goes to the back of the queue, so each tenant
// with acks waiting gets one write in turn, and every ack that arrived during
// a write is persisted by that tenant's next single write.
#ifndef HZ_EVENTS_SRC_STATE_WRITER_H_
#define HZ_EVENTS_SRC_STATE_WRITER_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace hz::events {

class StateWriter {
 public:
  // Writes once; true when the job has more to write.
  using Job = std::function<bool()>;

  StateWriter();
  ~StateWriter();
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;

  // Queues job; false, dropping it, once Stop() began.
  bool Schedule(Job job);
  // Runs every job queued (and what they find to write meanwhile) to the
  // end, then ends the thread. Later Schedule calls fail.
  void Stop();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace hz::events

#endif  // HZ_EVENTS_SRC_STATE_WRITER_H_
