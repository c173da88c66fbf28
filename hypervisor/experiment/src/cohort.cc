#include "hz/experiment/cohort.h"

#include <algorithm>

namespace hz::experiment {
namespace {

Mechanisms Cooperative() {
  return {true, true, true, true, true, true, Information::kCoarse, Information::kCoarse};
}

}  // namespace

std::vector<Cohort> AllCohorts() {
  std::vector<Cohort> all;
  all.push_back({"standard",
                 "tenant write+fsync checkpoints at a fixed interval, notices polled at 1 Hz with "
                 "today's lead times, first-fit placement, no negotiation",
                 Mechanisms{}});
  all.push_back({"cooperative",
                 "provider checkpoints with saves on notice and peer replicas, pushed and early "
                 "notices, replacements negotiated at notices, topology-aware placement with the "
                 "provider's collectives; coarse events and topology",
                 Cooperative()});
  struct Ablation {
    const char* name;
    const char* what;
    bool Mechanisms::*flag;
  };
  const Ablation ablations[] = {
      {"only_provider_ckpt", "provider checkpoints", &Mechanisms::provider_ckpt},
      {"only_jit_notice", "saves on notice", &Mechanisms::jit_on_notice},
      {"only_peer_replicas", "peer replicas", &Mechanisms::peer_replicas},
      {"only_pushed_notices", "pushed and early notices", &Mechanisms::pushed_notices},
      {"only_reservations", "replacements negotiated at notices", &Mechanisms::reservations},
      {"only_topology", "topology-aware placement and planning, the provider's collectives",
       &Mechanisms::topology},
  };
  for (const Ablation& a : ablations) {
    Mechanisms m;
    m.*(a.flag) = true;
    all.push_back({a.name, std::string("standard plus ") + a.what + " only", m});
  }
  struct Level {
    const char* name;
    Information info;
  };
  const Level levels[] = {
      {"full", Information::kFull}, {"coarse", Information::kCoarse}, {"none", Information::kNone}};
  for (const Level& l : levels) {
    Mechanisms m = Cooperative();
    m.events = l.info;
    all.push_back(
        {std::string("events_") + l.name, std::string("cooperative, events told ") + l.name, m});
  }
  for (const Level& l : levels) {
    Mechanisms m = Cooperative();
    m.topology_info = l.info;
    all.push_back({std::string("topology_") + l.name,
                   std::string("cooperative, topology told ") + l.name, m});
  }
  return all;
}

bool SelectCohorts(const std::vector<std::string>& names, std::vector<Cohort>* out) {
  const std::vector<Cohort> all = AllCohorts();
  out->clear();
  for (const std::string& name : names) {
    auto it = std::find_if(all.begin(), all.end(), [&](const Cohort& c) { return c.name == name; });
    if (it == all.end()) return false;
    out->push_back(*it);
  }
  return true;
}

}  // namespace hz::experiment
