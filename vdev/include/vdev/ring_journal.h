// In-flight tracking of one split virtqueue in memory that outlives the
// back-end process, so that a process started after a crash completes every
// request the crashed one had taken, exactly once, and loses none. It is
// the idea of vhost-user's inflight shared memory (VHOST_USER_GET_INFLIGHT_FD,
// libvhost-user's vu_check_queue_inflights), kept by the back-end itself: the
// memory is a memfd the back-end puts in systemd's fd store (fd_store.h),
// since QEMU's generic vhost-user device never reconnects.
//
// The ring writes one byte per chain it takes (the head's mark, set before
// the device sees the chain) and clears the marks of completions only once
// they are published in the used index, recording that index last. After a
// crash, at any instruction:
//   - every avail entry taken is either published in guest memory's used
//     index or still marked, so the next avail entry to take is the used
//     index plus the number of marks (as libvhost-user computes it), plus
//     the entries a stop before this run gave up on (skipped);
//   - completions published after the recorded used index name the heads
//     whose marks may not have been cleared yet: the used entries between
//     the two indices say which;
//   - what is left marked was taken and never completed where the driver
//     can see it: it is served again, once.
// Completions written but not yet published are not seen by the driver and
// are redone. The used ring is guest memory, so a driver can spoil its own
// recovery, never another VM's or the back-end's: every value read back is
// bounds-checked.
#ifndef VDEV_RING_JOURNAL_H_
#define VDEV_RING_JOURNAL_H_

#include <cstddef>
#include <cstdint>

namespace vdev {

// The largest split ring (virtio 1.x: 32768 entries); SplitQueue::kMaxSize.
inline constexpr uint32_t kMaxRingSize = 32768;

struct RingJournal {
  // 0: the ring was not started (nothing to recover); else its size.
  uint16_t size;
  // The used index whose completions' marks are all cleared.
  uint16_t used_idx;
  // Avail entries taken before the ring started and never to be completed:
  // the front-end's base minus the used index then (chains a stop gave up
  // on). The next avail entry is used index + marks + skipped.
  uint16_t skipped;
  uint16_t reserved;
  // Per head: 1 while taken and its completion not published.
  uint8_t marks[kMaxRingSize];
};

inline constexpr size_t kRingJournalBytes = sizeof(RingJournal);

}  // namespace vdev

#endif  // VDEV_RING_JOURNAL_H_
