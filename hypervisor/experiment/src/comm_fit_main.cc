// hz-comm-fit: the provider's collectives as calibration figures, fitted from
// service_allreduce_bench and cluster_allreduce_bench JSON lines (either may
// be absent). Prints {"figure": {"value", "unit", "source"}, ...} for
// hz-experiment --calibration; figures it cannot fit are named on stderr and
// keep their defaults.
//
//   hz-comm-fit [--service FILE] [--cluster FILE]
#include <cstdio>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "hz/common/file.h"
#include "hz/experiment/comm_model.h"

int main(int argc, char** argv) {
  using hz::experiment::FittedFigures;
  FittedFigures figures;
  std::vector<std::string> skipped;
  for (int i = 1; i < argc; ++i) {
    const bool service = std::strcmp(argv[i], "--service") == 0;
    const bool cluster = std::strcmp(argv[i], "--cluster") == 0;
    if ((!service && !cluster) || i + 1 >= argc) {
      std::fprintf(stderr, "usage: %s [--service FILE] [--cluster FILE]\n", argv[0]);
      return 2;
    }
    hz::StatusOr<std::string> text = hz::ReadFile(argv[++i]);
    if (!text.ok()) {
      std::fprintf(stderr, "hz-comm-fit: %s\n", text.status().ToString().c_str());
      return 2;
    }
    if (service) hz::experiment::FitServiceAllReduce(*text, &figures, &skipped);
    if (cluster) hz::experiment::FitClusterAllReduce(*text, &figures, &skipped);
  }
  for (const std::string& s : skipped)
    std::fprintf(stderr, "hz-comm-fit: %s not fitted: it keeps its default\n", s.c_str());
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, f] : figures)
    out[key] = {{"value", f.value}, {"unit", f.unit}, {"source", f.source}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
