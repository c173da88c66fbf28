"""plot.py and report.py on small synthetic hz-experiment output directories.

Run: /usr/bin/python3 -m pytest -q hypervisor/experiment/report
"""

import csv
import json
import math
import os
import random
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(HERE, "plot.py")
REPORT = os.path.join(HERE, "report.py")
TEMPLATE = os.path.join(HERE, "cooperation.md.in")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
IMAGES = ("jct_cdf.png", "lost_gpu_hours.png", "ablations.png", "granularity.png")
RUN_COLUMNS = ("jobs jct_mean_s jct_p50_s jct_p99_s wait_mean_s makespan_s lost_gpu_h "
               "recovery_mean_s utilisation fragmentation energy_mwh interruptions offers_made "
               "offers_accepted reservations_honoured reservation_fallbacks").split()
T95_DF2 = 4.303  # Student t, two-sided 95%, three seeds

# Per-seed values for standard and cooperative, chosen so that the verdict has
# one of each case:
#   jct_mean_s  cooperative clearly better (intervals far apart)
#   lost_gpu_h  cooperative better on average, intervals overlap, and the
#               per-seed differences change sign: not significant
#   energy_mwh  cooperative clearly worse
#   jct_p99_s   cooperative better by the same amount on every seed: the
#               means' intervals overlap, the paired difference is significant
FIXED = {
    "standard": {"jct_mean_s": [1000, 1010, 990], "lost_gpu_h": [10, 14, 18],
                 "energy_mwh": [5.0, 5.1, 4.9], "jct_p99_s": [9000, 9100, 8900]},
    "cooperative": {"jct_mean_s": [700, 705, 695], "lost_gpu_h": [12, 11, 17],
                    "energy_mwh": [6.0, 6.1, 5.9], "jct_p99_s": [8990, 9090, 8890]},
}
ABLATIONS = ("only_provider_ckpt", "only_topology")
GRANULARITY = ("events_full", "events_coarse", "events_none",
               "topology_full", "topology_coarse", "topology_none")


def seed_values(cohort, seed, rng, fixed):
    """One runs.csv row's numbers for a cohort and seed."""
    v = {c: rng.uniform(1, 100) for c in RUN_COLUMNS}
    v["jobs"] = 50
    v["utilisation"] = rng.uniform(0.5, 0.9)
    v["fragmentation"] = rng.uniform(0.0, 0.2)
    v["jct_mean_s"] = rng.uniform(700, 1000)
    v["lost_gpu_h"] = rng.uniform(8, 16)
    for measure, values in fixed.get(cohort, {}).items():
        v[measure] = values[seed]
    return v


def summarise(values):
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, "", "", n
    sd = math.sqrt(sum((x - mean) ** 2 for x in values) / (n - 1))
    half = T95_DF2 * sd / math.sqrt(n)
    return mean, mean - half, mean + half, n


def write_results(directory, cohorts, seeds=3, fixed=FIXED):
    """A directory as hz-experiment --out writes it."""
    os.makedirs(directory, exist_ok=True)
    rng = random.Random(7)
    runs = {c: [seed_values(c, s, rng, fixed) for s in range(seeds)] for c in cohorts}
    meta = {
        "trace": "synthetic", "hosts": 4, "gpus": 32, "jobs": 50, "seeds": seeds,
        "cohorts": {c: f"description of {c}" for c in cohorts},
        "calibration": {"ckpt_write_gbps": {"value": 2.5, "unit": "GB/s",
                                            "source": "bench | checkpoint"}},
        "assumptions": {"gpu_failure_rate": {"value": 1e-5, "unit": "1/GPU-h",
                                             "source": "literature"},
                        "restart_s": {"value": 120, "unit": "s",
                                      "source": "assumption: a guess"}},
    }
    with open(os.path.join(directory, "meta.json"), "w") as f:
        json.dump(meta, f)
    with open(os.path.join(directory, "runs.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["cohort", "seed"] + RUN_COLUMNS)
        for c in cohorts:
            for s, v in enumerate(runs[c]):
                w.writerow([c, s] + [v[k] for k in RUN_COLUMNS])
    with open(os.path.join(directory, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["cohort", "measure", "mean", "ci95_low", "ci95_high", "n"])
        for c in cohorts:
            for k in RUN_COLUMNS[1:]:
                w.writerow([c, k, *summarise([v[k] for v in runs[c]])])
    with open(os.path.join(directory, "jct.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["cohort", "seed", "jct_s"])
        for c in cohorts:
            for _ in range(50):
                w.writerow([c, 0, rng.lognormvariate(6, 1.2)])


def run(script, *args):
    return subprocess.run([sys.executable, script, *map(str, args)], capture_output=True,
                          text=True, check=False)


def render(results, out, template=TEMPLATE):
    r = run(REPORT, results, template, out)
    assert r.returncode == 0, r.stderr
    with open(out) as f:
        return f.read()


def verdict_line(text, label):
    lines = [line for line in text.splitlines() if line.startswith(f"- **{label}**")]
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture()
def full(tmp_path):
    d = tmp_path / "results"
    write_results(d, ("standard", "cooperative") + ABLATIONS + GRANULARITY)
    return d


@pytest.fixture()
def smoke(tmp_path):
    d = tmp_path / "results"
    write_results(d, ("standard", "cooperative"))
    return d


def test_plot_writes_every_image(full):
    r = run(PLOT, full)
    assert r.returncode == 0, r.stderr
    for name in IMAGES:
        path = full / name
        assert path.exists(), name
        with open(path, "rb") as f:
            head = f.read(len(PNG_SIGNATURE))
        assert head == PNG_SIGNATURE, name
        assert path.stat().st_size > 1000, name


def test_report_fills_every_placeholder(full, tmp_path):
    assert run(PLOT, full).returncode == 0
    out = tmp_path / "docs" / "experiments" / "cooperation.md"
    text = render(full, out)
    assert "{{" not in text and "}}" not in text
    for section in ("Question", "Setup", "Results", "Ablations", "Information granularity",
                    "Where cooperation does not help", "Reproduce", "Limits"):
        assert re.search(rf"^## {section}$", text, re.M), section
    assert "scripts/experiment.sh --smoke" in text
    # The images, relative to the report's folder.
    for name in IMAGES:
        assert f"](../../results/{name})" in text, name
    # Meta, calibration, and each cohort that ran.
    assert "32 GPUs" in text and "`synthetic`" in text
    assert "`ckpt_write_gbps`" in text and "bench \\| checkpoint" in text
    assert "`gpu_failure_rate`" in text and "1/GPU-h" in text
    # A figure's kind: measured here, published, or a stated assumption.
    assert re.search(r"^\| `ckpt_write_gbps` .*\| calibrated \|$", text, re.M)
    assert re.search(r"^\| `gpu_failure_rate` .*\| published \|$", text, re.M)
    assert re.search(r"^\| `restart_s` .*\| assumed \|$", text, re.M)
    for cohort in ABLATIONS + GRANULARITY:
        assert f"`{cohort}`" in text, cohort
    assert "_Ablations: not run" not in text
    assert "_Information granularity: not run" not in text
    # The summary's units and ratio.
    assert "| Mean job completion time (s) |" in text
    assert "| Lost GPU-hours (GPU-h) |" in text
    assert "| 0.700 |" in text  # 700 / 1000


def test_verdict_follows_the_numbers(full, tmp_path):
    text = render(full, tmp_path / "report.md")
    better = verdict_line(text, "Mean job completion time")
    assert "cooperative is better than standard" in better
    assert "the difference is significant" in better and "do not overlap" in better
    overlap = verdict_line(text, "Lost GPU-hours")
    assert "cooperative is better than standard" in overlap
    assert "the difference is not significant" in overlap and "intervals overlap" in overlap
    worse = verdict_line(text, "Energy")
    assert "cooperative is worse than standard" in worse
    assert "better" not in worse
    # The same 10 s less on every seed: significant, paired, although the
    # means' intervals overlap.
    p99 = verdict_line(text, "p99 job completion time")
    assert "cooperative is better than standard" in p99
    assert "the difference is significant" in p99 and "intervals overlap" in p99


def test_verdict_flips_with_the_numbers(tmp_path):
    # The same words come from the numbers, not from the cohort names: swap
    # the two cohorts' values and the clear win becomes a clear loss.
    d = tmp_path / "results"
    swapped = {"standard": FIXED["cooperative"], "cooperative": FIXED["standard"]}
    write_results(d, ("standard", "cooperative"), fixed=swapped)
    text = render(d, tmp_path / "report.md")
    assert "cooperative is worse than standard" in verdict_line(text, "Mean job completion time")
    assert "cooperative is better than standard" in verdict_line(text, "Energy")
    lost = verdict_line(text, "Lost GPU-hours")
    assert "worse" in lost and "overlap" in lost


def test_standard_and_cooperative_only(smoke, tmp_path):
    # An image of an earlier, fuller run must not survive into this report.
    (smoke / "ablations.png").write_bytes(PNG_SIGNATURE)
    r = run(PLOT, smoke)
    assert r.returncode == 0, r.stderr
    assert (smoke / "jct_cdf.png").exists() and (smoke / "lost_gpu_hours.png").exists()
    assert not (smoke / "ablations.png").exists()
    assert not (smoke / "granularity.png").exists()
    assert "ablations.png skipped" in r.stdout and "granularity.png skipped" in r.stdout
    text = render(smoke, tmp_path / "report.md")
    assert "{{" not in text
    ablations = text.split("## Ablations")[1].split("## Information granularity")[0]
    granularity = text.split("## Information granularity")[1].split("## Where")[0]
    assert "_Ablations: not run" in ablations
    assert "_Information granularity: not run" in granularity
    assert "not run (no ablations.png" in text and "not run (no granularity.png" in text
    assert "cooperative is better than standard" in verdict_line(text, "Mean job completion time")


def test_one_seed_has_no_significance(tmp_path):
    d = tmp_path / "results"
    write_results(d, ("standard", "cooperative"), seeds=1)
    text = render(d, tmp_path / "report.md")
    line = verdict_line(text, "Mean job completion time")
    assert "cooperative is better than standard" in line
    assert "significance is unknown" in line and "do not overlap" not in line
    assert "(n=1, no CI)" in text


def test_missing_cooperative_says_not_run(tmp_path):
    d = tmp_path / "results"
    write_results(d, ("standard",))
    assert run(PLOT, d).returncode == 0
    text = render(d, tmp_path / "report.md")
    assert "{{" not in text
    assert verdict_line(text, "Energy") == "- **Energy**: not run (no `cooperative` cohort)."
    assert "_Summary: not run" not in text  # standard alone still has a table
    assert "| not run |" in text


def test_replacements_list_the_cohorts_that_negotiated(tmp_path):
    # Standard has no reservations: its counts are zero and it is left out.
    counts = ("offers_made", "offers_accepted", "reservations_honoured", "reservation_fallbacks")
    fixed = dict(FIXED, standard=dict(FIXED["standard"], **{k: [0, 0, 0] for k in counts}))
    d = tmp_path / "results"
    write_results(d, ("standard", "cooperative"), fixed=fixed)
    text = render(d, tmp_path / "report.md")
    section = text.split("## Replacements negotiated")[1].split("## Where")[0]
    assert "| Cohort | Offers made [95% CI] | Offers accepted [95% CI] |" in section
    assert "| `cooperative` |" in section and "| `standard` |" not in section


def test_unknown_placeholder_is_an_error(full, tmp_path):
    template = tmp_path / "t.md.in"
    template.write_text("{{meta}}\n{{no_such_thing}}\n")
    r = run(REPORT, full, template, tmp_path / "out.md")
    assert r.returncode != 0
    assert "no_such_thing" in r.stderr
    assert not (tmp_path / "out.md").exists()


def write_validation(directory, jct_error):
    """validation/validation.json as validate.py writes it: two jobs per cohort."""
    rows = []
    for cohort, jct in (("standard", 80.0), ("cooperative", 72.0)):
        for job in range(2):
            rows.append({"cohort": cohort, "job": job, "measured_jct_s": jct,
                         "predicted_jct_s": jct * (1 + jct_error), "jct_error": jct_error,
                         "measured_lost_s": 4.0 * job, "predicted_lost_s": 4.5 * job,
                         "measured_interruptions": job, "predicted_interruptions": job})
    totals = {c: {"measured_jct_s": j, "predicted_jct_s": j * (1 + jct_error),
                  "measured_lost_s": 4.0, "predicted_lost_s": 4.5}
              for c, j in (("standard", 80.0), ("cooperative", 72.0))}
    v = {"jobs": rows, "totals": totals, "ratio": {"measured": 0.9, "predicted": 0.9},
         "errors": {"jct_mean_abs_rel_error": jct_error, "ratio_rel_error": 0.0,
                    "lost_abs_error_s": 0.5, "interruptions_match": True},
         "bound": {"jct_mean_abs_rel_error": 0.1, "ratio_rel_error": 0.1,
                   "lost_abs_error_s": 3},
         "agrees": jct_error <= 0.1, "namespaces": True,
         "config": {"fixture": "hgx8", "jobs": [{}, {}],
                    "events": [{"time_s": 15, "kind": "gpu_failure", "job": 1}]}}
    os.makedirs(directory / "validation", exist_ok=True)
    with open(directory / "validation" / "validation.json", "w") as f:
        json.dump(v, f)


def validation_section(text):
    return text.split("## Validation")[1].split("## Where")[0]


def test_validation_measured_against_predicted(smoke, tmp_path):
    write_validation(smoke, 0.05)
    section = validation_section(render(smoke, tmp_path / "report.md"))
    assert "| `standard` | 0 | 80.00 | 84.00 | 5.0 % |" in section
    assert "| `cooperative` / `standard` | mean JCT | 0.900 | 0.900 | 0.0 % |" in section
    assert "gpu failure of job 1 at 15 s" in section and "own user, mount, PID" in section
    assert "JCT 5.0 % (bound 10 %)" in section and "emulator agrees" in section


def test_validation_that_disagrees_says_so(smoke, tmp_path):
    write_validation(smoke, 0.25)
    section = validation_section(render(smoke, tmp_path / "report.md"))
    assert "**does not agree**" in section


def test_without_validation_says_not_run(smoke, tmp_path):
    section = validation_section(render(smoke, tmp_path / "report.md"))
    assert "_Validation: not run (no validation/validation.json in the results)._" in section
