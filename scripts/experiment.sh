#!/usr/bin/env bash
# The cooperation experiment end to end: builds hz-experiment and the
# benchmarks, calibrates the model on this machine (checkpoint_bench,
# event_delivery_bench, service_allreduce_bench, cluster_allreduce_bench),
# runs every cohort over the seeds, draws the plots and renders
# docs/experiments/cooperation.md with its CSVs beside it. Then validates the
# emulator against a real run of a small configuration
# (hypervisor/experiment/validation/validate.py) into DIR/validation; the
# report shows it, and the script fails after the report if they disagree.
#
# Usage: scripts/experiment.sh [--smoke] [--skip-validation] [--out DIR] [--trace-dir DIR]
#                              [-- HZ_EXPERIMENT_ARGS...]
#   --smoke      a short run: one day of jobs drawn from a 2,000-job synthetic
#                trace on 64 hosts, standard and cooperative, 3 seeds; writes
#                into --out only (default: a temporary directory), never docs/
#   --skip-validation  no validation run (it takes about 3 minutes, 1 with --smoke)
#   --out        where the CSVs, plots and meta.json go
#                (default: docs/experiments/cooperation)
#   --trace-dir  Alibaba's cluster-trace-gpu-v2023 CSV files (its licence
#                forbids shipping them; the default is a directory beside
#                the repository). Without them the synthetic trace stands in,
#                and the output and the report say so.
#   -- ARGS      passed on to hz-experiment (--window-days 2, --seeds 20, ...)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
smoke=0 validation=1 out='' trace_dir="$top/../shared/data/alibaba-gpu-v2023"
while [ $# -gt 0 ]; do
	case $1 in
	--smoke) smoke=1; shift ;;
	--skip-validation) validation=0; shift ;;
	--out) out=$2; shift 2 ;;
	--trace-dir) trace_dir=$2; shift 2 ;;
	--) shift; break ;;
	-h | --help) sed -n '2,23p' "$0"; exit 0 ;;
	*) echo "experiment.sh: unknown argument: $1" >&2; exit 2 ;;
	esac
done
bin=${HZ_BUILD_DIR:-$top/build/default}
if [ ! -x "$bin/hypervisor/experiment/hz-experiment" ] || [ -z "${HZ_BUILD_DIR:-}" ]; then
	export CCACHE_BASEDIR=$top CCACHE_NOHASHDIR=1
	cmake --preset default -S "$top" >/dev/null
	cmake --build "$bin" --target hz-experiment hz-comm-fit checkpoint_bench event_delivery_bench \
		service_allreduce_bench cluster_bench_rank harmonaized hzctl hz-validation-job -j "$(nproc)"
fi
if [ -z "$out" ]; then
	if [ "$smoke" -eq 1 ]; then
		out=$(mktemp -d /tmp/hz-experiment.XXXXXX)
	else
		out=$top/docs/experiments/cooperation
	fi
fi
mkdir -p "$out"
py=/usr/bin/python3
report=$top/hypervisor/experiment/report

# Calibration in this run:
# - the provider's checkpoint stall and persist rate as ratios to the
#   tenant's own write+fsync and to raw O_DIRECT (checkpoint_bench); the
#   emulator applies them to the GPU server's write rate (model.h);
# - a pushed notice's delivery: event_delivery_bench's p99 from publish to
#   100 virtio-user subscribers through harmonaized;
# - the provider's collectives (hz-comm-fit): latency and bus bandwidth fitted
#   to service_allreduce_bench's sizes and ranks, as ratios to Open MPI's
#   shared-memory all-reduce of the same run; across hosts, the device's and
#   flat Gloo's over TCP (cluster_allreduce_bench, network namespaces with
#   shaped links, root only) as shares of the link's rate.
# Not in /tmp, which may be a tmpfs: the save must reach a disk.
scratch=$(mktemp -d "$bin/hz-experiment-ckpt.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
reps=3 events=200 ranks=2,4,8 sizes=4K,64K,1M,16M iters_scale=0.2
configs=2x2,4x1 cluster_sizes=65536,1048576,4194304,16777216 cluster_iters=5
if [ "$smoke" -eq 1 ]; then
	reps=1 events=20 ranks=2,4 iters_scale=0.1 configs=2x1 cluster_sizes=65536,1048576,4194304 cluster_iters=3
fi
"$bin/tests/bench/checkpoint/checkpoint_bench" --size-mib 64 --reps "$reps" --dir "$scratch" \
	>"$out/checkpoint_bench.jsonl"
"$bin/tests/bench/service/event_delivery_bench" --subscribers 100 --layouts tenants \
	--events "$events" --poll-samples 3 >"$out/event_delivery_bench.jsonl"
"$bin/tests/bench/service/service_allreduce_bench" --ranks "$ranks" --sizes "$sizes" --rounds 1 \
	--iters-scale "$iters_scale" --idle-s 0 >"$out/service_allreduce_bench.jsonl"
fit=(--service "$out/service_allreduce_bench.jsonl")
if [ "$(id -u)" -ne 0 ]; then
	echo "experiment.sh: not root: no cluster_allreduce_bench; the figures across hosts stay assumptions" >&2
elif PYTHONPATH="$top/tests/support/python:$top/tests/integration/python:$top/tests/integration/cluster" \
	HZ_HARMONAIZED="$bin/hypervisor/service/harmonaized" HZ_HZCTL="$bin/hypervisor/hzctl/hzctl" \
	HZ_CLUSTER_BENCH_RANK="$bin/tests/bench/cluster/cluster_bench_rank" PYTHONDONTWRITEBYTECODE=1 \
	timeout 600 "$py" "$top/tests/bench/cluster/cluster_allreduce_bench.py" --configs "$configs" \
	--sizes "$cluster_sizes" --iters "$cluster_iters" \
	>"$out/cluster_allreduce_bench.jsonl"; then
	fit+=(--cluster "$out/cluster_allreduce_bench.jsonl")
else
	echo "experiment.sh: cluster_allreduce_bench failed; the figures across hosts stay assumptions" >&2
fi
"$bin/hypervisor/experiment/hz-comm-fit" "${fit[@]}" >"$out/comm_fit.json"
"$py" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def lines(name):
    return [json.loads(l) for l in open(os.path.join(out, name)) if l.startswith("{")]
ckpt = {l.get("metric"): l for l in lines("checkpoint_bench.jsonl")}
delivery = [l for l in lines("event_delivery_bench.jsonl") if l.get("bench") == "event_delivery"]
stall = ckpt["tenant_stall"]["ratio_tenant_over_harmonaize"]
persist = ckpt["persist_throughput"]["ratio_vs_raw"]
p99_us = delivery[-1]["p99_us"]
cal = {
    "provider_stall_speedup": {
        "value": stall,
        "source": "checkpoint_bench here: harmonaized's save stall against the tenant's "
                  "write+fsync, 64 MiB"},
    "persist_efficiency": {
        "value": persist,
        "source": "checkpoint_bench here: persist throughput against raw O_DIRECT, 64 MiB"},
    "push_latency_s": {
        "value": p99_us / 1e6,
        "source": "event_delivery_bench here: p99 publish-to-delivery, 100 subscribers"},
}
cal.update(json.load(open(os.path.join(out, "comm_fit.json"))))
json.dump(cal, open(os.path.join(out, "calibration.json"), "w"), indent=2)
PY

args=(--calibration "$out/calibration.json" --out "$out")
if [ "$smoke" -eq 1 ]; then
	# shellcheck disable=SC2054 # the comma separates hz-experiment's cohorts
	args+=(--synthetic-jobs 2000 --hosts 64 --window-days 1 --cohorts standard,cooperative --seeds 3)
elif [ -f "$trace_dir/openb_pod_list_default.csv" ]; then
	args+=(--trace-dir "$trace_dir")
else
	echo "experiment.sh: no trace at $trace_dir: the synthetic trace stands in" >&2
fi
"$bin/hypervisor/experiment/hz-experiment" "${args[@]}" "$@" >"$out/results.jsonl"

# The emulator against a real run of the same small configuration; its
# checkpoint files go to the scratch directory, on a disk.
agrees=0
rm -rf "$out/validation"  # a report shows this run's validation or none
if [ "$validation" -eq 1 ]; then
	config=$top/hypervisor/experiment/validation/full.json
	[ "$smoke" -eq 1 ] && config=$top/hypervisor/experiment/validation/smoke.json
	"$py" "$top/hypervisor/experiment/validation/validate.py" --config "$config" \
		--build-dir "$bin" --out "$out/validation" --work-dir "$scratch" || agrees=$?
fi
MPLBACKEND=Agg "$py" "$report/plot.py" "$out"
page=$top/docs/experiments/cooperation.md
[ "$smoke" -eq 1 ] && page=$out/cooperation.md
"$py" "$report/report.py" "$out" "$report/cooperation.md.in" "$page"
echo "experiment.sh: report $page, data in $out"
if [ "$agrees" -ne 0 ]; then
	echo "experiment.sh: the validation failed (see $out/validation)" >&2
	exit "$agrees"
fi
