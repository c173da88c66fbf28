#include "hz/events/event_log.h"

#include <fcntl.h>
#include <isa-l/crc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include <spdlog/spdlog.h>

#include "hz/common/file.h"

namespace hz::events {

namespace {

Status WriteFd(int fd, const char* data, size_t len, const std::string& path) {
  while (len > 0) {
    ssize_t n = ::write(fd, data, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path);
    }
    data += n;
    len -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

uint32_t LoadLe32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;  // little-endian hosts only (protocol/harmonaize.h)
}

}  // namespace

uint32_t Crc32c(const void* data, size_t len, uint32_t seed) {
  // crc32_iscsi takes an int length; feed large buffers in pieces.
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  uint32_t crc = seed;
  while (len > 0) {
    int piece = len > (1u << 30) ? (1 << 30) : static_cast<int>(len);
    crc = crc32_iscsi(p, piece, crc);
    p += piece;
    len -= static_cast<size_t>(piece);
  }
  return crc;
}

std::string EncodeRecord(const hz_event& event) {
  std::string out(kRecordHeaderBytes + sizeof(hz_event), '\0');
  uint32_t len = sizeof(hz_event);
  std::memcpy(out.data(), &len, 4);
  std::memcpy(out.data() + kRecordHeaderBytes, &event, sizeof(hz_event));
  uint32_t crc = Crc32c(out.data(), 4);
  crc = Crc32c(out.data() + kRecordHeaderBytes, sizeof(hz_event), crc);
  std::memcpy(out.data() + 4, &crc, 4);
  return out;
}

RecordFile::~RecordFile() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// Why the record at off cannot be read after last_seq; empty when it is valid
// (then *ev holds it).
std::string CheckRecord(const std::string& data, size_t off, uint64_t last_seq, hz_event* ev) {
  size_t left = data.size() - off;
  if (left < kRecordHeaderBytes) return "short record header";
  uint32_t len = LoadLe32(data.data() + off);
  uint32_t crc = LoadLe32(data.data() + off + 4);
  if (len != sizeof(hz_event)) return "bad record length " + std::to_string(len);
  if (left - kRecordHeaderBytes < len) return "short record body";
  uint32_t want = Crc32c(data.data() + off, 4);
  want = Crc32c(data.data() + off + kRecordHeaderBytes, len, want);
  if (want != crc) return "record checksum mismatch";
  std::memcpy(ev, data.data() + off + kRecordHeaderBytes, sizeof *ev);
  if (ev->seq <= last_seq) return "sequence number not increasing";
  return {};
}

// The offset of the first valid record after the bad one at bad, at any
// byte: damage need not keep the records aligned. 0 when there is none.
size_t FindValidRecordAfter(const std::string& data, size_t bad, uint64_t last_seq) {
  hz_event ev;
  for (size_t off = bad + 1; off + kRecordHeaderBytes + sizeof(hz_event) <= data.size(); ++off) {
    if (CheckRecord(data, off, last_seq, &ev).empty()) return off;
  }
  return 0;
}

// Opens path for appends; a file it creates is made durable in its directory.
StatusOr<int> OpenForAppend(const std::string& path, bool sync) {
  int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  if (fd >= 0) return fd;
  if (errno != ENOENT) return Errno("open", path);
  fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("open", path);
  if (sync) {
    Status s = SyncDir(DirName(path));
    if (!s.ok()) {
      ::close(fd);
      return s;
    }
  }
  return fd;
}

}  // namespace

Status RecordFile::Open(const std::string& path, bool sync, std::vector<hz_event>* events,
                        RecoveryReport* report) {
  path_ = path;
  sync_ = sync;
  events->clear();
  *report = RecoveryReport{};
  StatusOr<int> fd = OpenForAppend(path, sync);
  if (!fd.ok()) return fd.status();
  fd_ = *fd;

  // The whole log, however long retention made it.
  StatusOr<std::string> read = ReadFile(path, std::numeric_limits<size_t>::max());
  if (!read.ok()) return read.status();
  const std::string& data = *read;

  size_t off = 0;
  uint64_t last_seq = 0;
  while (off < data.size()) {
    hz_event ev;
    report->reason = CheckRecord(data, off, last_seq, &ev);
    if (!report->reason.empty()) break;
    last_seq = ev.seq;
    events->push_back(ev);
    off += kRecordHeaderBytes + sizeof(hz_event);
  }
  report->records = events->size();
  report->valid_bytes = off;
  records_ = events->size();
  if (off == data.size()) return Status::Ok();
  if (size_t resume = FindValidRecordAfter(data, off, last_seq); resume != 0) {
    report->damaged = true;
    report->resume_offset = resume;
    return Status::Corruption(path + ": bad record at offset " + std::to_string(off) + " (" +
                              report->reason + ") with valid records after it (from offset " +
                              std::to_string(resume) + ")");
  }
  report->truncated_bytes = data.size() - off;
  if (::ftruncate(fd_, static_cast<off_t>(off)) != 0) return Errno("truncate", path);
  if (sync_ && ::fdatasync(fd_) != 0) return Errno("fdatasync", path);
  return Status::Ok();
}

Status RecordFile::WriteAll(int fd, const std::string& bytes) {
  return WriteFd(fd, bytes.data(), bytes.size(), path_);
}

Status RecordFile::Append(const hz_event& event, int* sync_fd, Status* flushed) {
  *sync_fd = -1;
  *flushed = Status::Ok();
  if (fd_ < 0) {
    // A compaction could not reopen the file: appends resume once it can.
    fd_ = ::open(path_.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
    if (fd_ < 0) return Errno("reopen", path_);
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) return Errno("fstat", path_);
  // One write() per record: a crash leaves at most one torn record at the tail.
  Status s = WriteAll(fd_, EncodeRecord(event));
  if (!s.ok()) {
    // A short write must not stay in front of the records that follow it:
    // recovery would stop there and drop them all.
    if (::ftruncate(fd_, st.st_size) != 0) {
      spdlog::error("events: {}: cannot remove a partly written record: {}", path_,
                    std::strerror(errno));
    }
    return s;
  }
  // From here on the record is in the file and its seq is taken, whatever
  // happens to the flush.
  ++records_;
  if (sync_) {
    *sync_fd = ::fcntl(fd_, F_DUPFD_CLOEXEC, 0);
    // Out of descriptors: flush here, under the caller's lock, rather than
    // give up on a record that is already written.
    if (*sync_fd < 0 && ::fdatasync(fd_) != 0) *flushed = Errno("fdatasync", path_);
  }
  return Status::Ok();
}

Status RecordFile::Rewrite(const std::vector<hz_event>& events) {
  std::string bytes;
  bytes.reserve(events.size() * (kRecordHeaderBytes + sizeof(hz_event)));
  for (const hz_event& ev : events) bytes += EncodeRecord(ev);
  // Compaction always syncs: a crash between rename and data must not lose the log.
  Status s = WriteFileAtomic(path_, bytes, /*sync=*/true);
  if (!s.ok()) return s;
  // The old descriptor names the replaced file: appends through it would be
  // lost. Without a new one, the next Append reopens the path.
  ::close(fd_);
  fd_ = ::open(path_.c_str(), O_RDWR | O_APPEND | O_CLOEXEC);
  records_ = events.size();
  if (fd_ < 0) return Errno("reopen", path_);
  return Status::Ok();
}

}  // namespace hz::events
