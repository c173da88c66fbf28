#include "hz/checkpoint/manifest.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace hz::checkpoint {
namespace {

Manifest Sample() {
  Manifest m;
  m.tenant = 7;
  m.stream = 3;
  m.step = 42;
  m.time_s = 1700000000;
  m.chunk_bytes = 8192;
  m.slice_sizes = {100, 0, 9000, 5};
  m.meta_len = 11;
  for (uint64_t i = 0; i < m.num_chunks(); ++i) m.chunk_crcs.push_back(0x1000u + i);
  return m;
}

TEST(CheckpointManifest, GeometryOfChunks) {
  Manifest m = Sample();
  EXPECT_EQ(m.slice_bytes(), 9105u);
  EXPECT_EQ(m.payload_bytes(), 9116u);
  EXPECT_EQ(m.num_chunks(), 2u);
  EXPECT_EQ(m.chunk_len(0), 8192u);
  EXPECT_EQ(m.chunk_len(1), 9116u - 8192u);
  EXPECT_EQ(m.chunk_len(2), 0u);
  EXPECT_EQ(m.padded_bytes(), 12288u);
  Manifest empty = Sample();
  empty.slice_sizes = {0};
  empty.meta_len = 0;
  EXPECT_EQ(empty.num_chunks(), 0u);
  EXPECT_EQ(empty.padded_bytes(), 0u);
}

TEST(CheckpointManifest, RoundTrip) {
  Manifest m = Sample();
  Manifest out;
  ASSERT_EQ(DecodeManifest(EncodeManifest(m), &out).code(), StatusCode::kOk);
  EXPECT_EQ(out.tenant, m.tenant);
  EXPECT_EQ(out.stream, m.stream);
  EXPECT_EQ(out.step, m.step);
  EXPECT_EQ(out.time_s, m.time_s);
  EXPECT_EQ(out.chunk_bytes, m.chunk_bytes);
  EXPECT_EQ(out.slice_sizes, m.slice_sizes);
  EXPECT_EQ(out.meta_len, m.meta_len);
  EXPECT_EQ(out.chunk_crcs, m.chunk_crcs);
  EXPECT_EQ(out.replica_of, "");
  // A copy held for another host says whose (the peer-host tier); a
  // checkpoint saved here has no such field at all.
  EXPECT_EQ(EncodeManifest(m).find("replica_of"), std::string::npos);
  m.replica_of = "host-a";
  ASSERT_EQ(DecodeManifest(EncodeManifest(m), &out).code(), StatusCode::kOk);
  EXPECT_EQ(out.replica_of, "host-a");
}

TEST(CheckpointManifest, AnyFlippedByteIsRejected) {
  std::string text = EncodeManifest(Sample());
  for (size_t i = 0; i + 1 < text.size(); ++i) {  // the last byte is a newline
    std::string bad = text;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    Manifest out;
    Status st = DecodeManifest(bad, &out);
    // A flip that keeps the JSON equal (e.g. whitespace) may decode; it must
    // then decode to the same manifest.
    if (st.ok()) {
      EXPECT_EQ(out.chunk_crcs, Sample().chunk_crcs) << "byte " << i;
      EXPECT_EQ(out.slice_sizes, Sample().slice_sizes) << "byte " << i;
    } else {
      EXPECT_EQ(st.code(), StatusCode::kCorruption) << "byte " << i;
    }
  }
}

TEST(CheckpointManifest, TruncatedOrEmptyIsCorrupt) {
  std::string text = EncodeManifest(Sample());
  Manifest out;
  EXPECT_EQ(DecodeManifest("", &out).code(), StatusCode::kCorruption);
  EXPECT_EQ(DecodeManifest(text.substr(0, text.size() / 2), &out).code(), StatusCode::kCorruption);
  EXPECT_EQ(DecodeManifest("[1,2,3]", &out).code(), StatusCode::kCorruption);
}

// A manifest with a valid checksum but inconsistent content is still refused.
std::string Resealed(nlohmann::json body) {
  std::string text = body.dump();
  nlohmann::json doc = {
      {"body", body},
      {"crc32c", Crc32c(reinterpret_cast<const uint8_t*>(text.data()), text.size())}};
  return doc.dump();
}

TEST(CheckpointManifest, InconsistentBodiesAreRejected) {
  auto body = nlohmann::json::parse(EncodeManifest(Sample()))["body"];
  Manifest out;
  ASSERT_EQ(DecodeManifest(Resealed(body), &out).code(), StatusCode::kOk);

  auto b = body;
  b["chunk_crc32c"].push_back(1);  // one chunk too many
  EXPECT_EQ(DecodeManifest(Resealed(b), &out).code(), StatusCode::kCorruption);
  b = body;
  b["version"] = 99;
  EXPECT_EQ(DecodeManifest(Resealed(b), &out).code(), StatusCode::kCorruption);
  b = body;
  b["chunk_bytes"] = 1000;  // not a multiple of 4096
  EXPECT_EQ(DecodeManifest(Resealed(b), &out).code(), StatusCode::kCorruption);
  b = body;
  b["slices"] = nlohmann::json::array({UINT64_MAX, UINT64_MAX});  // overflowing sum
  EXPECT_EQ(DecodeManifest(Resealed(b), &out).code(), StatusCode::kCorruption);
  b = body;
  b["slices"] = nlohmann::json::array();
  EXPECT_EQ(DecodeManifest(Resealed(b), &out).code(), StatusCode::kCorruption);
  b = body;
  b["stream"] = -1;
  EXPECT_EQ(DecodeManifest(Resealed(b), &out).code(), StatusCode::kCorruption);
  b = body;
  b["chunk_crc32c"][0] = 1ull << 33;
  EXPECT_EQ(DecodeManifest(Resealed(b), &out).code(), StatusCode::kCorruption);
  b = body;
  b.erase("meta_len");
  EXPECT_EQ(DecodeManifest(Resealed(b), &out).code(), StatusCode::kCorruption);
  for (const nlohmann::json& host : {nlohmann::json(""), nlohmann::json(7),
                                     nlohmann::json(std::string(kMaxHostNameBytes + 1, 'h'))}) {
    b = body;
    b["replica_of"] = host;
    EXPECT_EQ(DecodeManifest(Resealed(b), &out).code(), StatusCode::kCorruption) << host.dump();
  }
}

TEST(CheckpointManifest, Crc32cMatchesKnownVector) {
  // RFC 3720 (iSCSI) test vector: 32 bytes of zeros.
  std::vector<uint8_t> zeros(32, 0);
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  const char* digits = "123456789";
  EXPECT_EQ(Crc32c(reinterpret_cast<const uint8_t*>(digits), 9), 0xe3069283u);
}

}  // namespace
}  // namespace hz::checkpoint
