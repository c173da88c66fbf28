"""allreduce_goals.py's verdicts on made-up runs: which cells each goal
covers, a figure counted as met only against its bound, a missing figure or
run shown as "-" and not met, and the idle and vdev rows."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import allreduce_goals as goals  # noqa: E402

KIB, MIB = 1 << 10, 1 << 20


def line(ranks, b, **figures):
    row = {"bench": "service_allreduce", "ranks": ranks, "bytes": b, "time_us": 10.0,
           "service_cpu_s_per_iteration": 2e-5, "tenant_cpu_s_per_iteration": 3e-5}
    row.update(figures)
    return row


def write_runs(root, runs):
    for k, files in enumerate(runs, 1):
        folder = os.path.join(root, "run-%d" % k)
        os.makedirs(folder)
        for name, rows in files.items():
            with open(os.path.join(folder, name), "w") as f:
                f.write("a line that is not JSON\n")
                for r in rows:
                    f.write(json.dumps(r) + "\n")


def two_runs():
    first = {
        "small.jsonl": [line(2, 4 * KIB, ratio_to_mpi=0.12), line(4, 4 * KIB, ratio_to_mpi=1.3),
                        line(2, 64 * KIB, ratio_to_mpi=1.0)],
        "bulk.jsonl": [line(2, MIB, ratio_to_mpi=1.6, ratio_to_gloo=7.0,
                            ratio_to_memory_bound=0.7),
                       line(2, 16 * MIB, ratio_to_mpi=3.3, ratio_to_gloo=14.0,
                            ratio_to_memory_bound=0.95),
                       line(2, 64 * MIB, ratio_to_mpi=None, ratio_to_gloo=None,
                            ratio_to_memory_bound=1.1),
                       {"bench": "service_idle", "service_cpu_share": 0.0006}],
        "vdev.jsonl": [{"ratio": goals.BUSY_POLL_GOAL, "value": 0.61}],
    }
    second = {
        # 4 ranks at 4 KiB misses here; 64 KiB at 2 ranks failed.
        "small.jsonl": [line(2, 4 * KIB, ratio_to_mpi=0.14), line(4, 4 * KIB, ratio_to_mpi=0.6),
                        line(2, 64 * KIB, error="rank 1 exited")],
        "bulk.jsonl": [line(2, MIB, ratio_to_mpi=1.49, ratio_to_gloo=6.0,
                            ratio_to_memory_bound=0.7),
                       line(2, 16 * MIB, ratio_to_mpi=3.5, ratio_to_gloo=14.5,
                            ratio_to_memory_bound=0.89),
                       line(2, 64 * MIB, ratio_to_memory_bound=1.0),
                       {"bench": "service_idle", "service_cpu_share": 0.02}],
        # vdev_bench did not run.
    }
    return [first, second]


class ReportRows(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        write_runs(self.tmp.name, two_runs())
        self.rows = goals.report_rows(goals.load_runs(self.tmp.name))

    def tearDown(self):
        self.tmp.cleanup()

    def row(self, goal, cell):
        found = [r for r in self.rows if r["goal"] == goal and r["cell"] == cell]
        self.assertEqual(len(found), 1, (goal, cell, self.rows))
        return found[0]

    def test_each_goal_covers_its_sizes(self):
        cells = lambda g: sorted(r["cell"] for r in self.rows if r["goal"] == g)
        self.assertEqual(cells("small"), ["2 ranks, 4 KiB", "2 ranks, 64 KiB", "4 ranks, 4 KiB"])
        # 64 MiB has no Open MPI or Gloo figure in any run: no row.
        self.assertEqual(cells("large_mpi"), ["2 ranks, 1 MiB", "2 ranks, 16 MiB"])
        self.assertEqual(cells("large_gloo"), ["2 ranks, 1 MiB", "2 ranks, 16 MiB"])
        self.assertEqual(cells("memory_bound"), ["2 ranks, 16 MiB", "2 ranks, 64 MiB"])

    def test_met_only_at_the_bound(self):
        self.assertEqual(self.row("small", "2 ranks, 4 KiB")["met_runs"], 0)
        self.assertEqual(self.row("small", "4 ranks, 4 KiB")["met_runs"], 1)
        r = self.row("large_mpi", "2 ranks, 1 MiB")
        self.assertEqual((r["values"], r["met_runs"], r["runs"]), ([1.6, 1.49], 1, 2))
        # 6.0 is the bound itself: met.
        self.assertEqual(self.row("large_gloo", "2 ranks, 1 MiB")["met_runs"], 2)
        self.assertEqual(self.row("memory_bound", "2 ranks, 16 MiB")["met_runs"], 1)
        self.assertEqual(self.row("memory_bound", "2 ranks, 64 MiB")["met_runs"], 2)

    def test_a_missing_figure_is_not_met(self):
        r = self.row("small", "2 ranks, 64 KiB")
        self.assertEqual((r["values"], r["met_runs"]), ([1.0, None], 1))
        self.assertEqual(r["time_us"], [10.0, None])
        v = self.row("vdev_busy_poll", "batch 32")
        self.assertEqual((v["values"], v["met_runs"], v["runs"]), ([0.61, None], 1, 2))

    def test_idle_is_judged_at_most(self):
        r = self.row("idle", "8 tenants, 10 s")
        self.assertEqual((r["values"], r["met_runs"]), ([0.0006, 0.02], 1))

    def test_markdown_has_a_row_each(self):
        table = goals.markdown(self.rows).splitlines()
        self.assertEqual(len(table), 2 + len(self.rows))
        small = [t for t in table if "| small | 2 ranks, 64 KiB |" in t]
        self.assertEqual(len(small), 1)
        self.assertIn("| 1.00 / - | 1 of 2 | 10.0 | 20 / 30 |", small[0])


class CommandLine(unittest.TestCase):
    def test_report_prints_the_table_and_json(self):
        with tempfile.TemporaryDirectory() as tmp:
            write_runs(tmp, two_runs())
            out = subprocess.run([sys.executable, os.path.join(HERE, "allreduce_goals.py"),
                                  "report", tmp], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertTrue(lines[0].startswith("| goal |"))
        rows = [json.loads(l) for l in lines if l.startswith("{")]
        self.assertEqual(len(rows), len(lines) - 2 - len(rows))
        self.assertIn("vdev_busy_poll", {r["goal"] for r in rows})

    def test_report_of_no_runs_fails(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run([sys.executable, os.path.join(HERE, "allreduce_goals.py"),
                                  "report", tmp], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("no run-K folders", out.stderr)


if __name__ == "__main__":
    unittest.main()
