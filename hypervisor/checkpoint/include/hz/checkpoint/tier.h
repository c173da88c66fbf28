// A persistent tier: where the background worker writes a sealed snapshot's
// chunks and commits its manifest. The local disk (DiskTier) is the one Tier.
// The peer-host tier is not a Tier of the worker's: it copies a checkpoint
// once the local disk has committed it (peer.h), so that staging memory is
// never held for a remote host, and the receiving host commits the copy
// through its own DiskTier.
//
// The host-memory tier is not a Tier: it is the staging pool keeping a sealed
// snapshot instead of releasing it (see engine.h).
//
// A Tier is driven by one thread (the engine's persist worker) except Commit,
// which runs on a commit thread (one commit at a time) so a commit's flushes
// do not hold up other checkpoints' writes, and Read and Remove, which may run
// concurrently on any thread.
#ifndef HZ_CHECKPOINT_TIER_H_
#define HZ_CHECKPOINT_TIER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "hz/checkpoint/manifest.h"
#include "hz/checkpoint/types.h"

namespace hz::checkpoint {

class Tier {
 public:
  struct Completion {
    uint64_t token = 0;
    Status status = Status::Ok();
  };

  virtual ~Tier() = default;
  virtual TierKind kind() const = 0;

  // Prepares storage for checkpoint m (uncommitted until Commit).
  virtual Status BeginWrite(const Manifest& m, uint64_t* write_id) = 0;

  // Queues chunk `index` of the write: `padded` bytes at `data` (4096-aligned,
  // zero-padded past the chunk's length). buf_index is the registered buffer
  // holding data, or -1. Its completion carries `token`.
  virtual Status SubmitChunk(uint64_t write_id, uint64_t index, const uint8_t* data, size_t padded,
                             int buf_index, uint64_t token) = 0;

  virtual size_t InFlight() const = 0;
  virtual size_t QueueDepth() const = 0;

  // Collects finished chunk writes. With wait_us > 0 and writes in flight,
  // waits up to wait_us for at least one.
  virtual void Poll(uint64_t wait_us, std::vector<Completion>* out) = 0;

  // Makes a fully written checkpoint durable and visible, atomically.
  virtual Status Commit(uint64_t write_id, const Manifest& m) = 0;

  // Drops an uncommitted write (its chunks must have completed).
  virtual void Abort(uint64_t write_id) = 0;

  // Reads the payload of a committed checkpoint into dst (at least
  // m.padded_bytes(), 4096-aligned). Checksums are the caller's to verify.
  virtual Status Read(const Manifest& m, uint8_t* dst, size_t dst_len) = 0;

  // Removes a committed checkpoint.
  virtual Status Remove(TenantNo tenant, StreamId stream, uint64_t step) = 0;

  // Lists committed checkpoints and removes what interrupted writes left;
  // `cleaned` names the removed paths.
  virtual Status Recover(std::vector<Manifest>* committed, std::vector<std::string>* cleaned) = 0;
};

}  // namespace hz::checkpoint

#endif  // HZ_CHECKPOINT_TIER_H_
