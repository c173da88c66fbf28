#!/usr/bin/python3
"""Plots of one hz-experiment output directory.

Usage: plot.py DIR

Reads DIR's CSVs (see results.py) and writes into DIR:
  jct_cdf.png         CDF of job completion time, standard and cooperative
  lost_gpu_hours.png  lost GPU-hours per cohort, 95% confidence intervals
  ablations.png       each ablation's change of mean JCT and lost GPU-hours
                      relative to standard (only when an ablation ran)
  granularity.png     mean JCT and lost GPU-hours against information level
                      (only when a granularity cohort ran)
A plot whose cohorts did not run is skipped with a note on stdout, and a
stale image of that name from an earlier run is removed, so that the report
never shows a plot of other numbers.
"""

import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results as R  # noqa: E402

# Colours by family of cohort, so that a cohort looks the same in every plot.
FAMILY_COLOURS = {
    R.BASELINE: "tab:gray",
    R.COOPERATIVE: "tab:blue",
    "ablation": "tab:orange",
    "granularity": "tab:green",
    "other": "tab:purple",
}
DIMENSION_COLOURS = {"events": "tab:red", "topology": "tab:green"}
MEASURE_COLOURS = {"jct_mean_s": "tab:blue", "lost_gpu_h": "tab:red"}
DPI = 120
USAGE = "usage: plot.py DIR"


def family(cohort):
    if cohort in (R.BASELINE, R.COOPERATIVE):
        return cohort
    if cohort in R.ABLATIONS:
        return "ablation"
    if cohort in R.GRANULARITY:
        return "granularity"
    return "other"


def colour(cohort):
    return FAMILY_COLOURS[family(cohort)]


def error_bars(stats):
    """matplotlib's yerr (distances below and above each mean); 0 without a CI."""
    below = [s.mean - s.low if s.has_ci else 0.0 for s in stats]
    above = [s.high - s.mean if s.has_ci else 0.0 for s in stats]
    return [below, above]


def save(fig, directory, name):
    fig.tight_layout()
    # "tight" keeps legends placed outside the axes inside the image.
    fig.savefig(os.path.join(directory, R.PLOTS[name]), dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def skip(directory, name, why):
    path = os.path.join(directory, R.PLOTS[name])
    if os.path.exists(path):
        os.remove(path)
    print(f"plot.py: {R.PLOTS[name]} skipped: {why}")


def plot_jct_cdf(res, directory):
    cohorts = [c for c in (R.BASELINE, R.COOPERATIVE) if res.jct.get(c)]
    if not cohorts:
        return skip(directory, "jct_cdf", "jct.csv has neither standard nor cooperative")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for c in cohorts:
        # A log axis cannot show zero; a job that completes in no time is not a job.
        times = sorted(t for t in res.jct[c] if t > 0 and not math.isnan(t))
        n = len(times)
        ax.step(times, [(i + 1) / n for i in range(n)], where="post", color=colour(c),
                label=f"{c} ({n} quantiles)")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.0)
    ax.set_xlabel("Job completion time (s, log scale)")
    ax.set_ylabel("Fraction of jobs completed")
    seeds = sorted({res.jct_seed[c] for c in cohorts})
    ax.set_title(f"Job completion time CDF (seed {', '.join(map(str, seeds))})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    save(fig, directory, "jct_cdf")


def plot_lost_gpu_hours(res, directory):
    measure = R.MEASURE["lost_gpu_h"]
    cohorts = [c for c in res.cohorts() if res.stat(c, measure.key)]
    if not cohorts:
        return skip(directory, "lost_gpu_hours", "summary.csv has no lost_gpu_h")
    stats = [res.stat(c, measure.key) for c in cohorts]
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(cohorts) + 2), 4.5))
    x = range(len(cohorts))
    ax.bar(x, [s.mean for s in stats], yerr=error_bars(stats), capsize=4,
           color=[colour(c) for c in cohorts])
    ax.set_xticks(list(x))
    if len(cohorts) > 2:
        ax.set_xticklabels(cohorts, rotation=30, ha="right")
    else:
        ax.set_xticklabels(cohorts)
    ax.set_xlabel("Cohort")
    ax.set_ylabel(measure.title)
    n = max(s.n for s in stats)
    ax.set_title(f"{measure.label} per cohort (mean over {n} seeds, 95% CI)")
    ax.grid(True, axis="y", alpha=0.3)
    # The legend says what the colours mean: the families present.
    families = list(dict.fromkeys(family(c) for c in cohorts))
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=FAMILY_COLOURS[f]) for f in families],
              labels=families, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="Cohorts")
    save(fig, directory, "lost_gpu_hours")


def plot_ablations(res, directory):
    ablations = res.present(R.ABLATIONS)
    if not ablations:
        return skip(directory, "ablations", "no ablation cohort ran")
    if not res.has(R.BASELINE):
        return skip(directory, "ablations", "no standard cohort to compare with")
    # Cooperative, all mechanisms at once, closes the row for comparison.
    groups = ablations + ([R.COOPERATIVE] if res.has(R.COOPERATIVE) else [])
    width = 0.8 / len(R.COMPARED)
    fig, ax = plt.subplots(figsize=(max(9, 1.2 * len(groups) + 4), 4.8))
    for i, key in enumerate(R.COMPARED):
        changes = [res.relative_change(c, key) for c in groups]
        xs = [g + (i - (len(R.COMPARED) - 1) / 2) * width for g in range(len(groups))]
        known = [(x, s) for x, s in zip(xs, changes) if s is not None]
        if not known:
            continue
        ax.bar([x for x, _ in known], [s.mean for _, s in known], width,
               yerr=error_bars([s for _, s in known]), capsize=3,
               color=MEASURE_COLOURS[key], label=R.MEASURE[key].label)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([c if c != R.COOPERATIVE else "cooperative (all)" for c in groups],
                       rotation=30, ha="right")
    ax.set_xlabel("Cohort (standard plus one mechanism; cooperative: all of them)")
    ax.set_ylabel("Change relative to standard (%, negative is better)")
    ax.set_title("Ablations: change relative to standard (95% CI)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), title="Measure")
    save(fig, directory, "ablations")


def plot_granularity(res, directory):
    if not res.present(R.GRANULARITY):
        return skip(directory, "granularity", "no information-granularity cohort ran")
    fig, axes = plt.subplots(1, len(R.COMPARED), figsize=(11, 4.5))
    levels = list(R.GRANULARITY_LEVELS)
    for ax, key in zip(axes, R.COMPARED):
        measure = R.MEASURE[key]
        for k, dim in enumerate(R.GRANULARITY_DIMENSIONS):
            points = [(i, res.stat(R.granularity_cohort(dim, lvl), key))
                      for i, lvl in enumerate(levels)]
            points = [(i, s) for i, s in points if s is not None]
            if not points:
                continue
            # Side by side, so that the two dimensions' intervals do not hide each other.
            xs = [i + (k - 0.5) * 0.08 for i, _ in points]
            ax.errorbar(xs, [s.mean for _, s in points], yerr=error_bars([s for _, s in points]),
                        marker="o", capsize=4, color=DIMENSION_COLOURS[dim],
                        label=f"{dim} information varied")
        base = res.stat(R.BASELINE, key)
        if base is not None:
            ax.axhline(base.mean, color=FAMILY_COLOURS[R.BASELINE], linestyle="--",
                       label="standard (reference)")
        ax.set_xticks(range(len(levels)))
        ax.set_xticklabels(levels)
        ax.set_xlabel("Information level given to the tenant")
        ax.set_ylabel(measure.title)
        ax.set_title(f"{measure.label} (95% CI)")
        ax.grid(True, alpha=0.3)
    # One legend for both panels, below them, where it hides no interval.
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), bbox_to_anchor=(0.5, -0.06))
    fig.suptitle("Information granularity (cooperative uses coarse events and coarse topology)")
    save(fig, directory, "granularity")


def main(argv):
    if len(argv) != 2:
        print(USAGE, file=sys.stderr)
        return 2
    directory = argv[1]
    res = R.Results(directory)
    if not res.summary:
        print(f"plot.py: {directory} has no summary.csv rows", file=sys.stderr)
        return 1
    plot_jct_cdf(res, directory)
    plot_lost_gpu_hours(res, directory)
    plot_ablations(res, directory)
    plot_granularity(res, directory)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
