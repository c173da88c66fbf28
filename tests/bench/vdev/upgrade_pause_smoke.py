"""Runs upgrade_pause_bench with two upgrades; checks only that it printed one
well-formed JSON object with every figure, for the run and for each upgrade."""
import json
import subprocess
import sys

KEYS = ["pause_us", "p99_us", "pause_over_p99", "requests"]
UPGRADE_KEYS = ["pause_us", "pause_over_p99", "upgrade_ms"]


def main():
    out = subprocess.run([sys.argv[1], "--upgrades", "2", "--settle-ms", "200"],
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
    upgrades = result.get("per_upgrade", [])
    if missing or len(upgrades) != 2:
        sys.exit("bad result: missing %s, %d upgrades" % (missing, len(upgrades)))
    for row in upgrades:
        if [k for k in UPGRADE_KEYS if k not in row] or row["pause_us"] <= 0:
            sys.exit("bad upgrade row %s" % row)
    if result["p99_us"] <= 0 or result["requests"] == 0:
        sys.exit("no round trips measured")


if __name__ == "__main__":
    main()
