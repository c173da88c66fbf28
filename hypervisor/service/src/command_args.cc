#include "command_args.h"

#include <set>

namespace hz::service {

using json = nlohmann::json;

Status OnlyFields(const json& req, std::initializer_list<const char*> allowed) {
  std::set<std::string> ok = {"cmd", "id"};
  for (const char* a : allowed) ok.insert(a);
  for (const auto& [k, v] : req.items()) {
    if (ok.count(k) == 0) return Status::InvalidArgument("unknown field \"" + k + "\"");
  }
  return Status::Ok();
}

bool GetUInts(const json& in, std::span<uint64_t> out) {
  if (!in.is_array() || in.size() != out.size()) return false;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!in[i].is_number_unsigned()) return false;
    out[i] = in[i].get<uint64_t>();
  }
  return true;
}

Status GetString(const json& req, const char* key, std::string* out) {
  auto it = req.find(key);
  if (it == req.end() || !it->is_string()) {
    return Status::InvalidArgument(std::string("field \"") + key + "\" must be a string");
  }
  *out = it->get<std::string>();
  return Status::Ok();
}

Status GetUInt(const json& req, const char* key, uint64_t def, uint64_t max, uint64_t* out) {
  auto it = req.find(key);
  if (it == req.end()) {
    *out = def;
    return Status::Ok();
  }
  if (!it->is_number_unsigned() || it->get<uint64_t>() > max) {
    return Status::InvalidArgument(std::string("field \"") + key + "\" must be an integer in 0.." +
                                   std::to_string(max));
  }
  *out = it->get<uint64_t>();
  return Status::Ok();
}

Status GetUInt(const json& req, const char* key, uint64_t max, uint64_t* out) {
  if (!req.contains(key))
    return Status::InvalidArgument(std::string("field \"") + key + "\" is missing");
  return GetUInt(req, key, 0, max, out);
}

Status GetBool(const json& req, const char* key, bool def, bool* out) {
  auto it = req.find(key);
  if (it == req.end()) {
    *out = def;
    return Status::Ok();
  }
  if (!it->is_boolean()) {
    return Status::InvalidArgument(std::string("field \"") + key + "\" must be true or false");
  }
  *out = it->get<bool>();
  return Status::Ok();
}

}  // namespace hz::service
