// The local-disk tier: io_uring writes (O_DIRECT, registered staging buffers,
// several in flight), one data file per checkpoint, and a manifest committed
// with a single flush.
//
//   <root>/<tenant>/<stream>/policy.json
//   <root>/<tenant>/<stream>/<step, 20 digits>/data           chunks at i * chunk_bytes
//   <root>/<tenant>/<stream>/<step, 20 digits>/manifest.json  the commit record
//
// A checkpoint is written under "<step>.tmp/" (data, then manifest.json). One
// batch of flushes (data, manifest, the pending directory and the stream
// directory, issued together) makes it durable: that is the commit point, and
// DURABLE follows. Only then is the directory renamed to "<step>/", without a
// flush of its own. So a "<step>/" directory always names durable bytes, and
// start-up treats a "<step>.tmp/" directory as committed exactly when its
// manifest decodes and every chunk of its data verifies (sizes and CRC32C):
// it finishes the rename; otherwise (an interrupted persist) it removes the
// directory. Start-up also removes every "<step>.del/" (a checkpoint that
// retention dropped) and every step directory without a manifest.
//
// Where the filesystem refuses O_DIRECT (tmpfs), files are written through the
// page cache and made durable with fdatasync; a warning is logged once.
#ifndef HZ_CHECKPOINT_DISK_TIER_H_
#define HZ_CHECKPOINT_DISK_TIER_H_

#include <liburing.h>
#include <sys/uio.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "hz/checkpoint/engine.h"
#include "hz/checkpoint/tier.h"

namespace hz::checkpoint {

class DiskTier : public Tier {
 public:
  struct Options {
    std::string root;
    unsigned queue_depth = 16;
    bool direct_io = true;
  };
  struct StreamPolicy {
    TenantNo tenant;
    StreamId stream;
    Policy policy;
  };

  static Status Open(const Options& options, std::unique_ptr<DiskTier>* out);
  ~DiskTier() override;

  // Registers the staging pool with the ring; false (and plain writes) when the
  // kernel refuses, e.g. over the locked-memory limit.
  bool RegisterBuffers(const std::vector<iovec>& buffers);
  bool registered() const { return registered_.load(std::memory_order_acquire); }
  bool direct_io() const { return direct_io_; }

  Status SavePolicy(TenantNo tenant, StreamId stream, const Policy& policy);
  void LoadPolicies(std::vector<StreamPolicy>* out);
  // The highest tenant number among the root's directories (0: none).
  TenantNo HighestTenant() const;
  // The stream directories of a tenant, in order.
  std::vector<StreamId> Streams(TenantNo tenant) const;

  std::string StepDir(TenantNo tenant, StreamId stream, uint64_t step) const;

  TierKind kind() const override { return TierKind::kLocalDisk; }
  Status BeginWrite(const Manifest& m, uint64_t* write_id) override;
  Status SubmitChunk(uint64_t write_id, uint64_t index, const uint8_t* data, size_t padded,
                     int buf_index, uint64_t token) override;
  size_t InFlight() const override { return in_flight_; }
  size_t QueueDepth() const override { return queue_depth_; }
  void Poll(uint64_t wait_us, std::vector<Completion>* out) override;
  Status Commit(uint64_t write_id, const Manifest& m) override;
  void Abort(uint64_t write_id) override;
  Status Read(const Manifest& m, uint8_t* dst, size_t dst_len) override {
    return Read(m, dst, dst_len, {});
  }
  // Read that stops with kCancelled once cancelled() returns true.
  Status Read(const Manifest& m, uint8_t* dst, size_t dst_len,
              const std::function<bool()>& cancelled);
  Status Remove(TenantNo tenant, StreamId stream, uint64_t step) override;
  // The peer-host tier's two ends, beside the io_uring path. ReadChunk reads
  // chunk `index` (m.chunk_len(index) bytes, len at least that) of a
  // committed checkpoint; checksums are the caller's. WriteChunkNow writes
  // chunk `index` of a write opened by BeginWrite synchronously (data
  // 4096-aligned, padded to a multiple of 4096); Commit makes it durable.
  Status ReadChunk(const Manifest& m, uint64_t index, uint8_t* dst, size_t len);
  // The copy on another host of a committed checkpoint is durable: a flushed
  // marker in the step's directory, so that it is still known after a
  // restart. IsReplicated: whether the marker is there.
  Status MarkReplicated(const Manifest& m);
  bool IsReplicated(const Manifest& m) const;
  Status WriteChunkNow(uint64_t write_id, uint64_t index, const uint8_t* data, size_t padded);
  // Removes the tenant's directory (what is left once its checkpoints are
  // deleted: policies, empty stream directories).
  Status RemoveTenant(TenantNo tenant);
  // Takes a committed checkpoint out of the way at once by renaming its step
  // directory to "<step>.del" (no flush: if a crash undoes the rename, start-up
  // applies retention again). *path names the renamed directory for
  // RemoveRetired. False when the rename failed; the caller then uses Remove.
  bool Retire(TenantNo tenant, StreamId stream, uint64_t step, std::string* path);
  void RemoveRetired(const std::string& path);
  Status Recover(std::vector<Manifest>* committed, std::vector<std::string>* cleaned) override;

 private:
  struct Write {
    int fd = -1;
    std::string dir;
    uint64_t chunk_bytes = 0;
  };
  struct Op {  // one chunk write in flight; resubmitted on a short write
    uint64_t write_id;
    uint64_t token;
    const uint8_t* data;
    size_t len;
    uint64_t offset;
    int buf_index;
  };

  explicit DiskTier(const Options& options);
  int OpenData(const std::string& path, int flags);
  bool Queue(Op* op);
  bool SyncAll(const std::vector<std::pair<int, bool>>& fds);  // (fd, datasync only)
  // True when the data file of a pending directory holds every chunk of m
  // intact (sizes and CRC32C), read back from the disk.
  bool VerifyData(const std::string& dir, const Manifest& m);
  // Recover's work for one stream's directory.
  void RecoverStream(TenantNo tenant, StreamId stream, const std::filesystem::path& dir,
                     std::vector<Manifest>* committed, std::vector<std::string>* cleaned);

  std::string root_;
  unsigned queue_depth_;
  bool direct_io_;
  bool warned_fallback_ = false;
  // Set once by RegisterBuffers, which may run on a thread of its own while
  // writes are queued (Engine::Open with populate_staging_later).
  std::atomic<bool> registered_{false};
  io_uring ring_{};
  bool ring_ok_ = false;
  io_uring sync_ring_{};  // commit-time flushes, apart from the chunk writes
  bool sync_ring_ok_ = false;
  // One commit's flushes at a time: the commit thread's and a replica's
  // (WriteChunkNow's writes are committed on the thread that stores it).
  std::mutex sync_mu_;
  size_t in_flight_ = 0;
  std::mutex writes_mu_;  // Commit may run on another thread than the writes
  uint64_t next_write_id_ = 1;
  std::map<uint64_t, Write> writes_;
};

}  // namespace hz::checkpoint

#endif  // HZ_CHECKPOINT_DISK_TIER_H_
