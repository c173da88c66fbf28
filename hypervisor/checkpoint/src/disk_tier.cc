#include "disk_tier.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "hz/common/file.h"

namespace hz::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifest = "manifest.json";
constexpr const char* kManifestTmp = "manifest.json.tmp";  // written by older layouts
constexpr const char* kPendingSuffix = ".tmp";             // a step directory being written
constexpr const char* kRetiredSuffix = ".del";             // a step directory being removed
constexpr const char* kPolicy = "policy.json";
constexpr const char* kPolicyTmp = "policy.json.tmp";  // what a crash in WriteFileAtomic leaves
constexpr const char* kData = "data";
constexpr const char* kReplicated = "replicated";  // the peer-host copy is durable

// Creates dir (and parents), fsyncing each parent whose entry is new, so a
// committed manifest is never reachable only through a lost directory entry.
bool MakeDirDurable(const fs::path& dir) {
  if (fs::is_directory(dir)) return true;
  if (dir.has_parent_path() && !MakeDirDurable(dir.parent_path())) return false;
  if (mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST) return false;
  return SyncDir(dir.parent_path().string()).ok();
}

// A manifest or a policy: kNotFound when it is absent, another failure when
// it cannot be one (unreadable, or too large).
StatusOr<std::string> ReadSmallFile(const fs::path& path) {
  return ReadFile(path.string(), kMaxManifestBytes);
}

// Parses a decimal directory name; false for anything else (never adopted).
bool ParseNumber(const std::string& name, uint64_t max, uint64_t* out) {
  if (name.empty() || name.size() > 20) return false;
  uint64_t v = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return false;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

// Calls fn(tenant, stream, dir) for every <root>/<tenant>/<stream> directory
// whose names are numbers; anything else there is left alone. Returns the
// error of listing root itself, if any.
template <typename Fn>
std::error_code ForEachStreamDir(const fs::path& root, Fn fn) {
  std::error_code ec;
  for (const auto& t : fs::directory_iterator(root, ec)) {
    uint64_t tenant = 0;
    if (!t.is_directory() || !ParseNumber(t.path().filename().string(), UINT64_MAX, &tenant)) {
      continue;
    }
    std::error_code ec2;
    for (const auto& s : fs::directory_iterator(t.path(), ec2)) {
      uint64_t stream = 0;
      if (!s.is_directory() || !ParseNumber(s.path().filename().string(), UINT32_MAX, &stream)) {
        continue;
      }
      fn(tenant, static_cast<StreamId>(stream), s.path());
    }
  }
  return ec;
}

// A policy field from an untrusted file: the default unless it is an
// unsigned number that fits 32 bits.
uint32_t PolicyU32(const nlohmann::json& j, const char* key, uint32_t def) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned() || it->get<uint64_t>() > UINT32_MAX) return def;
  return static_cast<uint32_t>(it->get<uint64_t>());
}

std::string StepName(uint64_t step) {
  char buf[32];
  snprintf(buf, sizeof buf, "%020" PRIu64, step);
  return buf;
}

}  // namespace

DiskTier::DiskTier(const Options& options)
    : root_(options.root), queue_depth_(options.queue_depth), direct_io_(options.direct_io) {}

DiskTier::~DiskTier() {
  for (auto& [id, w] : writes_) {
    if (w.fd >= 0) close(w.fd);
  }
  if (ring_ok_) io_uring_queue_exit(&ring_);
  if (sync_ring_ok_) io_uring_queue_exit(&sync_ring_);
}

Status DiskTier::Open(const Options& options, std::unique_ptr<DiskTier>* out) {
  if (options.root.empty()) return Status::InvalidArgument("checkpoint root is empty");
  if (options.queue_depth == 0 || options.queue_depth > 4096) {
    return Status::InvalidArgument("queue depth must be 1..4096");
  }
  std::unique_ptr<DiskTier> t(new DiskTier(options));
  if (!MakeDirDurable(fs::path(options.root))) {
    return Errno("cannot create checkpoint root", options.root);
  }
  int rc = io_uring_queue_init(options.queue_depth, &t->ring_, 0);
  if (rc < 0) return Status::IoError(std::string("io_uring_queue_init: ") + strerror(-rc));
  t->ring_ok_ = true;
  rc = io_uring_queue_init(8, &t->sync_ring_, 0);
  if (rc < 0) return Status::IoError(std::string("io_uring_queue_init: ") + strerror(-rc));
  t->sync_ring_ok_ = true;
  *out = std::move(t);
  return Status::Ok();
}

bool DiskTier::RegisterBuffers(const std::vector<iovec>& buffers) {
  if (buffers.empty()) return false;
  int rc = io_uring_register_buffers(&ring_, buffers.data(), static_cast<unsigned>(buffers.size()));
  if (rc < 0) {
    spdlog::warn("checkpoint: io_uring_register_buffers failed ({}); using plain writes",
                 strerror(-rc));
    return false;
  }
  registered_.store(true, std::memory_order_release);
  return true;
}

std::string DiskTier::StepDir(TenantNo tenant, StreamId stream, uint64_t step) const {
  return (fs::path(root_) / std::to_string(tenant) / std::to_string(stream) / StepName(step))
      .string();
}

Status DiskTier::SavePolicy(TenantNo tenant, StreamId stream, const Policy& p) {
  fs::path dir = fs::path(root_) / std::to_string(tenant) / std::to_string(stream);
  if (!MakeDirDurable(dir)) return Status::IoError();
  nlohmann::json j = {{"retention", p.retention},
                      {"tier", static_cast<uint32_t>(p.tier)},
                      {"stall_budget_ms", p.stall_budget_ms},
                      {"rpo_s", p.rpo_s},
                      {"auto_save_on_notice", p.auto_save_on_notice}};
  return WriteFileAtomic((dir / kPolicy).string(), j.dump() + "\n", /*sync=*/true, 0640);
}

TenantNo DiskTier::HighestTenant() const {
  TenantNo highest = 0;
  std::error_code ec;
  for (const auto& t : fs::directory_iterator(root_, ec)) {
    uint64_t tenant = 0;
    if (t.is_directory() && ParseNumber(t.path().filename().string(), UINT64_MAX, &tenant)) {
      highest = std::max(highest, tenant);
    }
  }
  return highest;
}

std::vector<StreamId> DiskTier::Streams(TenantNo tenant) const {
  std::vector<StreamId> out;
  std::error_code ec;
  for (const auto& s : fs::directory_iterator(fs::path(root_) / std::to_string(tenant), ec)) {
    uint64_t stream = 0;
    if (s.is_directory() && ParseNumber(s.path().filename().string(), UINT32_MAX, &stream) &&
        stream != 0) {
      out.push_back(static_cast<StreamId>(stream));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void DiskTier::LoadPolicies(std::vector<StreamPolicy>* out) {
  ForEachStreamDir(root_, [out](TenantNo tenant, StreamId stream, const fs::path& dir) {
    std::error_code ec;
    fs::remove(dir / kPolicyTmp, ec);
    Policy p;
    StatusOr<std::string> text = ReadSmallFile(dir / kPolicy);
    nlohmann::json j;
    if (text.ok()) j = nlohmann::json::parse(*text, nullptr, false);
    if (!j.is_object()) {
      // Without its policy nothing says how many checkpoints the stream
      // keeps: all of them stay until the tenant sets a policy again,
      // rather than the default of one evicting the rest. The file is
      // left as it is.
      p.retention = UINT32_MAX;
      spdlog::error(
          "event=ckpt_policy_unreadable path={} reason=\"{}\" action=\"every checkpoint of "
          "the stream is kept until its policy is set again\"",
          (dir / kPolicy).string(), text.ok() ? "not a JSON object" : text.status().ToString());
    } else {
      p.retention = std::max<uint32_t>(1, PolicyU32(j, "retention", 1));
      uint32_t tier = PolicyU32(j, "tier", 1);
      p.tier = tier == 0   ? TierKind::kHostMemory
               : tier == 2 ? TierKind::kPeerHost
                           : TierKind::kLocalDisk;
      p.stall_budget_ms = PolicyU32(j, "stall_budget_ms", 1000);
      p.rpo_s = PolicyU32(j, "rpo_s", 0);
      auto flag = j.find("auto_save_on_notice");
      p.auto_save_on_notice = flag != j.end() && flag->is_boolean() && flag->get<bool>();
    }
    out->push_back({tenant, stream, p});
  });
}

int DiskTier::OpenData(const std::string& path, int flags) {
  if (direct_io_) {
    int fd = open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, 0640);
    if (fd >= 0 || errno != EINVAL) return fd;
    direct_io_ = false;
    if (!warned_fallback_) {
      warned_fallback_ = true;
      spdlog::warn("checkpoint: {} refuses O_DIRECT; using buffered I/O with fdatasync", root_);
    }
  }
  return open(path.c_str(), flags | O_CLOEXEC, 0640);
}

Status DiskTier::BeginWrite(const Manifest& m, uint64_t* write_id) {
  fs::path final_dir = StepDir(m.tenant, m.stream, m.step);
  fs::path dir = final_dir.string() + kPendingSuffix;
  std::error_code ec;
  fs::remove_all(dir, ec);  // leftovers of an aborted attempt at this step
  if (fs::exists(final_dir, ec)) {
    // Only a directory the engine did not adopt (its manifest failed to
    // verify) can hold a step that is being saved again.
    spdlog::warn("checkpoint: replacing unadopted {}", final_dir.string());
    fs::remove_all(final_dir, ec);
  }
  // The stream directory is made durable once; the pending directory needs no
  // durability until Commit renames it.
  if (!MakeDirDurable(dir.parent_path())) return Status::IoError();
  if (mkdir(dir.c_str(), 0750) != 0) return Status::IoError();
  int fd = OpenData((dir / kData).string(), O_WRONLY | O_CREAT | O_TRUNC);
  if (fd < 0) {
    fs::remove_all(dir, ec);
    return Status::IoError();
  }
  // Allocating the whole file up front keeps the chunk writes inside i_size,
  // so the filesystem can run them concurrently, and lays the file out at once.
  off_t len = static_cast<off_t>(m.padded_bytes());
  if (len > 0 && fallocate(fd, 0, 0, len) != 0 && ftruncate(fd, len) != 0) {
    close(fd);
    fs::remove_all(dir, ec);
    return Status::IoError();
  }
  std::lock_guard<std::mutex> l(writes_mu_);
  uint64_t id = next_write_id_++;
  writes_[id] = Write{fd, dir.string(), m.chunk_bytes};
  *write_id = id;
  return Status::Ok();
}

bool DiskTier::Queue(Op* op) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
  if (sqe == nullptr) return false;
  int fd;
  {
    std::lock_guard<std::mutex> l(writes_mu_);
    fd = writes_[op->write_id].fd;
  }
  if (op->buf_index >= 0 && registered()) {
    io_uring_prep_write_fixed(sqe, fd, op->data, static_cast<unsigned>(op->len), op->offset,
                              op->buf_index);
  } else {
    io_uring_prep_write(sqe, fd, op->data, static_cast<unsigned>(op->len), op->offset);
  }
  io_uring_sqe_set_data(sqe, op);
  return io_uring_submit(&ring_) >= 1;
}

Status DiskTier::SubmitChunk(uint64_t write_id, uint64_t index, const uint8_t* data, size_t padded,
                             int buf_index, uint64_t token) {
  uint64_t chunk_bytes;
  {
    std::lock_guard<std::mutex> l(writes_mu_);
    auto it = writes_.find(write_id);
    if (it == writes_.end() || in_flight_ >= queue_depth_) return Status::InvalidArgument();
    chunk_bytes = it->second.chunk_bytes;
  }
  auto* op = new Op{write_id, token, data, padded, index * chunk_bytes, buf_index};
  if (!Queue(op)) {
    delete op;
    return Status::IoError();
  }
  ++in_flight_;
  return Status::Ok();
}

void DiskTier::Poll(uint64_t wait_us, std::vector<Completion>* out) {
  if (in_flight_ == 0) return;
  io_uring_cqe* cqe = nullptr;
  if (wait_us > 0) {
    __kernel_timespec ts{};
    ts.tv_sec = static_cast<long long>(wait_us / 1000000);
    ts.tv_nsec = static_cast<long long>((wait_us % 1000000) * 1000);
    io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
  }
  while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
    auto* op = static_cast<Op*>(io_uring_cqe_get_data(cqe));
    int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    if (res == -EINTR || res == -EAGAIN) {
      if (Queue(op)) continue;
      res = -EIO;
    }
    if (res > 0 && static_cast<size_t>(res) < op->len) {
      // Short write: send the rest (plain write; the remainder stays aligned
      // for O_DIRECT because the device writes whole sectors).
      op->data += res;
      op->len -= static_cast<size_t>(res);
      op->offset += static_cast<uint64_t>(res);
      op->buf_index = -1;
      if (Queue(op)) continue;
      res = -EIO;
    }
    --in_flight_;
    out->push_back({op->token, res < 0 ? Status::IoError() : Status::Ok()});
    if (res < 0) spdlog::error("checkpoint: chunk write failed: {}", strerror(-res));
    delete op;
  }
}

// Flushes several files and directories at once, on the commit ring so chunk
// writes are not mixed in. On a journalling filesystem the flushes share one
// journal commit (and one device cache flush).
bool DiskTier::SyncAll(const std::vector<std::pair<int, bool>>& fds) {
  std::lock_guard<std::mutex> l(sync_mu_);
  for (const auto& [fd, datasync] : fds) {
    io_uring_sqe* sqe = io_uring_get_sqe(&sync_ring_);
    if (sqe == nullptr) return false;
    io_uring_prep_fsync(sqe, fd, datasync ? IORING_FSYNC_DATASYNC : 0);
  }
  int submitted = io_uring_submit(&sync_ring_);
  if (submitted < 0) return false;
  bool ok = static_cast<size_t>(submitted) == fds.size();
  for (int i = 0; i < submitted; ++i) {
    io_uring_cqe* cqe = nullptr;
    int rc;
    do {
      rc = io_uring_wait_cqe(&sync_ring_, &cqe);
    } while (rc == -EINTR);
    if (rc < 0) return false;
    ok = ok && cqe->res == 0;
    io_uring_cqe_seen(&sync_ring_, cqe);
  }
  return ok;
}

Status DiskTier::Commit(uint64_t write_id, const Manifest& m) {
  Write w;
  {
    std::lock_guard<std::mutex> l(writes_mu_);
    auto it = writes_.find(write_id);
    if (it == writes_.end()) return Status::InvalidArgument();
    w = it->second;
    writes_.erase(it);
  }
  fs::path pending(w.dir);
  fs::path final_dir = StepDir(m.tenant, m.stream, m.step);
  std::error_code ec;
  // 1. The manifest next to the data.
  std::string text = EncodeManifest(m);
  int mfd = open((pending / kManifest).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  bool ok = mfd >= 0;
  for (size_t done = 0; ok && done < text.size();) {
    ssize_t n = write(mfd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<size_t>(n);
  }
  // 2. One flush makes everything durable together: the data, the manifest,
  //    and the entries that name them (the pending directory's and the stream
  //    directory's). From here the checkpoint survives a crash: start-up
  //    adopts a pending directory whose manifest and every chunk verify.
  int pdir = ok ? open(pending.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC) : -1;
  int sdir = ok ? open(final_dir.parent_path().c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC) : -1;
  ok = ok && pdir >= 0 && sdir >= 0;
  if (ok) ok = SyncAll({{w.fd, true}, {mfd, false}, {pdir, false}, {sdir, false}});
  for (int fd : {mfd, pdir, sdir, w.fd}) {
    if (fd >= 0) close(fd);
  }
  // 3. The step's final name, issued only after the flush, so a step
  //    directory is never reachable before its bytes are durable. It needs no
  //    flush of its own: until it reaches the disk, start-up finds the pending
  //    directory, verifies it and finishes the rename.
  if (ok) ok = rename(pending.c_str(), final_dir.c_str()) == 0;
  if (!ok) {
    fs::remove_all(pending, ec);
    return Status::IoError();
  }
  return Status::Ok();
}

Status DiskTier::MarkReplicated(const Manifest& m) {
  const fs::path dir = StepDir(m.tenant, m.stream, m.step);
  return WriteFileAtomic((dir / kReplicated).string(), "", /*sync=*/true, 0640);
}

bool DiskTier::IsReplicated(const Manifest& m) const {
  std::error_code ec;
  return fs::exists(fs::path(StepDir(m.tenant, m.stream, m.step)) / kReplicated, ec);
}

void DiskTier::Abort(uint64_t write_id) {
  std::lock_guard<std::mutex> l(writes_mu_);
  auto it = writes_.find(write_id);
  if (it == writes_.end()) return;
  close(it->second.fd);
  std::error_code ec;
  fs::remove_all(it->second.dir, ec);
  writes_.erase(it);
}

Status DiskTier::Read(const Manifest& m, uint8_t* dst, size_t dst_len,
                      const std::function<bool()>& cancelled) {
  fs::path dir = StepDir(m.tenant, m.stream, m.step);
  // The manifest on disk must still be the one committed.
  StatusOr<std::string> text = ReadSmallFile(dir / kManifest);
  if (!text.ok()) {
    // Only a manifest that was read and is wrong is corruption; a read that
    // failed (no descriptors, an I/O error) says nothing about the data.
    return text.status().IsLimit() ? Status::Corruption(dir.string() + ": oversized manifest")
                                   : text.status();
  }
  Manifest on_disk;
  if (!DecodeManifest(*text, &on_disk).ok() || on_disk.chunk_crcs != m.chunk_crcs ||
      on_disk.slice_sizes != m.slice_sizes || on_disk.meta_len != m.meta_len ||
      on_disk.chunk_bytes != m.chunk_bytes) {
    return Status::Corruption();
  }
  uint64_t want = m.padded_bytes();
  if (dst_len < want) return Status::InvalidArgument();
  bool direct = direct_io_;
  int fd = direct ? open((dir / kData).c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC) : -1;
  if (fd < 0) {
    direct = false;
    fd = open((dir / kData).c_str(), O_RDONLY | O_CLOEXEC);
  }
  if (fd < 0) return errno == ENOENT ? Status::NotFound() : Status::IoError();
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return Status::IoError();
  }
  if (static_cast<uint64_t>(st.st_size) < m.payload_bytes()) {
    close(fd);
    return Status::Corruption();  // truncated
  }
  // Read no further than the file: a buffered file may end at the payload.
  uint64_t limit = std::min<uint64_t>(want, static_cast<uint64_t>(st.st_size));
  if (direct) limit = want;
  uint64_t done = 0;
  while (done < limit) {
    if (cancelled && cancelled()) {
      close(fd);
      return Status::Aborted();
    }
    size_t n = static_cast<size_t>(std::min<uint64_t>(limit - done, 16u << 20));
    ssize_t r = pread(fd, dst + done, n, static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      close(fd);
      return Status::IoError();
    }
    if (r == 0) break;
    done += static_cast<uint64_t>(r);
  }
  close(fd);
  return done >= m.payload_bytes() ? Status::Ok() : Status::Corruption();
}

Status DiskTier::ReadChunk(const Manifest& m, uint64_t index, uint8_t* dst, size_t len) {
  if (index >= m.num_chunks() || len < m.chunk_len(index)) return Status::InvalidArgument();
  fs::path data = fs::path(StepDir(m.tenant, m.stream, m.step)) / kData;
  int fd = open(data.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? Status::NotFound() : Status::IoError();
  const uint64_t want = m.chunk_len(index);
  uint64_t done = 0;
  while (done < want) {
    ssize_t r = pread(fd, dst + done, static_cast<size_t>(want - done),
                      static_cast<off_t>(index * m.chunk_bytes + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += static_cast<uint64_t>(r);
  }
  close(fd);
  return done == want ? Status::Ok() : Status::IoError("short read of " + data.string());
}

Status DiskTier::WriteChunkNow(uint64_t write_id, uint64_t index, const uint8_t* data,
                               size_t padded) {
  Write w;
  {
    std::lock_guard<std::mutex> l(writes_mu_);
    auto it = writes_.find(write_id);
    if (it == writes_.end()) return Status::InvalidArgument();
    w = it->second;
  }
  size_t done = 0;
  while (done < padded) {
    ssize_t n =
        pwrite(w.fd, data + done, padded - done, static_cast<off_t>(index * w.chunk_bytes + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::IoError(std::string("chunk write: ") + strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status DiskTier::Remove(TenantNo tenant, StreamId stream, uint64_t step) {
  fs::path dir = StepDir(tenant, stream, step);
  // Uncommit first (one unlink, made durable), then reclaim the space.
  if (unlink((dir / kManifest).c_str()) != 0 && errno != ENOENT) return Status::IoError();
  SyncDir(dir.string());
  std::error_code ec;
  fs::remove_all(dir, ec);
  return ec ? Status::IoError() : Status::Ok();
}

Status DiskTier::RemoveTenant(TenantNo tenant) {
  const fs::path dir = fs::path(root_) / std::to_string(tenant);
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) return Status::IoError(dir.string() + ": " + ec.message());
  return SyncDir(root_);
}

bool DiskTier::Retire(TenantNo tenant, StreamId stream, uint64_t step, std::string* path) {
  std::string dir = StepDir(tenant, stream, step);
  std::string retired = dir + kRetiredSuffix;
  std::error_code ec;
  if (fs::exists(retired, ec)) return false;
  if (rename(dir.c_str(), retired.c_str()) != 0) return false;
  *path = std::move(retired);
  return true;
}

void DiskTier::RemoveRetired(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) spdlog::warn("checkpoint: cannot remove {}: {}", path, ec.message());
}

bool DiskTier::VerifyData(const std::string& dir, const Manifest& m) {
  int fd = open((fs::path(dir) / kData).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) >= m.payload_bytes();
  std::vector<uint8_t> buf(ok ? static_cast<size_t>(std::min<uint64_t>(m.chunk_bytes, 64u << 20))
                              : 0);
  for (uint64_t i = 0; ok && i < m.num_chunks(); ++i) {
    // A chunk larger than the buffer cannot come from this engine's pool.
    uint64_t len = m.chunk_len(i);
    if (len > buf.size()) {
      ok = false;
      break;
    }
    uint64_t done = 0;
    while (ok && done < len) {
      ssize_t r = pread(fd, buf.data() + done, static_cast<size_t>(len - done),
                        static_cast<off_t>(i * m.chunk_bytes + done));
      if (r < 0 && errno == EINTR) continue;
      ok = r > 0;
      if (ok) done += static_cast<uint64_t>(r);
    }
    ok = ok && Crc32c(buf.data(), static_cast<size_t>(len)) == m.chunk_crcs[i];
  }
  close(fd);
  return ok;
}

Status DiskTier::Recover(std::vector<Manifest>* committed, std::vector<std::string>* cleaned) {
  std::error_code ec =
      ForEachStreamDir(root_, [&](TenantNo tenant, StreamId stream, const fs::path& dir) {
        RecoverStream(tenant, stream, dir, committed, cleaned);
      });
  return ec ? Status::IoError() : Status::Ok();
}

void DiskTier::RecoverStream(TenantNo tenant, StreamId stream, const fs::path& dir,
                             std::vector<Manifest>* committed, std::vector<std::string>* cleaned) {
  // Names first, so pending directories are judged after the final ones.
  std::vector<fs::path> entries;
  std::error_code ec3;
  for (const auto& d : fs::directory_iterator(dir, ec3)) {
    if (d.is_directory()) entries.push_back(d.path());
  }
  std::sort(entries.begin(), entries.end());
  std::vector<fs::path> pending;
  for (const fs::path& d : entries) {
    std::string name = d.filename().string();
    uint64_t step = 0;
    std::error_code ec5;
    bool is_pending = name.size() == 20 + strlen(kPendingSuffix) &&
                      name.compare(20, std::string::npos, kPendingSuffix) == 0;
    bool retired = name.size() == 20 + strlen(kRetiredSuffix) &&
                   name.compare(20, std::string::npos, kRetiredSuffix) == 0;
    if ((is_pending || retired) && ParseNumber(name.substr(0, 20), UINT64_MAX, &step)) {
      if (is_pending) {
        pending.push_back(d);
        continue;
      }
      // A checkpoint that retention dropped.
      fs::remove_all(d, ec5);
      cleaned->push_back(d.string());
      continue;
    }
    if (name.size() != 20 || !ParseNumber(name, UINT64_MAX, &step)) continue;
    std::error_code ec4;
    fs::remove(d / kManifestTmp, ec4);
    Manifest m;
    StatusOr<std::string> text = ReadSmallFile(d / kManifest);
    if (!text.ok()) {
      if (text.status().IsNotFound()) {
        // Never committed: an interrupted persist.
        fs::remove_all(d, ec4);
        cleaned->push_back(d.string());
      }
      continue;
    }
    if (!DecodeManifest(*text, &m).ok() || m.tenant != tenant || m.stream != stream ||
        m.step != step) {
      // A committed manifest that no longer verifies: keep it for the
      // operator, but never list or restore it.
      spdlog::warn("checkpoint: corrupt manifest in {}; not adopted", d.string());
      continue;
    }
    committed->push_back(std::move(m));
  }
  for (const fs::path& d : pending) {
    // Committed (flushed) but maybe not yet renamed when the process
    // stopped: adopted only if the manifest and every chunk verify and the
    // step has no final directory; anything else never reached its commit
    // point.
    std::string name = d.filename().string();
    uint64_t step = 0;
    ParseNumber(name.substr(0, 20), UINT64_MAX, &step);
    fs::path final_dir = d.parent_path() / name.substr(0, 20);
    Manifest m;
    std::error_code ec6;
    StatusOr<std::string> text = ReadSmallFile(d / kManifest);
    bool adopt = !fs::exists(final_dir, ec6) && text.ok() && DecodeManifest(*text, &m).ok() &&
                 m.tenant == tenant && m.stream == stream && m.step == step &&
                 VerifyData(d.string(), m);
    if (adopt && rename(d.c_str(), final_dir.c_str()) == 0) {
      SyncDir(dir.string());
      spdlog::info("checkpoint: adopted committed {}", final_dir.string());
      committed->push_back(std::move(m));
      continue;
    }
    fs::remove_all(d, ec6);
    cleaned->push_back(d.string());
  }
}

}  // namespace hz::checkpoint
