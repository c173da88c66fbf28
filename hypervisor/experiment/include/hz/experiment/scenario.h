// An explicit scenario for the emulator: given jobs on a uniform cluster and
// infrastructure events at given times, with the model's figures overridden.
// The validation run (validation/validate.py) writes one from what it ran and
// measured, so the emulator predicts the same configuration.
//
//   {"hosts": 4, "gpus_per_host": 2,
//    "jobs": [{"arrival_s": 0, "duration_s": 70, "gpus": 2}, ...],
//    "events": [{"time_s": 15, "kind": "gpu_failure", "job": 0}, ...],
//    "model": {"restart_s": 2.1, ...}}
//
// kind: gpu_failure, host_failure or maintenance; "job" is the index of the
// job the event strikes (simulator.h, FixedEvent); "model" is a calibration
// (model.h, ApplyCalibration). "events" and "model" may be left out.
#ifndef HZ_EXPERIMENT_SCENARIO_H_
#define HZ_EXPERIMENT_SCENARIO_H_

#include <string>
#include <vector>

#include "hz/common/status.h"
#include "hz/experiment/model.h"
#include "hz/experiment/simulator.h"
#include "hz/experiment/trace.h"

namespace hz::experiment {

struct Scenario {
  int hosts = 0;
  int gpus_per_host = 0;
  std::vector<TraceJob> jobs;
  std::vector<FixedEvent> events;
  std::vector<std::string> calibrated;  // the model figures it set
};

// Parses `json_text` into `out` and applies its "model" to `model`. An
// unknown key, a missing or out-of-range field, a job wider than a host or an
// event naming no job is kInvalidArgument, and neither is changed.
Status ParseScenario(const std::string& json_text, Scenario* out, Model* model);

}  // namespace hz::experiment

#endif  // HZ_EXPERIMENT_SCENARIO_H_
