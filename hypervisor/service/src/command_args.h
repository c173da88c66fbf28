// Reading the fields of an operator command (control API) that an engine or
// the provider runs: each check answers InvalidArgument with the message the
// operator reads. Every command accepts "cmd" and "id" besides its own fields.
// The device's state handed over in a live upgrade is read with them too.
#ifndef HZ_SERVICE_COMMAND_ARGS_H_
#define HZ_SERVICE_COMMAND_ARGS_H_

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "hz/common/status.h"

namespace hz::service {

// req has no field besides cmd, id and `allowed`.
Status OnlyFields(const nlohmann::json& req, std::initializer_list<const char*> allowed);
// req[key] is a string: into *out.
Status GetString(const nlohmann::json& req, const char* key, std::string* out);
// req[key] is an integer in 0..max, or absent (then def): into *out.
Status GetUInt(const nlohmann::json& req, const char* key, uint64_t def, uint64_t max,
               uint64_t* out);
// GetUInt's max for a field of 16, 32 or 64 bits.
inline constexpr uint64_t kU16Max = UINT16_MAX;
inline constexpr uint64_t kU32Max = UINT32_MAX;
inline constexpr uint64_t kU64Max = UINT64_MAX;
// req[key] is an integer in 0..max: into *out. Absent is an error.
Status GetUInt(const nlohmann::json& req, const char* key, uint64_t max, uint64_t* out);
// in is a list of exactly out.size() unsigned integers: into out.
bool GetUInts(const nlohmann::json& in, std::span<uint64_t> out);
// req[key] is true or false, or absent (then def): into *out.
Status GetBool(const nlohmann::json& req, const char* key, bool def, bool* out);

}  // namespace hz::service

#endif  // HZ_SERVICE_COMMAND_ARGS_H_
