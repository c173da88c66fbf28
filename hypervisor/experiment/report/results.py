"""Reading hz-experiment's output directory, shared by plot.py and report.py.

The files and their columns are the contract in the emulator's documentation:
meta.json, runs.csv (one row per cohort and seed), summary.csv (mean and 95%
confidence interval per cohort and measure) and jct.csv (evenly spaced
quantiles of seed 0's completion times), and validation/validation.json when
the validation ran (hypervisor/experiment/validation/validate.py). Everything
here is standard library only.
"""

import csv
import json
import math
import os
from dataclasses import dataclass

# Cohorts in the order tables and plots show them.
BASELINE = "standard"
COOPERATIVE = "cooperative"
ABLATIONS = (
    "only_provider_ckpt",
    "only_jit_notice",
    "only_peer_replicas",
    "only_pushed_notices",
    "only_reservations",
    "only_topology",
)
# Information granularity: cooperative with one dimension varied.
GRANULARITY_DIMENSIONS = ("events", "topology")
GRANULARITY_LEVELS = ("full", "coarse", "none")


def granularity_cohort(dimension, level):
    return f"{dimension}_{level}"


GRANULARITY = tuple(
    granularity_cohort(d, l) for d in GRANULARITY_DIMENSIONS for l in GRANULARITY_LEVELS
)
COHORT_ORDER = (BASELINE, COOPERATIVE) + ABLATIONS + GRANULARITY
# The emulator against a real run, relative to the output directory.
VALIDATION = "validation/validation.json"


@dataclass(frozen=True)
class Measure:
    key: str  # column of runs.csv, measure of summary.csv
    label: str  # what it is, for people
    unit: str  # for axis labels and table rows
    lower_is_better: bool = True

    @property
    def title(self):
        return f"{self.label} ({self.unit})"


# Every measure of summary.csv, in the order the summary table shows them.
MEASURES = (
    Measure("jct_mean_s", "Mean job completion time", "s"),
    Measure("jct_p50_s", "Median job completion time", "s"),
    Measure("jct_p99_s", "p99 job completion time", "s"),
    Measure("wait_mean_s", "Mean queueing wait", "s"),
    Measure("makespan_s", "Makespan", "s"),
    Measure("lost_gpu_h", "Lost GPU-hours", "GPU-h"),
    Measure("recovery_mean_s", "Mean recovery time", "s"),
    Measure("utilisation", "GPU utilisation", "fraction", lower_is_better=False),
    Measure("fragmentation", "Fragmentation", "fraction"),
    Measure("energy_mwh", "Energy", "MWh"),
    Measure("interruptions", "Interruptions", "count"),
)
MEASURE = {m.key: m for m in MEASURES}
# The negotiation engine's replacements at notices, per run: counts, neither
# better nor worse in themselves, so the summary table leaves them out.
REPLACEMENTS = (
    Measure("offers_made", "Offers made", "count"),
    Measure("offers_accepted", "Offers accepted", "count"),
    Measure("reservations_honoured", "Moved onto the reservation", "count"),
    Measure("reservation_fallbacks", "Queued instead", "count"),
)
# The measures the verdict speaks about.
HEADLINE = ("jct_mean_s", "jct_p99_s", "lost_gpu_h", "energy_mwh")
# The two measures the ablation and granularity views compare.
COMPARED = ("jct_mean_s", "lost_gpu_h")

# The images plot.py writes into the output directory, by name.
PLOTS = {
    "jct_cdf": "jct_cdf.png",
    "lost_gpu_hours": "lost_gpu_hours.png",
    "ablations": "ablations.png",
    "granularity": "granularity.png",
}

# Two-sided 95% quantiles of Student's t by degrees of freedom (1..30, then a
# few larger ones); between rows the quantile is interpolated in 1/df.
_T95 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
    16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
    23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045,
    30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}
_Z95 = 1.960


def t95(df):
    """Two-sided 95% quantile of Student's t with df degrees of freedom."""
    if df < 1:
        return math.nan
    if df in _T95:
        return _T95[df]
    rows = sorted(_T95)
    if df > rows[-1]:
        lo, hi, q_lo, q_hi = rows[-1], math.inf, _T95[rows[-1]], _Z95
    else:
        hi = next(r for r in rows if r > df)
        lo = max(r for r in rows if r < df)
        q_lo, q_hi = _T95[lo], _T95[hi]
    # Linear in 1/df between the two rows (1/inf = 0).
    w = (1 / lo - 1 / df) / (1 / lo - (0 if hi == math.inf else 1 / hi))
    return q_lo + w * (q_hi - q_lo)


@dataclass(frozen=True)
class Stat:
    """A mean with its 95% confidence interval over n seeds."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def has_ci(self):
        return self.n >= 2 and not (math.isnan(self.low) or math.isnan(self.high))


def mean_ci(values):
    """Mean and Student-t 95% confidence interval of a sample."""
    n = len(values)
    if n == 0:
        return Stat(math.nan, math.nan, math.nan, 0)
    mean = sum(values) / n
    if n < 2:
        return Stat(mean, math.nan, math.nan, n)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t95(n - 1) * sd / math.sqrt(n)
    return Stat(mean, mean - half, mean + half, n)


def _number(text):
    text = (text or "").strip()
    if text == "":
        return math.nan
    try:
        return float(text)
    except ValueError:
        return math.nan


def _rows(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


class Results:
    """One output directory of hz-experiment."""

    def __init__(self, directory):
        self.directory = directory
        meta_path = os.path.join(directory, "meta.json")
        self.meta = {}
        if os.path.exists(meta_path):
            with open(meta_path) as f:
                self.meta = json.load(f)
        # summary[cohort][measure] = Stat
        self.summary = {}
        for row in _rows(os.path.join(directory, "summary.csv")):
            n = _number(row.get("n"))
            self.summary.setdefault(row["cohort"], {})[row["measure"]] = Stat(
                _number(row.get("mean")),
                _number(row.get("ci95_low")),
                _number(row.get("ci95_high")),
                0 if math.isnan(n) else int(n),
            )
        # runs[cohort][seed] = {measure: value}
        self.runs = {}
        for row in _rows(os.path.join(directory, "runs.csv")):
            values = {k: _number(v) for k, v in row.items() if k not in ("cohort", "seed")}
            self.runs.setdefault(row["cohort"], {})[int(row["seed"])] = values
        # jct[cohort] = completion times (s) of the lowest seed written
        self.jct = {}
        jct_seed = {}
        for row in _rows(os.path.join(directory, "jct.csv")):
            cohort, seed = row["cohort"], int(row["seed"])
            if cohort in jct_seed and seed > jct_seed[cohort]:
                continue
            if cohort not in jct_seed or seed < jct_seed[cohort]:
                jct_seed[cohort], self.jct[cohort] = seed, []
            self.jct[cohort].append(_number(row["jct_s"]))
        self.jct_seed = jct_seed
        self.validation = None
        validation_path = os.path.join(directory, VALIDATION)
        if os.path.exists(validation_path):
            with open(validation_path) as f:
                self.validation = json.load(f)

    def has(self, cohort):
        return cohort in self.summary

    def present(self, cohorts):
        """The cohorts of `cohorts` this run has, in that order."""
        return [c for c in cohorts if self.has(c)]

    def cohorts(self):
        """Every cohort in the run: the known ones in order, then any others."""
        known = self.present(COHORT_ORDER)
        return known + sorted(c for c in self.summary if c not in COHORT_ORDER)

    def stat(self, cohort, measure):
        return self.summary.get(cohort, {}).get(measure)

    def description(self, cohort):
        return self.meta.get("cohorts", {}).get(cohort, "")

    def relative_change(self, cohort, measure, baseline=BASELINE):
        """Change of `cohort` relative to `baseline` in `measure`, in percent.

        The interval is the Student-t interval of the per-seed differences
        (cohort minus baseline, same seed), divided by the baseline's mean: the
        change of the means, mean(cohort) / mean(baseline) - 1. Seeds that give
        both cohorts the same trace and failures make it narrower; independent
        seeds leave it valid. Without runs.csv rows it falls back to the
        summary's means, with no interval.
        Returns None when the baseline's mean is zero or either is missing.
        """
        a, b = self.runs.get(cohort, {}), self.runs.get(baseline, {})
        seeds = sorted(set(a) & set(b))
        pairs = [(a[s].get(measure, math.nan), b[s].get(measure, math.nan)) for s in seeds]
        pairs = [(x, y) for x, y in pairs if not (math.isnan(x) or math.isnan(y))]
        if pairs:
            base = sum(y for _, y in pairs) / len(pairs)
            diff = mean_ci([x - y for x, y in pairs])
        else:
            sa, sb = self.stat(cohort, measure), self.stat(baseline, measure)
            if sa is None or sb is None:
                return None
            base = sb.mean
            diff = Stat(sa.mean - sb.mean, math.nan, math.nan, 1)
        if base == 0 or math.isnan(base):
            return None
        scale = 100.0 / base
        return Stat(diff.mean * scale, diff.low * scale, diff.high * scale, diff.n)
