#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""cluster_allreduce_bench: all-reduce of fp32 across hosts, through the device.

Hosts are network namespaces on this machine (tests/support/python/cluster_net.py)
whose links are shaped with tc tbf to --rate-mbit in each direction, so that the
inter-host leg is the bottleneck as on a real cluster. Each host runs harmonaized
with [cluster]; Redis runs in a namespace of its own. For each configuration
(hosts x ranks per host) and size, in the same run:

  device_us      the hierarchical all-reduce: container tenants on each host's
                 VM sockets (cluster_bench_rank device), reduce within the host,
                 Gloo across hosts, results written back;
  gloo_us        flat Gloo across the same number of rank processes placed in
                 the same namespaces (cluster_bench_rank gloo): what tenants do
                 today across VMs;
  link_bound_us  the bytes the best hierarchical algorithm must move out of each
                 host (ring among H hosts: 2(H-1)/H of the buffer) at the link rate.

Each time is the median over iterations of the slowest rank's time. Per
configuration, one line with the time host 0 spent in each phase of its
reductions ("cluster_allreduce_phases": within the host, across hosts, writing
the outputs), then one line per size:
  {"bench":"cluster_allreduce","hosts":H,"ranks_per_host":R,"bytes":B,
   "device_us":..,"gloo_us":..,"link_bound_us":..,
   "of_link_bound":link_bound_us/device_us,"vs_flat_gloo":gloo_us/device_us,...}

Usage: cluster_allreduce_bench.py [--rate-mbit N] [--configs 2x2,4x2]
                                  [--sizes B,B,..] [--iters N] [--lossy] [--smoke]
--lossy: the device ranks set HZ_COMM_F_ALLOW_LOSSY, so fp32 crosses hosts as
bfloat16 (half the bytes; of_link_bound may then exceed 1).
Needs root (namespaces); run it from a build (ctest sets the environment) or set
HZ_HARMONAIZED, HZ_HZCTL, HZ_CLUSTER_BENCH_RANK and PYTHONPATH as the smoke test does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from typing import Dict, List

from cluster_host import ClusterHost, wait_until
from cluster_net import ClusterNet

RANK = os.environ.get("HZ_CLUSTER_BENCH_RANK", "cluster_bench_rank")
FULL_SIZES = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]


def collect(procs, label: str) -> Dict[int, List[List[float]]]:
    """bytes -> per-rank lists of iteration times."""
    by_size: Dict[int, List[List[float]]] = {}
    for p in procs:
        out, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"{label} rank failed (rc {p.returncode}): {err}")
        for line in out.splitlines():
            r = json.loads(line)
            by_size.setdefault(r["bytes"], []).append(r["us"])
    return by_size


def slowest_median(per_rank: List[List[float]]) -> float:
    """The median over iterations of the slowest rank's time."""
    return statistics.median(max(times) for times in zip(*per_rank))


def run_config(hosts: int, per_host: int, sizes: List[int], iters: int, warmup: int,
               rate_mbit: float, lossy: bool) -> List[dict]:
    names = [f"h{i}" for i in range(hosts)]
    nranks = hosts * per_host
    common = ["--nranks", str(nranks), "--sizes", ",".join(map(str, sizes)), "--iters",
              str(iters), "--warmup", str(warmup)]
    with ClusterNet(["store", *names], rate_mbit=rate_mbit) as net:
        net.start_redis()
        daemons = [ClusterHost(net, n, lease_ms=3000) for n in names]
        try:
            for d in daemons:
                d.start()
                d.hzctl("tenant", "create", "bench")
            assert wait_until(lambda: all(len(d.hosts()) == hosts for d in daemons), 30)
            uid_file = os.path.join(tempfile.mkdtemp(prefix="hz-bench-"), "uid")
            procs = []
            for r in range(nranks):
                d = daemons[r // per_host]
                sock = os.path.join(d.dir, f"bench-{r}.sock")
                d.hzctl("vm", "bind", "--tenant", "bench", "--socket", sock)
                argv = [RANK, "device", "--socket", sock, "--uid-file", uid_file, "--rank",
                        str(r), *common] + (["--create-uid"] if r == 0 else []) + \
                    (["--lossy"] if lossy else [])
                procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True))
            device = collect(procs, "device")
            # Where host 0's reductions spent their time, over the whole run.
            engine = daemons[0].hzctl("counters")["result"]["engine"]
            phases = engine.get("cross_host", {})
            # Which inter-host algorithm the measured leg model chose, how often.
            chosen = {k[len("cross_host_"):]: v for k, v in engine.get("algorithms", {}).items()
                      if k.startswith("cross_host_") and "lossy" not in k}
            key = f"bench/{uuid.uuid4().hex}/"
            procs = [net.popen(names[r // per_host],
                               [RANK, "gloo", "--store", f"{net.address('store')}:6379",
                                "--key", key, "--address", net.address(names[r // per_host]),
                                "--rank", str(r), *common],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for r in range(nranks)]
            gloo = collect(procs, "gloo")
        finally:
            for d in daemons:
                d.stop()
    rate = rate_mbit * 1e6 / 8
    out = [{"bench": "cluster_allreduce_phases", "hosts": hosts, "ranks_per_host": per_host,
            "host": "h0", "within_host_s": round(phases.get("local_ns", 0) / 1e9, 3),
            "across_hosts_s": round(phases.get("leg_ns", 0) / 1e9, 3),
            "outputs_s": round(phases.get("output_ns", 0) / 1e9, 3), "algorithms": chosen,
            "note": "all sizes and iterations of the device run together"}]
    for b in sizes:
        dev_us, gloo_us = slowest_median(device[b]), slowest_median(gloo[b])
        bound_us = 2 * (hosts - 1) / hosts * b / rate * 1e6
        out.append({"bench": "cluster_allreduce", "hosts": hosts, "ranks_per_host": per_host,
                    "bytes": b, "iters": iters, "rate_mbit": rate_mbit, "lossy_bf16": lossy,
                    "device_us": round(dev_us, 1), "gloo_us": round(gloo_us, 1),
                    "link_bound_us": round(bound_us, 1),
                    "of_link_bound": round(bound_us / dev_us, 3),
                    "vs_flat_gloo": round(gloo_us / dev_us, 3),
                    "reference": "flat Gloo ring over the same processes and links; "
                                 "link bound: 2(H-1)/H x bytes at the tbf rate"})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate-mbit", type=float, default=1000)
    ap.add_argument("--configs", default="2x2,4x2")
    ap.add_argument("--sizes", default=",".join(map(str, FULL_SIZES)))
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--lossy", action="store_true",
                    help="the device's communicator allows lossy transport: fp32 crosses hosts as "
                         "bfloat16 (the link bound stays the fp32 one)")
    ap.add_argument("--smoke", action="store_true",
                    help="2 hosts x 1 rank, 64 KiB and 1 MiB, one iteration: checks that it reports")
    a = ap.parse_args()
    if a.smoke:
        a.configs, a.sizes, a.iters, a.warmup = "2x1", f"{64 << 10},{1 << 20}", 1, 0
    sizes = [int(s) for s in a.sizes.split(",")]
    ok = True
    for config in a.configs.split(","):
        hosts, per_host = (int(x) for x in config.split("x"))
        for line in run_config(hosts, per_host, sizes, a.iters, a.warmup, a.rate_mbit, a.lossy):
            print(json.dumps(line), flush=True)
            if line["bench"] == "cluster_allreduce":
                ok = ok and line["device_us"] > 0 and line["gloo_us"] > 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
