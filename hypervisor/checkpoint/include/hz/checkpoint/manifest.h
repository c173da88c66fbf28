// The manifest of one checkpoint: what was saved and the checksum of every
// chunk. It is the commit record of the local-disk tier (manifest.json): a
// checkpoint exists on disk exactly when its manifest decodes and verifies.
//
// Payload layout: the slices back to back in order, then the metadata blob,
// cut into chunks of chunk_bytes (the last one shorter). Chunk i lives at
// offset i * chunk_bytes of the data file; the file is padded to 4096 bytes.
//
// Encoding: JSON {"body": {...}, "crc32c": C} where C is the CRC32C of
// body.dump(), so a torn or edited manifest is detected, not trusted.
#ifndef HZ_CHECKPOINT_MANIFEST_H_
#define HZ_CHECKPOINT_MANIFEST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hz/checkpoint/types.h"

namespace hz::checkpoint {

inline constexpr uint32_t kManifestVersion = 1;
inline constexpr size_t kIoAlign = 4096;  // O_DIRECT alignment of buffers and sizes
inline constexpr size_t kMaxManifestBytes = 64u << 20;
inline constexpr size_t kMaxSlices = 1u << 20;
inline constexpr size_t kMaxHostNameBytes = 255;  // Manifest::replica_of

struct Manifest {
  uint32_t version = kManifestVersion;
  TenantNo tenant = 0;
  StreamId stream = 0;
  uint64_t step = 0;
  uint64_t time_s = 0;  // commit time, unix seconds rounded down to 10 s
  uint64_t chunk_bytes = 0;
  std::vector<uint64_t> slice_sizes;
  uint64_t meta_len = 0;
  std::vector<uint32_t> chunk_crcs;  // one per chunk, CRC32C of the chunk's bytes
  // The host whose checkpoint this is a copy of (the peer-host tier); empty
  // for a checkpoint saved here. At most kMaxHostNameBytes.
  std::string replica_of;

  uint64_t slice_bytes() const;          // sum of slice_sizes
  uint64_t payload_bytes() const;        // slice_bytes() + meta_len
  uint64_t num_chunks() const;           // ceil(payload / chunk_bytes)
  uint64_t chunk_len(uint64_t i) const;  // bytes of chunk i without padding
  uint64_t padded_bytes() const;         // data file size: payload rounded up to kIoAlign
};

// CRC32C (Castagnoli) as stored in manifests, via ISA-L.
uint32_t Crc32c(const uint8_t* data, size_t len);

std::string EncodeManifest(const Manifest& m);

// Parses and validates (version, checksum, sizes without overflow, chunk count
// consistent with the sizes). Returns kCorrupt for anything wrong.
Status DecodeManifest(std::string_view text, Manifest* out);

}  // namespace hz::checkpoint

#endif  // HZ_CHECKPOINT_MANIFEST_H_
