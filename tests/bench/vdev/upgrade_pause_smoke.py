"""Runs upgrade_pause_bench with two upgrades (or, with --crash after the
program, two crashes); checks only that it printed one well-formed JSON object
with every figure, for the run and for each event."""
import json
import subprocess
import sys

KEYS = ["pause_us", "p99_us", "pause_over_p99", "requests"]


def main():
    crash = "--crash" in sys.argv[2:]
    event_keys = ["pause_us", "pause_over_p99", "restart_ms" if crash else "upgrade_ms"]
    out = subprocess.run([sys.argv[1], "--upgrades", "2", "--settle-ms", "200"] + sys.argv[2:],
                         capture_output=True, text=True, timeout=100)
    sys.stderr.write(out.stderr[-4000:])
    print(out.stdout)
    if out.returncode != 0:
        sys.exit("bench exited %d" % out.returncode)
    lines = out.stdout.splitlines()
    if len(lines) != 1:
        sys.exit("expected one JSON line, got %d" % len(lines))
    result = json.loads(lines[0])
    missing = [k for k in KEYS if k not in result]
    events = result.get("per_crash" if crash else "per_upgrade", [])
    if missing or len(events) != 2:
        sys.exit("bad result: missing %s, %d events" % (missing, len(events)))
    for row in events:
        if [k for k in event_keys if k not in row] or row["pause_us"] <= 0:
            sys.exit("bad event row %s" % row)
    if result["p99_us"] <= 0 or result["requests"] == 0:
        sys.exit("no round trips measured")


if __name__ == "__main__":
    main()
