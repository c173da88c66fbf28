"""The collectives' latency and bandwidth goals, judged over several full runs.

  allreduce_goals.py run [--runs N] [--bin-dir DIR] [--out DIR]
  allreduce_goals.py report DIR

`run` measures, N times (3 by default):
  - service_allreduce_bench at 1, 16 and 64 MiB on 2, 4 and 8 ranks, with its
    10 s window of 8 idle tenants;
  - service_allreduce_bench at 4 and 64 KiB with low-latency communicators
    whose ranks spin up to 50 us (README.md, "Latency class");
  - vdev_bench;
keeps each run's JSON lines in DIR/run-K/ (bulk.jsonl, small.jsonl,
vdev.jsonl) and reports on them. `report` reads such a directory again.

The report is a Markdown table, a row for each cell of each goal, with every
run's figure, the run-to-run range of the time and CPU per operation where
the benchmark gives them, and in how many runs the cell met its goal; then one
JSON line per row. Every figure is a ratio against a reference the benchmark
measured in the same run (its header says which); nothing here is a wall-clock
threshold. A figure a run lacks (Open MPI not built, a bench that failed)
shows as "-" and counts as not met. Exits 0 whatever the verdicts: judging
is the reader's, a run on a shared machine is evidence, not a test.
"""
import argparse
import dataclasses
import json
import os
import subprocess
import sys

KIB, MIB = 1 << 10, 1 << 20

# What each run measures: file name and service_allreduce_bench's arguments
# (vdev_bench takes none).
RUNS = {
    "bulk.jsonl": ["--ranks", "2,4,8", "--sizes", "1M,16M,64M", "--rounds", "3", "--idle-s", "10"],
    "small.jsonl": ["--low-latency", "--tenant-spin-us", "50", "--ranks", "2,4,8", "--sizes",
                    "4K,64K", "--rounds", "3", "--idle-s", "0"],
}
VDEV_FILE = "vdev.jsonl"
BUSY_POLL_GOAL = "vdev_busy_poll_batch32_rps_over_spsc_batch32_rps_paired_median"


@dataclasses.dataclass(frozen=True)
class Goal:
    name: str
    what: str       # the figure and its reference
    key: str        # the figure's field in a result line
    at_least: float = None
    at_most: float = None
    min_bytes: int = 0
    max_bytes: int = 1 << 62
    low_latency: bool = False  # from the small runs' lines, else the bulk runs'

    def met(self, value):
        if value is None:
            return False
        if self.at_least is not None and value < self.at_least:
            return False
        return self.at_most is None or value <= self.at_most

    def bound(self):
        return (">= %g" % self.at_least) if self.at_least is not None else ("<= %g" % self.at_most)


# The goals, one row each per (ranks, size) that a run measured.
ALLREDUCE_GOALS = [
    Goal("small", "x Open MPI shared memory (busbw)", "ratio_to_mpi", at_least=1.0,
         max_bytes=64 * KIB, low_latency=True),
    Goal("large_mpi", "x Open MPI shared memory (busbw)", "ratio_to_mpi", at_least=1.5,
         min_bytes=1 * MIB),
    Goal("large_gloo", "x Gloo (busbw)", "ratio_to_gloo", at_least=6.0, min_bytes=1 * MIB),
    Goal("memory_bound", "of the memory-traffic bound (STREAM copy)", "ratio_to_memory_bound",
         at_least=0.9, min_bytes=16 * MIB),
]
# At most 0.1% of one CPU (1 ms a second, measured from schedstat): room for
# the service's housekeeping timers, where a thread left polling shows as
# whole percents.
IDLE_GOAL = Goal("idle", "service CPU share, 8 idle tenants", "service_cpu_share", at_most=0.001)
BUSY_POLL = Goal("vdev_busy_poll", "x unvalidated SPSC ring, paired median", "value",
                 at_least=0.5)


def read_lines(path):
    """The JSON objects of a file of JSON lines; none when it is missing."""
    if not os.path.exists(path):
        return []
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def load_runs(directory):
    """[{file: rows}] for each run-K folder, in K's order."""
    names = [d for d in os.listdir(directory) if d.startswith("run-") and d[4:].isdigit()]
    names.sort(key=lambda d: int(d[4:]))
    return [{f: read_lines(os.path.join(directory, d, f)) for f in list(RUNS) + [VDEV_FILE]}
            for d in names]


def size_name(b):
    return "%d MiB" % (b // MIB) if b >= MIB else "%d KiB" % (b // KIB)


def fmt(v, digits=2):
    return "-" if v is None else ("%.*f" % (digits, v))


def span(values, scale=1.0, digits=0):
    present = [v * scale for v in values if v is not None]
    if not present:
        return "-"
    lo, hi = min(present), max(present)
    return fmt(lo, digits) if lo == hi else "%s-%s" % (fmt(lo, digits), fmt(hi, digits))


def allreduce_rows(goal, runs):
    """A row per (ranks, bytes) that any run measured for the goal."""
    source = "small.jsonl" if goal.low_latency else "bulk.jsonl"
    per_run = []
    cells = set()
    for run in runs:
        lines = {}
        for r in run[source]:
            if r.get("bench") != "service_allreduce" or "error" in r:
                continue
            if not goal.min_bytes <= r["bytes"] <= goal.max_bytes:
                continue
            lines[(r["ranks"], r["bytes"])] = r
            if r.get(goal.key) is not None:
                cells.add((r["ranks"], r["bytes"]))
        per_run.append(lines)
    rows = []
    for ranks, b in sorted(cells):
        found = [lines.get((ranks, b)) for lines in per_run]
        values = [r.get(goal.key) if r else None for r in found]
        rows.append({
            "goal": goal.name, "cell": "%d ranks, %s" % (ranks, size_name(b)), "ranks": ranks,
            "bytes": b, "figure": goal.what, "bound": goal.bound(), "values": values,
            "met_runs": sum(goal.met(v) for v in values), "runs": len(runs),
            "time_us": [r.get("time_us") if r else None for r in found],
            "service_cpu_us": [r.get("service_cpu_s_per_iteration") if r else None for r in found],
            "tenant_cpu_us": [r.get("tenant_cpu_s_per_iteration") if r else None for r in found],
        })
    return rows


def single_row(goal, cell, values, runs):
    return {"goal": goal.name, "cell": cell, "figure": goal.what, "bound": goal.bound(),
            "values": values, "met_runs": sum(goal.met(v) for v in values), "runs": runs}


def idle_row(runs):
    values = []
    for run in runs:
        idle = [r for r in run["bulk.jsonl"] if r.get("bench") == "service_idle" and
                "error" not in r]
        values.append(idle[0].get(IDLE_GOAL.key) if idle else None)
    return single_row(IDLE_GOAL, "8 tenants, 10 s", values, len(runs))


def busy_poll_row(runs):
    values = []
    for run in runs:
        goal = [r for r in run[VDEV_FILE] if r.get("ratio") == BUSY_POLL_GOAL]
        values.append(goal[0].get("value") if goal else None)
    return single_row(BUSY_POLL, "batch 32", values, len(runs))


def report_rows(runs):
    rows = []
    for goal in ALLREDUCE_GOALS:
        rows.extend(allreduce_rows(goal, runs))
    rows.append(idle_row(runs))
    rows.append(busy_poll_row(runs))
    return rows


def markdown(rows):
    out = ["| goal | cell | figure | bound | per run | met | us | CPU us service / tenant |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        digits = 4 if r["goal"] == "idle" else 2
        per_run = " / ".join(fmt(v, digits) for v in r["values"])
        timing, cpu = "", ""
        if "time_us" in r:
            timing = span(r["time_us"], digits=1)
            cpu = "%s / %s" % (span(r["service_cpu_us"], 1e6), span(r["tenant_cpu_us"], 1e6))
        out.append("| %s | %s | %s | %s | %s | %d of %d | %s | %s |" %
                   (r["goal"], r["cell"], r["figure"], r["bound"], per_run, r["met_runs"],
                    r["runs"], timing, cpu))
    return "\n".join(out)


def report(directory):
    runs = load_runs(directory)
    if not runs:
        sys.exit("no run-K folders in %s" % directory)
    rows = report_rows(runs)
    print(markdown(rows))
    for r in rows:
        print(json.dumps(r))


def run_all(runs, bin_dir, out):
    allreduce = os.path.join(bin_dir, "tests/bench/service/service_allreduce_bench")
    vdev = os.path.join(bin_dir, "tests/bench/vdev/vdev_bench")
    for exe in (allreduce, vdev):
        if not os.access(exe, os.X_OK):
            sys.exit("%s is not built (cmake --build --preset default)" % exe)
    for k in range(1, runs + 1):
        folder = os.path.join(out, "run-%d" % k)
        os.makedirs(folder, exist_ok=True)
        jobs = [(f, [allreduce] + args) for f, args in RUNS.items()] + [(VDEV_FILE, [vdev])]
        for name, cmd in jobs:
            print("run %d of %d: %s" % (k, runs, " ".join(cmd)), file=sys.stderr, flush=True)
            with open(os.path.join(folder, name), "w") as f:
                rc = subprocess.run(cmd, stdout=f).returncode
            if rc != 0:
                print("  exited %d; its cells show what it printed" % rc, file=sys.stderr)
    report(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="measure N full runs, then report")
    r.add_argument("--runs", type=int, default=3, choices=range(1, 101), metavar="N")
    r.add_argument("--bin-dir", default="build/default")
    r.add_argument("--out", default="allreduce-goals")
    p = sub.add_parser("report", help="report on runs measured before")
    p.add_argument("dir")
    args = ap.parse_args()
    if args.cmd == "run":
        run_all(args.runs, args.bin_dir, args.out)
    else:
        report(args.dir)


if __name__ == "__main__":
    main()
