"""Runs vdev_bench briefly (0.2 s a case); checks that every case and both
goals report, each round trip with its requests and latencies, and that the
paired goals carry one ratio per round. No figure is judged here: a short
run on a shared machine says nothing of the goals."""
import json
import subprocess
import sys

CASES = ["eventfd_pingpong", "unix_socket_64b", "shm_spsc_ring", "vdev_frontend_only",
         "vdev_interrupt", "vdev_busy_poll"]
GOALS = ["vdev_interrupt_p50_over_eventfd_p50_paired_median",
         "vdev_busy_poll_batch32_rps_over_spsc_batch32_rps_paired_median"]


def main():
    out = subprocess.run([sys.argv[1], "--seconds", "0.2"], capture_output=True, text=True,
                         timeout=200)
    sys.stderr.write(out.stderr[-4000:])
    print(out.stdout)
    if out.returncode != 0:
        sys.exit("bench exited %d" % out.returncode)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    cases = {r["case"] for r in rows if "case" in r and "p50_us" in r}
    if sorted(cases) != sorted(CASES):
        sys.exit("cases reported: %s, expected %s" % (sorted(cases), sorted(CASES)))
    for r in rows:
        if "p50_us" in r and not (r["requests"] > 0 and 0 < r["p50_us"] <= r["p99_us"]):
            sys.exit("implausible round trip: %s" % r)
    goals = {r["ratio"]: r for r in rows if "ratio" in r}
    for name in GOALS:
        g = goals.get(name)
        if g is None or not isinstance(g["value"], (int, float)) or g["value"] <= 0:
            sys.exit("goal %s not reported: %s" % (name, g))
    paired = [r for r in rows if r.get("case") in ("paired_rounds", "paired_interrupt_rounds")]
    if len(paired) != 2 or any(len(r["ratios"]) == 0 for r in paired):
        sys.exit("expected both paired series with their rounds: %s" % paired)
    print("vdev_bench smoke ok: %d cases, busy-poll paired median %.3f" %
          (len(cases), goals[GOALS[1]]["value"]))


if __name__ == "__main__":
    main()
