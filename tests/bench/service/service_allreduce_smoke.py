"""Runs service_allreduce_bench briefly (2 ranks, 4 KiB and 16 MiB, no
references but the memory ones, a 1-second idle window); checks that each line
is well formed, that the CPU figures are there and plausible, that the 16 MiB
line carries its one-pass reference (and the 4 KiB line none), and that the
idle line reports."""
import json
import subprocess
import sys


def main():
    cmd = [sys.argv[1], "--ranks", "2", "--sizes", "4K,16M", "--rounds", "1", "--no-references",
           "--iters-scale", "0.1", "--idle-s", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    sys.stderr.write(out.stderr[-4000:])
    print(out.stdout)
    if out.returncode != 0:
        sys.exit("bench exited %d" % out.returncode)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    result = [r for r in rows if r.get("bench") == "service_allreduce"]
    idle = [r for r in rows if r.get("bench") == "service_idle"]
    if len(result) != 2 or any("error" in r for r in result):
        sys.exit("expected two all-reduce results, got %s" % result)
    r, large = sorted(result, key=lambda r: r["bytes"])
    # The one-pass reference runs past the caches only, and a ratio against
    # it is a positive number (how positive is the benchmark's business).
    if r.get("ratio_to_one_pass") is not None:
        sys.exit("a 4 KiB result has a one-pass ratio: %s" % r)
    for key in ("ratio_to_one_pass", "one_pass_ratio_to_memory_bound"):
        v = large.get(key)
        if not isinstance(v, (int, float)) or not 0 < v < 100:
            sys.exit("16 MiB %s is %r" % (key, v))
    if not any(row.get("reference") == "one_pass_allreduce" for row in rows):
        sys.exit("no one_pass_allreduce reference line")
    # A timed iteration makes the service and the ranks work: some CPU, and
    # less than its wall time on every core of the machine.
    for key in ("service_cpu_s_per_iteration", "tenant_cpu_s_per_iteration"):
        v = r.get(key)
        if not isinstance(v, (int, float)) or v <= 0:
            sys.exit("%s is %r" % (key, v))
    if len(idle) != 1 or "error" in idle[0]:
        sys.exit("expected one idle line, got %s" % idle)
    i = idle[0]
    if i["tenants"] != 8 or not 0 <= i["service_cpu_s"] or not 0.5 < i["window_s"] < 30:
        sys.exit("the idle line is implausible: %s" % i)
    print("service_allreduce smoke ok: service %.1f us CPU per iteration, idle share %.4f" %
          (r["service_cpu_s_per_iteration"] * 1e6, i["service_cpu_share"]))


if __name__ == "__main__":
    main()
