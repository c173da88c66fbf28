"""validate.py's calibration and comparison on made-up measurements.

Run: /usr/bin/python3 -m pytest -q hypervisor/experiment/validation
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import validate as V  # noqa: E402

CONFIG = {"ckpt_bytes": 10**8, "ckpt_every": {"standard": 100, "cooperative": 600},
          "bound": {"jct_mean_abs_rel_error": 0.1, "ratio_rel_error": 0.1,
                    "lost_abs_error_s": 3}}


def measured(jcts, lost_iterations, stalls, restores=(), notices=()):
    return {"jobs": [{"jct_s": j, "lost_iterations": n, "interruptions": int(n > 0)}
                     for j, n in zip(jcts, lost_iterations)],
            "iteration_s": [0.1, 0.1], "stall_s": list(stalls), "restore_s": list(restores),
            "restart_s": [2.0], "notice_delivery_s": list(notices)}


def predicted(jcts, lost_s):
    return [{"jct_s": j, "lost_s": s, "ckpt_interval_s": 10, "interruptions": int(s > 0)}
            for j, s in zip(jcts, lost_s)]


def test_calibration_from_the_run():
    real = {"standard": measured([80], [40], [0.5, 0.3], restores=[0.05]),
            "cooperative": measured([70], [0], [0.02], restores=[0.2], notices=[0.01])}
    cal = V.calibrate(CONFIG, real)
    f = {k: v["value"] for k, v in cal["figures"].items()}
    assert cal["iteration_s"] == 0.1
    assert f["ckpt_gb_per_gpu"] == 0.1
    assert abs(f["tenant_write_fsync_gbps"] - 0.1 / 0.4) < 1e-12
    assert abs(f["provider_stall_speedup"] - 20) < 1e-9
    assert abs(f["standard_ckpt_interval_s"] - 10) < 1e-9
    assert abs(f["restore_gbps"] - 2) < 1e-9 and abs(f["peer_copy_gbps"] - 0.5) < 1e-9
    assert f["restart_s"] == 2.0 and f["push_latency_s"] == 0.01
    assert all("measured in this validation run" in v["source"] for v in cal["figures"].values())


def test_figures_the_run_did_not_exercise_are_left_out():
    real = {"standard": measured([80], [0], [0.4]), "cooperative": measured([70], [0], [])}
    figures = V.calibrate(CONFIG, real)["figures"]
    for absent in ("provider_stall_speedup", "restore_gbps", "peer_copy_gbps", "push_latency_s"):
        assert absent not in figures, absent
    assert "tenant_write_fsync_gbps" in figures


def test_agreement_within_the_bound():
    real = {"standard": measured([100, 80], [40, 0], [0.4]),
            "cooperative": measured([90, 80], [0, 0], [0.02])}
    pred = {"standard": predicted([105, 80], [4.5, 0]), "cooperative": predicted([92, 81], [0, 0])}
    r = V.compare(CONFIG, real, pred, 0.1)
    assert r["agrees"]
    assert abs(r["jobs"][0]["measured_lost_s"] - 4.0) < 1e-9
    assert abs(r["errors"]["jct_mean_abs_rel_error"] - (0.05 + 0 + 2 / 90 + 1 / 80) / 4) < 1e-12
    assert abs(r["ratio"]["measured"] - 85 / 90) < 1e-12
    assert abs(r["totals"]["standard"]["predicted_lost_s"] - 4.5) < 1e-12


def test_each_bound_fails_the_run():
    real = {"standard": measured([100, 80], [40, 0], [0.4]),
            "cooperative": measured([90, 80], [0, 0], [0.02])}
    cases = {
        "jct": {"standard": predicted([130, 104], [4, 0]),
                "cooperative": predicted([117, 104], [0, 0])},
        "ratio": {"standard": predicted([100, 80], [4, 0]),
                  "cooperative": predicted([100, 90], [0, 0])},
        "lost": {"standard": predicted([100, 80], [9, 0]),
                 "cooperative": predicted([90, 80], [0, 0])},
        "interruptions": {"standard": predicted([100, 80], [4, 0]),
                          "cooperative": predicted([90, 80], [0, 0.5])},
    }
    for name, pred in cases.items():
        assert not V.compare(CONFIG, real, pred, 0.1)["agrees"], name
