// hzctl's human output: a table or a short report per command, for the
// answers `--json` prints as the service's JSON envelope instead.
#ifndef HZ_HZCTL_HUMAN_OUTPUT_H_
#define HZ_HZCTL_HUMAN_OUTPUT_H_

#include <string>

#include <nlohmann/json.hpp>

namespace hzctl {

// Prints the result of the control command cmd (e.g. "tenant.list") for a
// person: the command's own view where it has one, else the generic view of
// PrintGeneric.
void PrintHuman(const std::string& cmd, const nlohmann::json& result);

// Any answer as text: scalars as "key: value" lines, nested objects
// indented under their key, arrays of objects as tables whose columns are
// the objects' keys.
void PrintGeneric(const nlohmann::json& result);

}  // namespace hzctl

#endif  // HZ_HZCTL_HUMAN_OUTPUT_H_
