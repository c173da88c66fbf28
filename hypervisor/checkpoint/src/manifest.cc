#include "hz/checkpoint/manifest.h"

#include <isa-l/crc.h>

#include <limits>
#include <nlohmann/json.hpp>

namespace hz::checkpoint {

namespace {

using nlohmann::json;

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

// Reads an unsigned field; false when absent or of another type.
bool GetU64(const json& j, const char* key, uint64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return false;
  *out = it->get<uint64_t>();
  return true;
}

}  // namespace

uint64_t Manifest::slice_bytes() const {
  uint64_t sum = 0;
  for (uint64_t s : slice_sizes) sum += s;  // bounded by DecodeManifest and Save
  return sum;
}

uint64_t Manifest::payload_bytes() const {
  return slice_bytes() + meta_len;
}

uint64_t Manifest::num_chunks() const {
  if (chunk_bytes == 0) return 0;
  uint64_t p = payload_bytes();
  return p / chunk_bytes + (p % chunk_bytes != 0 ? 1 : 0);
}

uint64_t Manifest::chunk_len(uint64_t i) const {
  uint64_t p = payload_bytes();
  uint64_t start = i * chunk_bytes;
  if (start >= p) return 0;
  return std::min<uint64_t>(chunk_bytes, p - start);
}

uint64_t Manifest::padded_bytes() const {
  uint64_t p = payload_bytes();
  return (p + kIoAlign - 1) / kIoAlign * kIoAlign;
}

uint32_t Crc32c(const uint8_t* data, size_t len) {
  // ISA-L's crc32_iscsi takes the running value without the final inversion.
  return ~crc32_iscsi(const_cast<unsigned char*>(data), static_cast<int>(len), 0xffffffffu);
}

std::string EncodeManifest(const Manifest& m) {
  json body = {
      {"format", "hz-checkpoint"},    {"version", m.version},   {"tenant", m.tenant},
      {"stream", m.stream},           {"step", m.step},         {"time_s", m.time_s},
      {"chunk_bytes", m.chunk_bytes}, {"meta_len", m.meta_len}, {"slices", m.slice_sizes},
      {"chunk_crc32c", m.chunk_crcs},
  };
  // Only on copies: the manifests of checkpoints saved here stay as they were.
  if (!m.replica_of.empty()) body["replica_of"] = m.replica_of;
  std::string text = body.dump();
  json doc = {{"body", body},
              {"crc32c", Crc32c(reinterpret_cast<const uint8_t*>(text.data()), text.size())}};
  return doc.dump() + "\n";
}

Status DecodeManifest(std::string_view text, Manifest* out) {
  if (text.size() > kMaxManifestBytes) return Status::Corruption();
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return Status::Corruption();
  auto body_it = doc.find("body");
  uint64_t crc = 0;
  if (body_it == doc.end() || !body_it->is_object() || !GetU64(doc, "crc32c", &crc)) {
    return Status::Corruption();
  }
  const json& body = *body_it;
  std::string dumped = body.dump();
  if (crc != Crc32c(reinterpret_cast<const uint8_t*>(dumped.data()), dumped.size())) {
    return Status::Corruption();
  }
  auto fmt = body.find("format");
  if (fmt == body.end() || !fmt->is_string() || fmt->get<std::string>() != "hz-checkpoint") {
    return Status::Corruption();
  }
  Manifest m;
  uint64_t version = 0, tenant = 0, stream = 0, chunk = 0;
  if (!GetU64(body, "version", &version) || version != kManifestVersion)
    return Status::Corruption();
  if (!GetU64(body, "tenant", &tenant) || !GetU64(body, "stream", &stream) ||
      !GetU64(body, "step", &m.step) || !GetU64(body, "time_s", &m.time_s) ||
      !GetU64(body, "chunk_bytes", &chunk) || !GetU64(body, "meta_len", &m.meta_len)) {
    return Status::Corruption();
  }
  if (stream > std::numeric_limits<StreamId>::max() || chunk == 0 || chunk % kIoAlign != 0 ||
      chunk > (1ull << 30)) {
    return Status::Corruption();
  }
  m.version = static_cast<uint32_t>(version);
  m.tenant = tenant;
  m.stream = static_cast<StreamId>(stream);
  m.chunk_bytes = chunk;
  if (auto of = body.find("replica_of"); of != body.end()) {
    if (!of->is_string() || of->get<std::string>().empty() ||
        of->get<std::string>().size() > kMaxHostNameBytes) {
      return Status::Corruption();
    }
    m.replica_of = of->get<std::string>();
  }
  auto slices = body.find("slices");
  auto crcs = body.find("chunk_crc32c");
  if (slices == body.end() || !slices->is_array() || slices->size() > kMaxSlices ||
      crcs == body.end() || !crcs->is_array()) {
    return Status::Corruption();
  }
  // Sizes are untrusted: sum them without overflow, capped well below 2^63.
  const uint64_t cap = kU64Max / 4;
  uint64_t total = m.meta_len;
  if (total > cap) return Status::Corruption();
  m.slice_sizes.reserve(slices->size());
  for (const json& s : *slices) {
    if (!s.is_number_unsigned()) return Status::Corruption();
    uint64_t v = s.get<uint64_t>();
    if (v > cap - total) return Status::Corruption();
    total += v;
    m.slice_sizes.push_back(v);
  }
  if (m.slice_sizes.empty()) return Status::Corruption();
  uint64_t expect_chunks = total / chunk + (total % chunk != 0 ? 1 : 0);
  if (crcs->size() != expect_chunks) return Status::Corruption();
  m.chunk_crcs.reserve(crcs->size());
  for (const json& c : *crcs) {
    if (!c.is_number_unsigned() || c.get<uint64_t>() > 0xffffffffull) return Status::Corruption();
    m.chunk_crcs.push_back(static_cast<uint32_t>(c.get<uint64_t>()));
  }
  *out = std::move(m);
  return Status::Ok();
}

}  // namespace hz::checkpoint
