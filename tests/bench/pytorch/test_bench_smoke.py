# SPDX-License-Identifier: Apache-2.0
"""pytorch_ddp_bench --smoke: every measurement of the benchmark runs on the
built backend and reports a ratio against its reference from the same run.

Only the output's shape is asserted (every record present, positive times,
the ratio being the quotient of the two times it reports): a shared machine
makes any threshold on a time or a ratio flaky, and the full run reports the
numbers that matter.
"""

from __future__ import annotations

import json
import os
import subprocess

BENCH = os.environ["HZ_PYTORCH_DDP_BENCH"]


def records():
    out = subprocess.run([BENCH, "--smoke"], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert lines, out.stdout + out.stderr
    return lines


def ratio_of(record, ratio: str, num: str, den: str) -> None:
    assert record[num] > 0 and record[den] > 0, record
    # Each side is rounded to 3 decimals before the ratio is printed with 2 or 3.
    assert abs(record[ratio] - record[num] / record[den]) <= 0.01 * record[ratio] + 0.01, record


def test_every_measurement_reports_its_ratio() -> None:
    got = records()
    by_bench = {}
    for r in got:
        assert r["ranks"] == 2, r
        by_bench.setdefault(r["bench"], []).append(r)
    assert sorted(by_bench) == ["allreduce", "ddp_step", "overhead"], got
    (ar,) = by_bench["allreduce"]
    ratio_of(ar, "gloo_over_harmonaize", "gloo_ms", "harmonaize_ms")
    (step,) = by_bench["ddp_step"]
    ratio_of(step, "gloo_over_harmonaize", "gloo_ms", "harmonaize_ms")
    assert len(by_bench["overhead"]) == 2, got  # 4 KiB and the bucket
    for o in by_bench["overhead"]:
        ratio_of(o, "backend_over_raw", "backend_us", "raw_hz_allreduce_us")
