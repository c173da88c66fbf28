#include "ckpt_replica_wire.h"

#include <nlohmann/json.hpp>

#include "hz/service/tenants.h"

namespace hz::service {

using json = nlohmann::json;

namespace {

bool U64(const json& j, const char* key, uint64_t max, uint64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned() || it->get<uint64_t>() > max) return false;
  *out = it->get<uint64_t>();
  return true;
}

bool Str(const json& j, const char* key, size_t max, std::string* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string() || it->get_ref<const std::string&>().size() > max) {
    return false;
  }
  *out = it->get<std::string>();
  return true;
}

bool DecodePolicy(const json& j, checkpoint::Policy* p) {
  uint64_t retention, tier, stall, rpo;
  if (!j.is_object() || !U64(j, "retention", 1000000, &retention) || retention == 0 ||
      !U64(j, "tier", HZ_TIER_PEER_HOST, &tier) || !U64(j, "stall_budget_ms", UINT32_MAX, &stall) ||
      !U64(j, "rpo_s", UINT32_MAX, &rpo)) {
    return false;
  }
  auto flag = j.find("auto_save_on_notice");
  if (flag == j.end() || !flag->is_boolean()) return false;
  p->retention = static_cast<uint32_t>(retention);
  p->tier = static_cast<checkpoint::TierKind>(tier);
  p->stall_budget_ms = static_cast<uint32_t>(stall);
  p->rpo_s = static_cast<uint32_t>(rpo);
  p->auto_save_on_notice = flag->get<bool>();
  return true;
}

}  // namespace

std::string EncodeRequest(const ReplicaRequest& r) {
  const checkpoint::Policy& p = r.policy;
  json policy = {{"retention", p.retention},
                 {"tier", static_cast<uint32_t>(p.tier)},
                 {"stall_budget_ms", p.stall_budget_ms},
                 {"rpo_s", p.rpo_s},
                 {"auto_save_on_notice", p.auto_save_on_notice}};
  return json{{"version", 1},
              {"id", r.id},
              {"source", r.source},
              {"tenant", r.tenant},
              {"manifest", checkpoint::EncodeManifest(r.manifest)},
              {"policy", std::move(policy)},
              {"deadline_unix_ms", r.deadline_unix_ms}}
      .dump();
}

Status DecodeRequest(const std::string& text, ReplicaRequest* out) {
  if (text.size() > kMaxReplicaRequestBytes) return Status::InvalidArgument("oversized request");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  uint64_t version = 0;
  std::string manifest;
  if (!j.is_object() || !U64(j, "version", 1, &version) || version != 1 ||
      !Str(j, "id", 64, &out->id) || !Str(j, "source", 256, &out->source) ||
      !Str(j, "tenant", 256, &out->tenant) ||
      !Str(j, "manifest", checkpoint::kMaxManifestBytes, &manifest) ||
      !U64(j, "deadline_unix_ms", UINT64_MAX, &out->deadline_unix_ms) || !j.contains("policy") ||
      !DecodePolicy(j["policy"], &out->policy)) {
    return Status::InvalidArgument("not a replica request");
  }
  if (out->id.empty() || !TenantRegistry::ValidName(out->tenant)) {
    return Status::InvalidArgument("bad id or tenant name in a replica request");
  }
  for (char c : out->id) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return Status::InvalidArgument("bad id");
  }
  return checkpoint::DecodeManifest(manifest, &out->manifest).ok()
             ? Status::Ok()
             : Status::InvalidArgument("bad manifest in a replica request");
}

std::string EncodeForget(const ReplicaForget& f) {
  return json{{"version", 1},
              {"forget",
               {{"source", f.source},
                {"tenant", f.tenant},
                {"stream", f.stream},
                {"step", f.step},
                {"digest", f.digest}}}}
      .dump();
}

Status DecodeForget(const std::string& text, ReplicaForget* out) {
  if (text.size() > 4096) return Status::InvalidArgument("oversized forget");
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  uint64_t version = 0, stream = 0, digest = 0;
  if (!j.is_object() || !U64(j, "version", 1, &version) || version != 1 || !j.contains("forget")) {
    return Status::InvalidArgument("not a forget");
  }
  const json& f = j["forget"];
  if (!f.is_object() || !Str(f, "source", 256, &out->source) ||
      !Str(f, "tenant", 256, &out->tenant) || !U64(f, "stream", UINT32_MAX, &stream) ||
      stream == 0 || !U64(f, "step", UINT64_MAX - 1, &out->step) || out->step == 0 ||
      !U64(f, "digest", UINT32_MAX, &digest) || !TenantRegistry::ValidName(out->tenant)) {
    return Status::InvalidArgument("not a forget");
  }
  out->stream = static_cast<uint32_t>(stream);
  out->digest = static_cast<uint32_t>(digest);
  return Status::Ok();
}

Status SendStatus(cluster::InterHostGroup& g, uint32_t peer, uint64_t tag, const Status& st,
                  std::chrono::milliseconds timeout) {
  const uint32_t code = static_cast<uint32_t>(st.code());
  return g.Send(peer, tag, &code, sizeof code, timeout);
}

Status RecvStatus(cluster::InterHostGroup& g, uint32_t peer, uint64_t tag,
                  std::chrono::milliseconds timeout) {
  uint32_t code = 0;
  if (Status st = g.Recv(peer, tag, &code, sizeof code, timeout); !st.ok()) return st;
  if (code >= kStatusCodeCount) return Status::IoError("an answer out of range");
  if (code == 0) return Status::Ok();
  return Status(static_cast<StatusCode>(code), "refused by the replica host");
}

}  // namespace hz::service
