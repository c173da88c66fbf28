#!/usr/bin/python3
"""Markdown report of one hz-experiment output directory.

Usage: report.py DIR TEMPLATE OUT

Copies TEMPLATE to OUT with each placeholder replaced by what DIR's files say:
  {{meta}}               trace, hosts, GPUs, jobs, seeds, cohort descriptions
  {{summary_table}}      every measure, standard vs cooperative, mean [95% CI], ratio
  {{ablation_table}}     each ablation's change relative to standard
  {{granularity_table}}  mean JCT and lost GPU-hours per information level
  {{calibration_table}}  meta.json's calibration and assumptions
  {{replacements_table}} the negotiation engine's offers and reservations per cohort
  {{plots}}              links to plot.py's images, relative to OUT's directory
  {{verdict}}            one sentence per headline measure, from the numbers
  {{validation}}         the emulator against a real run (DIR/validation/validation.json)
A cohort that did not run gives a "not run" line. A placeholder this script
does not know is an error, so that no `{{` reaches the report.
"""

import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import results as R  # noqa: E402

USAGE = "usage: report.py DIR TEMPLATE OUT"
NOT_RUN = "not run"
PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")

# What each plot shows, in the order the report lists them.
PLOT_CAPTIONS = (
    ("jct_cdf", "CDF of job completion time, standard and cooperative"),
    ("lost_gpu_hours", "Lost GPU-hours per cohort, 95% CI"),
    ("ablations", "Ablations: change of mean JCT and lost GPU-hours relative to standard"),
    ("granularity", "Mean JCT and lost GPU-hours against information level"),
)


def decimals(v):
    """Decimals that show a value to about three significant digits (at least units)."""
    a = abs(v)
    if a >= 100:
        return 0
    if a >= 1 or a == 0:
        return 2
    return 2 - math.floor(math.log10(a))


def number(v, places=None):
    if v is None or math.isnan(v):
        return "—"
    return f"{v:,.{decimals(v) if places is None else places}f}"


def percent(v, _places=None):
    return "—" if v is None or math.isnan(v) else f"{v:+.1f} %"


def with_ci(stat, fmt=number):
    """Mean [low, high], all three at the precision the mean needs."""
    if stat is None:
        return NOT_RUN
    places = None if math.isnan(stat.mean) else decimals(stat.mean)
    if not stat.has_ci:
        return f"{fmt(stat.mean, places)} (n={stat.n}, no CI)"
    return f"{fmt(stat.mean, places)} [{fmt(stat.low, places)}, {fmt(stat.high, places)}]"


def cell(text):
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(header, rows):
    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def n_seeds(res, cohorts):
    ns = [s.n for c in cohorts for s in res.summary.get(c, {}).values()]
    return max(ns) if ns else 0


def not_run_line(what, cohorts):
    return f"_{what}: {NOT_RUN} (no {', '.join(f'`{c}`' for c in cohorts)} cohort in this run)._"


# --- placeholders ------------------------------------------------------------

def workload(m):
    """How the jobs were drawn from the trace, when the emulator says."""
    if not m.get("offered_load"):
        return ", replayed as traced"
    text = (f", drawn from the trace's job mix with Poisson arrivals over {m.get('window_days', '?')}"
            f" days at an offered load of {m['offered_load']}")
    if m.get("max_job_days"):
        text += f", jobs cut to {m['max_job_days']} days"
    return text


def meta(res, _):
    m = res.meta
    lines = [
        f"- Trace: `{m.get('trace', 'unknown')}`",
        f"- Cluster: {m.get('hosts', '?')} hosts, {m.get('gpus', '?')} GPUs",
        f"- Jobs: {m.get('jobs', '?')} per seed" + workload(m),
        f"- Seeds: {m.get('seeds', '?')} per cohort (95% confidence intervals are Student t over seeds)",
        "- Cohorts:",
    ]
    described = m.get("cohorts", {})
    for c in [c for c in R.COHORT_ORDER if c in described] + sorted(
            c for c in described if c not in R.COHORT_ORDER):
        ran = "" if res.has(c) else f" ({NOT_RUN})"
        lines.append(f"  - `{c}`: {described[c]}{ran}")
    return "\n".join(lines)


def ratio(a, b):
    if a is None or b is None or b.mean == 0 or math.isnan(b.mean):
        return "—"
    return f"{a.mean / b.mean:.3f}"


def summary_table(res, _):
    pair = (R.BASELINE, R.COOPERATIVE)
    if not res.present(pair):
        return not_run_line("Summary", pair)
    rows = []
    for m in R.MEASURES:
        std, coop = res.stat(R.BASELINE, m.key), res.stat(R.COOPERATIVE, m.key)
        if std is None and coop is None:
            continue
        rows.append([m.title, with_ci(std), with_ci(coop), ratio(coop, std)])
    header = ["Measure (unit)", f"{R.BASELINE} mean [95% CI]",
              f"{R.COOPERATIVE} mean [95% CI]", f"{R.COOPERATIVE} / {R.BASELINE}"]
    higher = [m.label for m in R.MEASURES if not m.lower_is_better]
    n = n_seeds(res, pair)
    note = (f"Mean over {n} seed{'' if n == 1 else 's'} with its 95% confidence interval. "
            f"Lower is better except for {', '.join(higher)}.")
    return table(header, rows) + "\n\n" + note


def ablation_table(res, _):
    ablations = res.present(R.ABLATIONS)
    if not ablations:
        return not_run_line("Ablations", R.ABLATIONS)
    if not res.has(R.BASELINE):
        return not_run_line("Ablations (nothing to compare with)", (R.BASELINE,))
    rows = []
    for c in ablations + ([R.COOPERATIVE] if res.has(R.COOPERATIVE) else []):
        row = [f"`{c}`", res.description(c) or "—"]
        for key in R.COMPARED:
            change = res.relative_change(c, key)
            # None here means standard's mean is zero: no relative change exists.
            row += [with_ci(res.stat(c, key)),
                    with_ci(change, percent) if change else "— (standard is 0)"]
        rows.append(row)
    header = ["Cohort", "What it adds to standard"]
    for key in R.COMPARED:
        m = R.MEASURE[key]
        header += [f"{m.title} [95% CI]", f"{m.label}: change vs standard [95% CI]"]
    missing = [c for c in R.ABLATIONS if c not in ablations]
    note = ("Change relative to standard: the difference of the means over the standard's "
            "mean; its interval comes from the per-seed differences. "
            "Negative is better.")
    if missing:
        note += f" {NOT_RUN.capitalize()}: " + ", ".join(f"`{c}`" for c in missing) + "."
    return table(header, rows) + "\n\n" + note


def granularity_table(res, _):
    if not res.present(R.GRANULARITY):
        return not_run_line("Information granularity", R.GRANULARITY)
    rows = []
    for dim in R.GRANULARITY_DIMENSIONS:
        for level in R.GRANULARITY_LEVELS:
            c = R.granularity_cohort(dim, level)
            rows.append([dim, level, f"`{c}`"] + [with_ci(res.stat(c, k)) for k in R.COMPARED])
    header = ["Varied", "Level", "Cohort"] + [f"{R.MEASURE[k].title} [95% CI]" for k in R.COMPARED]
    note = ("Each cohort is cooperative with one kind of information given at the level "
            "shown and the other kept coarse (`cooperative` itself uses coarse events and "
            "coarse topology).")
    return table(header, rows) + "\n\n" + note


def replacements_table(res, _):
    keys = [m.key for m in R.REPLACEMENTS]
    cohorts = [c for c in res.cohorts() if any(res.stat(c, k) for k in keys)]
    if not cohorts:
        return "_Replacements: not in this run's output._"
    rows = []
    for c in cohorts:
        stats = [res.stat(c, k) for k in keys]
        if all(s is None or s.mean == 0 for s in stats):
            continue  # no reservations, or no notice found a job running
        rows.append([f"`{c}`"] + [with_ci(s) for s in stats])
    if not rows:
        return "_Replacements: none sought in this run._"
    header = ["Cohort"] + [f"{m.label} [95% CI]" for m in R.REPLACEMENTS]
    note = ("Per run, mean over seeds. Cohorts without reservations, or whose runs met no "
            "notice with a job running, are left out.")
    return table(header, rows) + "\n\n" + note


def calibration_table(res, _):
    rows = []
    for kind in ("calibration", "assumptions"):
        for key, entry in sorted(res.meta.get(kind, {}).items()):
            value = entry.get("value")
            source = entry.get("source", "")
            if kind == "calibration":
                how = "calibrated"
            else:
                how = "assumed" if source.startswith("assumption") else "published"
            rows.append([f"`{key}`", f"{value:.6g}" if isinstance(value, (int, float)) else value,
                         entry.get("unit", ""), source, how])
    if not rows:
        return "_meta.json lists no calibration or assumptions._"
    return table(["Key", "Value", "Unit", "Source", "Kind"], rows)


def plots(res, out):
    lines = []
    for name, caption in PLOT_CAPTIONS:
        path = os.path.join(res.directory, R.PLOTS[name])
        if os.path.exists(path):
            rel = os.path.relpath(path, os.path.dirname(os.path.abspath(out)))
            lines.append(f"![{caption}]({rel.replace(os.sep, '/')})")
        else:
            lines.append(f"_{caption}: {NOT_RUN} (no {R.PLOTS[name]} in the results)._")
    return "\n\n".join(lines)


def judge(res, measure):
    """One sentence: is cooperative better than standard in `measure`, and is it significant?

    Every cohort of a seed runs the same jobs and meets the same failures, so
    the test is paired: the 95% interval of the per-seed differences. Whether
    the two means' own intervals overlap (a cruder test) is said as well.
    """
    m = R.MEASURE[measure]
    std, coop = res.stat(R.BASELINE, measure), res.stat(R.COOPERATIVE, measure)
    if std is None or coop is None:
        missing = R.BASELINE if std is None else R.COOPERATIVE
        return f"- **{m.label}**: {NOT_RUN} (no `{missing}` cohort)."
    figures = (f"{R.COOPERATIVE} {with_ci(coop)} {m.unit} vs {R.BASELINE} "
               f"{with_ci(std)} {m.unit}")
    if coop.mean == std.mean:
        return f"- **{m.label}**: cooperative is the same as standard ({figures})."
    better = (coop.mean < std.mean) == m.lower_is_better
    change = res.relative_change(R.COOPERATIVE, measure)
    if change is not None:
        figures += f", {with_ci(change, percent)}"
    if change is None or not change.has_ci or not (std.has_ci and coop.has_ci):
        sig = "with fewer than two seeds there is no confidence interval, so significance is unknown"
    else:
        paired = change.high < 0 or change.low > 0
        apart = coop.high < std.low or std.high < coop.low
        sig = ("paired by seed, the difference is significant" if paired else
               "paired by seed, the difference is not significant")
        sig += ("; the two means' intervals do not overlap" if apart else
                "; the two means' intervals overlap")
    word = "better" if better else "worse"
    return f"- **{m.label}**: cooperative is {word} than standard ({figures}); {sig}."


def verdict(res, _):
    return "\n".join(judge(res, k) for k in R.HEADLINE)


def validation_rows(v):
    rows = []
    for r in v["jobs"]:
        rows.append([f"`{r['cohort']}`", r["job"], number(r["measured_jct_s"]),
                     number(r["predicted_jct_s"]), f"{100 * r['jct_error']:.1f} %",
                     number(r["measured_lost_s"]), number(r["predicted_lost_s"]),
                     f"{r['measured_interruptions']} / {r['predicted_interruptions']}"])
    for c, t in v["totals"].items():
        rows.append([f"`{c}`", "mean JCT, total lost", number(t["measured_jct_s"]),
                     number(t["predicted_jct_s"]),
                     f"{100 * abs(t['predicted_jct_s'] / t['measured_jct_s'] - 1):.1f} %",
                     number(t["measured_lost_s"]), number(t["predicted_lost_s"]), ""])
    rows.append([f"`{R.COOPERATIVE}` / `{R.BASELINE}`", "mean JCT",
                 f"{v['ratio']['measured']:.3f}", f"{v['ratio']['predicted']:.3f}",
                 f"{100 * v['errors']['ratio_rel_error']:.1f} %", "", "", ""])
    return rows


def validation(res, _):
    v = res.validation
    if v is None:
        return f"_Validation: {NOT_RUN} (no {R.VALIDATION} in the results)._"
    cfg, e, b = v["config"], v["errors"], v["bound"]
    where = ("each in its own user, mount, PID, UTS, IPC and network namespaces"
             if v.get("namespaces") else "as plain process groups (no namespaces on that machine)")
    events = ", ".join(f"{x['kind'].replace('_', ' ')} of job {x['job']} at {x['time_s']} s"
                       for x in cfg["events"])
    intro = (f"{len(cfg['jobs'])} jobs of 2 ranks, {where}, ran through harmonaized on a fixture "
             f"host ({cfg['fixture']}), once per cohort, with a {events}. Measured: completion "
             f"time and work lost (recomputed iterations). Predicted: hz-experiment --scenario "
             f"on the same jobs and events, its figures measured in the same run "
             f"(`{R.VALIDATION}`).")
    header = ["Cohort", "Job", "JCT measured (s)", "JCT predicted (s)", "JCT error",
              "Lost measured (s)", "Lost predicted (s)", "Interruptions measured / predicted"]
    word = "agrees" if v["agrees"] else "**does not agree**"
    bounds = (f"Mean absolute relative error of JCT {100 * e['jct_mean_abs_rel_error']:.1f} % "
              f"(bound {100 * b['jct_mean_abs_rel_error']:.0f} %), error of the "
              f"cooperative/standard ratio {100 * e['ratio_rel_error']:.1f} % (bound "
              f"{100 * b['ratio_rel_error']:.0f} %), lost work off by at most "
              f"{e['lost_abs_error_s']:.1f} s per cohort (bound {b['lost_abs_error_s']} s), "
              f"interruptions {'the same' if e['interruptions_match'] else 'different'}: the "
              f"emulator {word} with the measurement.")
    return intro + "\n\n" + table(header, validation_rows(v)) + "\n\n" + bounds


PLACEHOLDERS = {
    "meta": meta,
    "summary_table": summary_table,
    "ablation_table": ablation_table,
    "granularity_table": granularity_table,
    "calibration_table": calibration_table,
    "replacements_table": replacements_table,
    "plots": plots,
    "verdict": verdict,
    "validation": validation,
}


def render(res, template, out):
    unknown = sorted({name for name in PLACEHOLDER.findall(template) if name not in PLACEHOLDERS})
    if unknown:
        raise ValueError("unknown placeholders: " + ", ".join(unknown))
    return PLACEHOLDER.sub(lambda mt: PLACEHOLDERS[mt.group(1)](res, out), template)


def main(argv):
    if len(argv) != 4:
        print(USAGE, file=sys.stderr)
        return 2
    directory, template_path, out = argv[1:]
    res = R.Results(directory)
    if not res.summary:
        print(f"report.py: {directory} has no summary.csv rows", file=sys.stderr)
        return 1
    with open(template_path) as f:
        template = f.read()
    try:
        text = render(res, template, out)
    except ValueError as e:
        print(f"report.py: {template_path}: {e}", file=sys.stderr)
        return 1
    if os.path.dirname(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
