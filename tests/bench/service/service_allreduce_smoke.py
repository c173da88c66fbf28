"""Runs service_allreduce_bench briefly (2 ranks, 4 KiB and 16 MiB, no
references but the memory ones, a 1-second idle window); checks that each line
is well formed, that the CPU figures are there and plausible, that the 16 MiB
line carries its one-pass reference (and the 4 KiB line none), and that the
idle line reports. Then once more with low-latency communicators, a polling
window of its own and ranks that ask for a longer spin: the device reports
that window, the ranks spin no longer, and the 4 KiB line carries its
process-turn reference. Last with a window of 0: the device says it does not
poll, and the ranks do not spin."""
import json
import subprocess
import sys


def run(bench, *args):
    # No ratio is checked here: a small STREAM copy will do.
    cmd = [bench, "--ranks", "2", "--rounds", "1", "--no-references", "--iters-scale", "0.1",
           "--copy-bytes", "64M"]
    out = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=240)
    sys.stderr.write(out.stderr[-4000:])
    print(out.stdout)
    if out.returncode != 0:
        sys.exit("bench exited %d" % out.returncode)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def run_low_latency(bench, window_us, spin_us):
    rows = run(bench, "--sizes", "4K", "--idle-s", "0", "--low-latency", "--tenant-spin-us",
               str(spin_us), "--latency-poll-us", str(window_us))
    result = [r for r in rows if r.get("bench") == "service_allreduce"]
    turns = [r for r in rows if r.get("reference") == "process_turn"]
    if len(result) != 1 or "error" in result[0] or len(turns) != 1:
        sys.exit("expected one low-latency result and one process_turn line: %s" % rows)
    r = result[0]
    if r["device_latency_poll_us"] != window_us:
        sys.exit("the device reports a window of %r us, not the %d configured" %
                 (r["device_latency_poll_us"], window_us))
    if r["tenant_spin_used_us"] != min(spin_us, window_us):
        sys.exit("asked for %d us of spin within a %d us window, the ranks spun %r" %
                 (spin_us, window_us, r["tenant_spin_used_us"]))
    return r, turns[0]


def check_low_latency(bench):
    r, turn_line = run_low_latency(bench, 120, 1000)
    turn = turn_line["turn_us"]
    if not isinstance(turn, (int, float)) or turn <= 0 or r["process_turn_us"] != turn:
        sys.exit("process turn %r against the line's %r" % (turn, r["process_turn_us"]))
    # The line's figure is its time in those turns, as measured.
    if abs(r["time_in_process_turns"] * turn - r["time_us"]) > 1e-6 * r["time_us"]:
        sys.exit("time_in_process_turns does not match time_us: %s" % r)
    return r


def main():
    rows = run(sys.argv[1], "--sizes", "4K,16M", "--idle-s", "1")
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
    if r["device_latency_poll_us"] != 200:
        sys.exit("the device reports a window of %r us, not the default 200" %
                 r["device_latency_poll_us"])
    low = check_low_latency(sys.argv[1])
    run_low_latency(sys.argv[1], 0, 50)
    print("service_allreduce smoke ok: service %.1f us CPU per iteration, idle share %.4f; "
          "low latency %.1f us, %.1f process turns" %
          (r["service_cpu_s_per_iteration"] * 1e6, i["service_cpu_share"], low["time_us"],
           low["time_in_process_turns"]))


if __name__ == "__main__":
    main()
