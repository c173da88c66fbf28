// The append-only record file under each tenant's log.
//
// Record framing: u32 length, u32 CRC32C (ISA-L crc32_iscsi, seed ~0) over
// the length field and the body, then `length` bytes of body. A body is one
// struct hz_event. Recovery reads records until the first short, oversized,
// checksum-failing or out-of-order one. When nothing valid follows it, that is
// a tail torn by a crash mid-append: the file is truncated there and stays
// appendable. When a valid record follows it, the file was damaged in the
// middle (bit rot, an outside write): truncating would drop good records, so
// the file is left exactly as it is and Open fails with kCorruption.
#ifndef HZ_EVENTS_EVENT_LOG_H_
#define HZ_EVENTS_EVENT_LOG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "hz/common/status.h"
#include "protocol/harmonaize.h"

namespace hz::events {

inline constexpr uint32_t kRecordHeaderBytes = 8;

uint32_t Crc32c(const void* data, size_t len, uint32_t seed = 0xffffffffu);

// Encodes one event as a framed record.
std::string EncodeRecord(const hz_event& event);

struct RecoveryReport {
  uint64_t records = 0;          // valid records read
  uint64_t valid_bytes = 0;      // file offset after the last valid record
  uint64_t truncated_bytes = 0;  // bytes dropped from the tail
  std::string reason;            // why reading stopped, empty if it did not
  // Damage in the middle: a bad record at valid_bytes with a valid record
  // after it, at resume_offset. Nothing was truncated.
  bool damaged = false;
  uint64_t resume_offset = 0;
};

class RecordFile {
 public:
  RecordFile() = default;
  ~RecordFile();
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;

  // Opens (creating, and with sync making its directory entry durable)
  // `path`, reads every valid record into *events (strictly increasing seq),
  // truncates a torn tail, and positions for appends. kCorruption, with
  // report->damaged set and the file untouched, when valid records follow a
  // bad one.
  Status Open(const std::string& path, bool sync, std::vector<hz_event>* events,
              RecoveryReport* report);
  // Appends one record without waiting for the disk. When opened with sync,
  // *sync_fd receives a duplicate of the file's descriptor (else -1): the
  // caller fdatasync()s and closes it later, outside its own locks, so that
  // readers never wait for a flush. The record is in the page cache, which
  // survives a crash of this process, as soon as this returns. An error
  // means the record is not in the file; success means it is and its seq is
  // used. With no descriptor left to hand over, the record is flushed here
  // and *flushed says how that went.
  Status Append(const hz_event& event, int* sync_fd, Status* flushed);
  // Replaces the file with exactly `events` (write to a temporary file,
  // fsync, rename, fsync the directory) and reopens it for appends.
  Status Rewrite(const std::vector<hz_event>& events);
  uint64_t records() const { return records_; }

 private:
  Status WriteAll(int fd, const std::string& bytes);

  std::string path_;
  int fd_ = -1;
  bool sync_ = false;
  uint64_t records_ = 0;
};

}  // namespace hz::events

#endif  // HZ_EVENTS_EVENT_LOG_H_
