#!/usr/bin/env bash
# scripts/experiment.sh --smoke, then checks what a reader of the report
# depends on: both cohorts ran every seed on the same jobs, every job ended,
# the calibration came from this run's benchmarks, and the page and
# its plots were written with nothing left unfilled.
set -euo pipefail
top=$1
out=$(mktemp -d /tmp/hz-experiment-smoke.XXXXXX)
trap 'rm -rf "$out"' EXIT
# The validation has its own smoke (experiment_validation_smoke).
"$top/scripts/experiment.sh" --smoke --skip-validation --out "$out"
/usr/bin/python3 - "$out" <<'PY'
import csv, json, os, sys
out = sys.argv[1]
def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    print("ok:", what)
runs = list(csv.DictReader(open(os.path.join(out, "runs.csv"))))
check(sorted((r["cohort"], r["seed"]) for r in runs) ==
      sorted((c, str(s)) for c in ("standard", "cooperative") for s in range(3)),
      "runs.csv has both cohorts for seeds 0-2")
meta = json.load(open(os.path.join(out, "meta.json")))
for r in runs:
    check(int(r["jobs"]) > 0, "%s seed %s completed jobs" % (r["cohort"], r["seed"]))
by_seed = {}
for r in runs:
    by_seed.setdefault(r["seed"], set()).add(r["jobs"])
check(all(len(v) == 1 for v in by_seed.values()),
      "every cohort of a seed completed the same number of jobs: %s" % by_seed)
summary = list(csv.DictReader(open(os.path.join(out, "summary.csv"))))
for row in summary:
    check(float(row["ci95_low"]) <= float(row["mean"]) <= float(row["ci95_high"]),
          "%s %s: the mean lies in its interval" % (row["cohort"], row["measure"]))
cal = meta["calibration"]
check("checkpoint_bench" in cal["provider_stall_speedup"]["source"]
      and cal["provider_stall_speedup"]["value"] > 1,
      "the provider's stall is calibrated here and shorter than the tenant's write+fsync")
check("event_delivery_bench" in cal["push_latency_s"]["source"],
      "a pushed notice's delivery is calibrated here")
check("service_allreduce_bench" in cal["provider_busbw_ratio"]["source"]
      and cal["provider_busbw_ratio"]["value"] > 0,
      "the provider's collectives are calibrated here against Open MPI")
check(all(k in meta["assumptions"] for k in ("nccl_bus_efficiency", "mfu", "gpu_bf16_tflops")),
      "the communication model's published figures and assumptions are listed")
for png in ("jct_cdf.png", "lost_gpu_hours.png"):
    data = open(os.path.join(out, png), "rb").read(8)
    check(data == b"\x89PNG\r\n\x1a\n", png + " written")
page = open(os.path.join(out, "cooperation.md")).read()
check("{{" not in page and "cooperative" in page, "the report page is filled")
PY
