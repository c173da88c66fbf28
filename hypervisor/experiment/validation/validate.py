#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The emulator against a real run of the same small configuration.

Runs each cohort (standard, cooperative) for real: harmonaized on a fixture
host (tests/unit/scheduler/fixtures), one tenant per job, each job a
hz-validation-job process (tests/integration/experiment) in its own
namespaces (user, mount, PID, UTS, IPC and network, with util-linux's
unshare) whose two ranks all-reduce through harmonaized over virtio-user. The configuration's failures and maintenance
strike the jobs at fixed times: a GPU failure kills the job and fails its GPU
(hzctl device fail); a maintenance is announced with its lead (hzctl event
inject) and ends the job still there when it starts. A stopped job starts
again, after the restart delay, on a free host of the configuration, from
its last checkpoint.

Then it calibrates the emulator from this run (iteration time, checkpoint
stalls, restore times, restart time, notice delivery), writes the same
configuration as an hz-experiment --scenario, and compares the prediction
with what was measured, per job and in total. It fails (exit 1) when the
error exceeds the configuration's bound.

Usage: validate.py --config FILE --build-dir DIR --out DIR [--work-dir DIR]
Writes into --out: validation.json (configuration, calibration, measured,
predicted, errors and bounds), validation.csv (one row per cohort and job),
scenario.json and scenario.csv (the emulator's input and output), and the
jobs' logs under logs/.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(TOP, "tests", "integration", "python"))
from hz_service import Service  # noqa: E402

COHORTS = ("standard", "cooperative")
FIXTURES = os.path.join(TOP, "tests", "unit", "scheduler", "fixtures")
NAMESPACES = ["unshare", "--user", "--map-root-user", "--mount", "--pid", "--uts", "--ipc",
              "--net", "--fork", "--kill-child"]
EXIT_LEFT = 3  # hz-validation-job left on a notice, its state saved
TICK_S = 0.02


class FixtureService(Service):
    """harmonaized whose scheduler sees a copy of a fixture host."""

    def __init__(self, build: str, fixture: str) -> None:
        super().__init__(os.path.join(build, "hypervisor", "service", "harmonaized"),
                         os.path.join(build, "hypervisor", "hzctl", "hzctl"))
        sysfs = os.path.join(self.dir, "sysfs")
        shutil.copytree(os.path.join(FIXTURES, fixture, "sysfs"), sysfs, symlinks=True)
        self.config = os.path.join(self.dir, "harmonaized.toml")
        with open(self.config, "w", encoding="utf-8") as f:
            f.write(f'[scheduler]\nsysfs_root = "{sysfs}"\n'
                    f'provider_file = "{os.path.join(FIXTURES, fixture, "inventory.toml")}"\n'
                    "sync = false\nhealth_poll_ms = 50\n")

    def command(self) -> List[str]:
        return super().command() + ["--config", self.config]

    def gpus(self) -> List[str]:
        return [d["bdf"] for d in self.hzctl("inventory")["result"] if d["kind"] == "gpu"]


def container_prefix() -> List[str]:
    """unshare's namespaces when this machine allows them, else none."""
    try:
        ok = subprocess.run(NAMESPACES + ["true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        print("validate: no namespaces here (unshare failed): jobs run as plain process groups",
              file=sys.stderr)
    return NAMESPACES if ok else []


def read_lines(path: str) -> List[Dict[str, Any]]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line cut by the kill
    return out


class RealRun:
    """One cohort of the configuration, run for real on the wall clock."""

    def __init__(self, cfg: Dict[str, Any], cohort: str, build: str, work: str,
                 prefix: List[str]) -> None:
        self.cfg, self.cohort, self.prefix = cfg, cohort, prefix
        self.job_bin = os.path.join(build, "tests", "integration", "experiment",
                                    "hz-validation-job")
        self.work = os.path.join(work, cohort)
        os.makedirs(self.work, exist_ok=True)
        self.svc = FixtureService(build, cfg["fixture"])
        model = cfg["model"]
        lead = model["early_maintenance_notice_s" if cohort == "cooperative"
                     else "maintenance_notice_s"]
        self.timeline = []  # (time, order, action, event index)
        for k, e in enumerate(cfg["events"]):
            if e["kind"] == "maintenance":
                self.timeline.append((e["time_s"] - lead, 0, "notice", k))
            self.timeline.append((e["time_s"], 1, "strike", k))
        self.timeline.sort()
        self.lead = lead
        self.hosts = [{"down_until": 0.0, "drained": False, "job": None}
                      for _ in range(cfg["hosts"])]
        self.jobs = [{"state": "waiting", "queued": j["arrival_s"], "host": None, "proc": None,
                      "launch_at": None, "runs": [], "placed": [], "interrupts": []}
                     for j in cfg["jobs"]]
        self.aim: Dict[int, int] = {}  # event -> host it strikes
        self.injected: List[float] = []
        self.t0 = 0.0

    def now(self) -> float:
        return time.monotonic() - self.t0

    def run(self, timeout_s: float) -> Dict[str, Any]:
        with self.svc:
            gpus = self.svc.gpus()
            per_host = self.cfg["gpus_per_host"]
            if len(gpus) < self.cfg["hosts"] * per_host:
                raise RuntimeError(f"fixture {self.cfg['fixture']} has {len(gpus)} GPUs")
            self.host_gpus = [gpus[h * per_host:(h + 1) * per_host]
                              for h in range(self.cfg["hosts"])]
            self.socks = [self.svc.tenant_with_vms(f"job{i}", 2) for i in range(len(self.jobs))]
            self.t0 = time.monotonic()
            try:
                while any(j["state"] != "done" for j in self.jobs):
                    if self.now() > timeout_s:
                        raise RuntimeError(f"{self.cohort}: not done after {timeout_s} s")
                    self.step()
                    time.sleep(TICK_S)
            finally:
                for j in self.jobs:
                    self.kill(j)
                shutil.copy(self.svc.log_path, os.path.join(self.work, "harmonaized.log"))
        return self.measure()

    def step(self) -> None:
        now = self.now()
        while self.timeline and self.timeline[0][0] <= now:
            _, _, action, k = self.timeline.pop(0)
            getattr(self, action)(k, now)
        for h, host in enumerate(self.hosts):
            if host["down_until"] and host["down_until"] <= now:
                host["down_until"], host["drained"] = 0.0, False
                for bdf in self.host_gpus[h]:
                    self.svc.hzctl("device", "repair", bdf)
        for i, j in enumerate(self.jobs):
            if j["state"] == "running" and j["proc"].poll() is not None:
                self.exited(i, now)
            if j["state"] == "starting" and j["launch_at"] <= now:
                self.launch(i)
        self.place(now)

    def host_of(self, k: int) -> Optional[int]:
        """Where event k strikes: its job's host when first asked (notice or strike)."""
        if k not in self.aim:
            j = self.jobs[self.cfg["events"][k]["job"]]
            if j["state"] not in ("running", "starting"):
                return None
            self.aim[k] = j["host"]
        return self.aim[k]

    def notice(self, k: int, now: float) -> None:
        h = self.host_of(k)
        if h is None:
            return
        self.hosts[h]["drained"] = True
        job = self.hosts[h]["job"]
        if job is not None:
            self.injected.append(time.monotonic())
            self.svc.hzctl("event", "inject", "--tenant", f"job{job}", "--topic", "maintenance",
                           "--kind", "scheduled", "--deadline-s", str(int(round(self.lead))))

    def strike(self, k: int, now: float) -> None:
        h = self.host_of(k)
        if h is None:
            return
        e = self.cfg["events"][k]
        host = self.hosts[h]
        if host["job"] is not None:
            self.interrupt(host["job"], now)
        down = self.cfg["model"]["repair_s" if e["kind"] != "maintenance" else "maintenance_s"]
        host["down_until"], host["drained"] = now + down, True
        if e["kind"] == "gpu_failure":
            self.svc.hzctl("device", "fail", self.host_gpus[h][0])

    def interrupt(self, i: int, now: float) -> None:
        j = self.jobs[i]
        self.kill(j)
        self.release(i)
        j["interrupts"].append(now)
        j["state"], j["queued"] = "waiting", now

    def kill(self, j: Dict[str, Any]) -> None:
        if j["proc"] is not None and j["proc"].poll() is None:
            os.killpg(j["proc"].pid, signal.SIGKILL)
            j["proc"].wait()

    def release(self, i: int) -> None:
        j = self.jobs[i]
        if j["host"] is not None and self.hosts[j["host"]]["job"] == i:
            self.hosts[j["host"]]["job"] = None
        j["host"] = None

    def exited(self, i: int, now: float) -> None:
        j = self.jobs[i]
        rc = j["proc"].returncode
        if rc == 0:
            j["state"] = "done"
            self.release(i)
        elif rc == EXIT_LEFT:
            self.release(i)
            j["interrupts"].append(now)
            j["state"], j["queued"] = "waiting", now
        else:
            raise RuntimeError(f"{self.cohort} job {i} failed ({rc}): see {j['runs'][-1]}")

    def place(self, now: float) -> None:
        """First come, first served, each job on the first free host; a job
        that stopped starts after the restart delay."""
        waiting = sorted((j["queued"], i) for i, j in enumerate(self.jobs)
                         if j["state"] == "waiting" and j["queued"] <= now)
        for _, i in waiting:
            free = [h for h, x in enumerate(self.hosts)
                    if x["job"] is None and not x["drained"] and not x["down_until"]]
            if not free:
                return
            j = self.jobs[i]
            j["host"] = free[0]
            self.hosts[free[0]]["job"] = i
            j["state"] = "starting"
            j["placed"].append(now)
            j["launch_at"] = now + (self.cfg["restart_delay_s"] if j["interrupts"] else 0)

    def launch(self, i: int) -> None:
        j, spec = self.jobs[i], self.cfg["jobs"][i]
        every = self.cfg["ckpt_every"][self.cohort]
        log = os.path.join(self.work, f"job{i}-run{len(j['runs'])}.jsonl")
        argv = self.prefix + [self.job_bin, "--socks", ",".join(self.socks[i]),
                              "--mode", self.cohort, "--iterations", str(spec["iterations"]),
                              "--ckpt-every", str(every), "--ckpt-bytes",
                              str(self.cfg["ckpt_bytes"]), "--compute-ms",
                              str(self.cfg["compute_ms"]),
                              "--ckpt-file", os.path.join(self.work, f"job{i}.ckpt")]
        with open(log, "w", encoding="utf-8") as out:
            j["proc"] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        j["runs"].append(log)
        j["state"] = "running"

    def measure(self) -> Dict[str, Any]:
        """Per job: completion, lost iterations; for the calibration: the
        iteration times, stalls, restores, restarts and notice delivery."""
        jobs, iters, stalls, restores, restarts, notices = [], [], [], [], [], []
        for i, j in enumerate(self.jobs):
            lost, last = 0, None
            for r, log in enumerate(j["runs"]):
                lines = read_lines(log)
                restored = next(x for x in lines if x["ev"] == "restored")
                if last is not None:
                    lost += last - restored["step"]
                if r > 0:
                    # From its placement, as the emulator counts a restart:
                    # waiting for a free host is queueing, not restarting.
                    start = restored["t"] - restored["restore_s"] - self.t0
                    restarts.append(start - j["placed"][r])
                if restored["restore_s"] > 0:
                    restores.append(restored["restore_s"])
                steps = [x["step"] for x in lines if x["ev"] == "it"]
                last = max(steps, default=restored["step"])
                prev = None
                for x in lines:
                    if x["ev"] == "it":
                        if prev is not None:
                            iters.append(x["t"] - prev)
                        prev = x["t"]
                    elif x["ev"] in ("ckpt", "notice"):
                        prev = None  # that gap holds a save or a notice, not an iteration
                        if x["ev"] == "ckpt":
                            stalls.append(x["stall_s"])
                        else:
                            notices.append(x["t"])
            done = next(x["t"] for x in read_lines(j["runs"][-1]) if x["ev"] == "done")
            jobs.append({"jct_s": done - self.t0 - self.cfg["jobs"][i]["arrival_s"],
                         "lost_iterations": lost, "interruptions": len(j["interrupts"])})
        delivery = [n - s for n, s in zip(sorted(notices), sorted(self.injected))]
        return {"jobs": jobs, "iteration_s": iters, "stall_s": stalls, "restore_s": restores,
                "restart_s": restarts, "notice_delivery_s": delivery}


def mean(xs: List[float]) -> Optional[float]:
    return sum(xs) / len(xs) if xs else None


def calibrate(cfg: Dict[str, Any], real: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """The emulator's figures measured in this run, each with its source."""
    iteration = mean(real["standard"]["iteration_s"] + real["cooperative"]["iteration_s"])
    gb = cfg["ckpt_bytes"] / 1e9
    std, coop = real["standard"], real["cooperative"]
    std_stall, coop_stall = mean(std["stall_s"]), mean(coop["stall_s"])
    std_restore, coop_restore = mean(std["restore_s"]), mean(coop["restore_s"])
    here = "measured in this validation run: "
    cal: Dict[str, Any] = {
        "ckpt_gb_per_gpu": (gb, "the job's state, saved by its first rank"),
        "tenant_write_fsync_gbps": (std_stall and gb / std_stall,
                                    "the standard jobs' write+fsync stalls"),
        "provider_stall_speedup": (std_stall and coop_stall and std_stall / coop_stall,
                                   "the standard over the cooperative jobs' save stalls"),
        "standard_ckpt_interval_s": (cfg["ckpt_every"]["standard"] * iteration,
                                     "the standard jobs' interval times the iteration"),
        "restart_s": (mean(std["restart_s"] + coop["restart_s"]),
                      "from a stopped job's placement to its restore starting"),
        "restore_gbps": (std_restore and gb / std_restore,
                         "the standard jobs' reads of their file"),
        "peer_copy_gbps": (coop_restore and gb / coop_restore,
                           "the cooperative jobs' restores through harmonaized"),
        "push_latency_s": (mean(coop["notice_delivery_s"]),
                           "a cooperative job's notice, from hzctl event inject"),
    }
    # A figure this run did not exercise (no save, restore or notice) is left
    # to the configuration: the emulator does not use it either.
    figures = {k: {"value": v, "source": here + s} for k, (v, s) in cal.items() if v}
    return {"iteration_s": iteration, "figures": figures}


def scenario(cfg: Dict[str, Any], cal: Dict[str, Any]) -> Dict[str, Any]:
    """The configuration as hz-experiment --scenario reads it."""
    model = {k: {"value": v, "source": "the validation configuration"}
             for k, v in cfg["model"].items()}
    model.update(cal["figures"])
    return {"hosts": cfg["hosts"], "gpus_per_host": cfg["gpus_per_host"],
            "jobs": [{"arrival_s": j["arrival_s"], "gpus": cfg["gpus_per_host"],
                      "duration_s": j["iterations"] * cal["iteration_s"]} for j in cfg["jobs"]],
            "events": [{"time_s": e["time_s"], "kind": e["kind"], "job": e["job"]}
                       for e in cfg["events"]],
            "model": model}


def predict(build: str, out: str, scen: Dict[str, Any]) -> Dict[str, List[Dict[str, float]]]:
    path = os.path.join(out, "scenario.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(scen, f, indent=2)
    subprocess.run([os.path.join(build, "hypervisor", "experiment", "hz-experiment"),
                    "--scenario", path, "--cohorts", ",".join(COHORTS), "--out", out],
                   check=True, stdout=subprocess.DEVNULL)
    pred: Dict[str, List[Dict[str, float]]] = {c: [] for c in COHORTS}
    with open(os.path.join(out, "scenario.csv"), encoding="utf-8") as f:
        for row in csv.DictReader(f):
            pred[row["cohort"]].append({k: float(row[k]) for k in
                                        ("jct_s", "lost_s", "ckpt_interval_s", "interruptions")})
    return pred


def compare(cfg: Dict[str, Any], real: Dict[str, Dict[str, Any]],
            pred: Dict[str, List[Dict[str, float]]], iteration: float) -> Dict[str, Any]:
    rows, rel = [], []
    for c in COHORTS:
        for i, (m, p) in enumerate(zip(real[c]["jobs"], pred[c])):
            lost = m["lost_iterations"] * iteration
            rel.append(abs(p["jct_s"] - m["jct_s"]) / m["jct_s"])
            rows.append({"cohort": c, "job": i, "measured_jct_s": m["jct_s"],
                         "predicted_jct_s": p["jct_s"], "jct_error": rel[-1],
                         "measured_lost_s": lost, "predicted_lost_s": p["lost_s"],
                         "measured_interruptions": m["interruptions"],
                         "predicted_interruptions": int(p["interruptions"]),
                         "predicted_ckpt_interval_s": p["ckpt_interval_s"]})
    totals = {}
    for c in COHORTS:
        mine = [r for r in rows if r["cohort"] == c]
        totals[c] = {k: sum(r[k] for r in mine) / (len(mine) if "jct" in k else 1)
                     for k in ("measured_jct_s", "predicted_jct_s", "measured_lost_s",
                               "predicted_lost_s")}
    ratio_m = totals["cooperative"]["measured_jct_s"] / totals["standard"]["measured_jct_s"]
    ratio_p = totals["cooperative"]["predicted_jct_s"] / totals["standard"]["predicted_jct_s"]
    bound = cfg["bound"]
    lost_err = max(abs(t["predicted_lost_s"] - t["measured_lost_s"]) for t in totals.values())
    errors = {"jct_mean_abs_rel_error": sum(rel) / len(rel),
              "ratio_rel_error": abs(ratio_p - ratio_m) / ratio_m,
              "lost_abs_error_s": lost_err,
              "interruptions_match": all(r["measured_interruptions"] ==
                                         r["predicted_interruptions"] for r in rows)}
    ok = (errors["jct_mean_abs_rel_error"] <= bound["jct_mean_abs_rel_error"]
          and errors["ratio_rel_error"] <= bound["ratio_rel_error"]
          and errors["lost_abs_error_s"] <= bound["lost_abs_error_s"]
          and errors["interruptions_match"])
    return {"jobs": rows, "totals": totals, "ratio": {"measured": ratio_m, "predicted": ratio_p},
            "errors": errors, "bound": bound, "agrees": ok}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="the configuration (JSON)")
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work-dir", help="checkpoint files and logs (default: under --out); "
                    "on a disk, not a tmpfs, for the write+fsync to mean anything")
    args = ap.parse_args()
    with open(args.config, encoding="utf-8") as f:
        cfg = json.load(f)
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work_dir or args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="hz-validation.", dir=args.work_dir or args.out)
    prefix = container_prefix()
    real = {}
    try:
        for c in COHORTS:
            real[c] = RealRun(cfg, c, args.build_dir, work, prefix).run(cfg["timeout_s"])
    finally:
        logs = os.path.join(args.out, "logs")
        shutil.rmtree(logs, ignore_errors=True)
        shutil.copytree(work, logs, ignore=shutil.ignore_patterns("*.ckpt", "*.tmp"))
        shutil.rmtree(work, ignore_errors=True)
    cal = calibrate(cfg, real)
    pred = predict(args.build_dir, args.out, scenario(cfg, cal))
    result = compare(cfg, real, pred, cal["iteration_s"])
    result.update({"config": cfg, "namespaces": bool(prefix), "calibration": cal,
                   "measured": real})
    with open(os.path.join(args.out, "validation.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    with open(os.path.join(args.out, "validation.csv"), "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(result["jobs"][0]))
        w.writeheader()
        w.writerows(result["jobs"])
    for r in result["jobs"]:
        print(f"{r['cohort']:12s} job {r['job']}: JCT {r['measured_jct_s']:6.1f} s measured, "
              f"{r['predicted_jct_s']:6.1f} s predicted ({100 * r['jct_error']:4.1f}%); lost "
              f"{r['measured_lost_s']:5.1f} / {r['predicted_lost_s']:5.1f} s")
    e, b = result["errors"], result["bound"]
    print(f"validate: JCT error {100 * e['jct_mean_abs_rel_error']:.1f}% "
          f"(bound {100 * b['jct_mean_abs_rel_error']:.0f}%), cooperative/standard "
          f"{result['ratio']['measured']:.3f} measured, {result['ratio']['predicted']:.3f} "
          f"predicted ({100 * e['ratio_rel_error']:.1f}%, bound "
          f"{100 * b['ratio_rel_error']:.0f}%), lost work off by {e['lost_abs_error_s']:.1f} s "
          f"(bound {b['lost_abs_error_s']} s): {'agrees' if result['agrees'] else 'DISAGREES'}")
    return 0 if result["agrees"] else 1


if __name__ == "__main__":
    sys.exit(main())
