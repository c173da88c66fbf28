// CheckpointHandler's part in a live upgrade and a crash recovery: each
// quiescence registration goes to the next process as the guest declared it
// (stream, word and state slices), and is declared there again on the
// session's restored regions. Checkpoints themselves are on disk already.

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "command_args.h"
#include "hz/checkpoint/manifest.h"
#include "hz/service/ckpt_handler.h"
#include "hz/service/device_state.h"

namespace hz::service {

using json = nlohmann::json;

namespace {

json SliceJson(const hz_slice& s) {
  return {s.region_id, s.offset, s.length};
}

Status ReadSlice(const json& in, hz_slice* out) {
  uint64_t v[3];  // region_id, offset, length
  if (!GetUInts(in, v) || v[0] > kU32Max) {
    return Status::InvalidArgument("a slice must be [region_id, offset, length]");
  }
  *out = hz_slice{};
  out->region_id = static_cast<uint32_t>(v[0]);
  out->offset = v[1];
  out->length = v[2];
  return Status::Ok();
}

// One registration as saved; *stream nonzero.
Status ReadRegistration(const json& in, uint32_t* stream, hz_slice* word,
                        std::vector<hz_slice>* slices) {
  uint64_t id = 0;
  if (Status st = GetUInt(in, "stream", kU32Max, &id); !st.ok()) return st;
  if (id == 0) return Status::InvalidArgument("stream 0 has no registration");
  *stream = static_cast<uint32_t>(id);
  if (!in.contains("word")) return Status::InvalidArgument("the word is missing");
  if (Status st = ReadSlice(in["word"], word); !st.ok()) return st;
  const auto list = in.find("slices");
  if (list == in.end() || !list->is_array() || list->size() > checkpoint::kMaxSlices) {
    return Status::InvalidArgument("slices must be a list of at most " +
                                   std::to_string(checkpoint::kMaxSlices));
  }
  for (const json& s : *list) {
    slices->emplace_back();
    if (Status st = ReadSlice(s, &slices->back()); !st.ok()) return st;
  }
  return Status::Ok();
}

}  // namespace

Status CheckpointHandler::SaveState(json* out) const {
  json registrations = json::array();
  for (const auto& [stream, reg] : quiesce_) {
    json slices = json::array();
    for (const hz_slice& s : reg.slices) slices.push_back(SliceJson(s));
    registrations.push_back(
        {{"stream", stream}, {"word", SliceJson(reg.word)}, {"slices", std::move(slices)}});
  }
  (*out)["quiesce"] = std::move(registrations);
  return Status::Ok();
}

Status CheckpointHandler::RestoreState(const json& in) {
  if (!quiesce_.empty()) return Status::State("quiescence registrations exist already");
  // A predecessor that had none (or an older format) says nothing.
  const auto list = in.find("quiesce");
  if (list == in.end()) return Status::Ok();
  if (!list->is_array()) return Status::InvalidArgument("quiesce must be a list");
  if (!list->empty() && (backend_ == nullptr || !ctx_.session.Granted(HZ_F_CHECKPOINT))) {
    return Status::InvalidArgument("quiescence registrations in a session without checkpoints");
  }
  for (const json& r : *list) {
    uint32_t stream = 0;
    hz_slice word;
    std::vector<hz_slice> slices;
    if (Status st = ReadRegistration(r, &stream, &word, &slices); !st.ok()) return st;
    if (quiesce_.count(stream) != 0) {
      return Status::InvalidArgument("stream " + std::to_string(stream) + " is registered twice");
    }
    // What the guest declared was valid in the predecessor, on the same
    // regions; it can fail here only when the operator changed the
    // checkpoint staging or the stream's policy meanwhile. The session goes
    // on without it, as if the guest had not declared it.
    uint32_t detail = 0;
    if (uint32_t st = Register(tenant_.id(), stream, word, std::move(slices), &detail);
        st != HZ_S_OK) {
      spdlog::error(
          "event=quiesce_not_restored vm={} stream={} status={} detail={} "
          "reason=\"the registration does not declare again here\"",
          ctx_.vm, stream, st, detail);
    }
  }
  return Status::Ok();
}

}  // namespace hz::service
