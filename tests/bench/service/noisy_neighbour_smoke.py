"""Runs every noisy-neighbour attack briefly; checks only that each printed a
well-formed line and that tenant B completed requests under it."""
import json
import subprocess
import sys

ATTACKS = ["ckpt_quiesce", "ckpt_save_flood", "neg_flood", "ckpt_policy_batch",
           "metrics_idle_connections", "region_max", "reconnect_churn", "busy_poll_frontend",
           "collective_flood", "own_cpu_copy"]
KEYS = ["b_allreduce_p50_ratio", "b_allreduce_p99_ratio", "b_topology_p50_ratio",
        "b_topology_p99_ratio", "unloaded", "loaded", "a_ops"]


def main():
    out = subprocess.run([sys.argv[1], "--smoke"], capture_output=True, text=True, timeout=360)
    sys.stderr.write(out.stderr[-4000:])
    print(out.stdout)
    if out.returncode != 0:
        sys.exit("bench exited %d" % out.returncode)
    seen = {}
    for line in out.stdout.splitlines():
        row = json.loads(line)
        seen[row["attack"]] = row
    failed = False
    for name in ATTACKS:
        row = seen.get(name)
        if row is None:
            print("missing attack", name)
            failed = True
            continue
        missing = [k for k in KEYS if k not in row]
        if missing or row["b_allreduce_samples"] == 0 or row["b_topology_samples"] == 0:
            print("bad line for", name, missing, row)
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
