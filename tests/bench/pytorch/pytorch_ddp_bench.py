# SPDX-License-Identifier: Apache-2.0
"""pytorch_ddp_bench: the harmonaize torch.distributed backend against Gloo
(TCP over loopback), and against raw hz_allreduce, in the same run.

For 2, 3 and 4 ranks (container tenants of one harmonaized started here):

* ``allreduce``: one 25 MiB gradient bucket (fp32) all-reduced through
  ``dist.all_reduce`` on harmonaize and on Gloo; goal: Gloo / harmonaize >= 3.
* ``overhead``: the backend's ``dist.all_reduce`` against a raw hz_allreduce
  (harmonaize._Communicator) of the same registered buffer; goal: <= 1.2 at
  25 MiB. Smaller sizes show the fixed cost per call.
* ``ddp_step``: one DDP training step (forward, backward with the bucket's
  all-reduce, SGD) of a model with 25 MiB of parameters, on each backend.

The backends are measured in alternating rounds (one of each, back to back),
so that a neighbour's load on a shared host hits both; each line reports the
median over rounds and every round's value. Prints JSON lines.

Usage: pytorch_ddp_bench [--ranks 2,3,4] [--rounds N] [--smoke]

``--smoke`` is the bounded run ctest does (pytorch_ddp_bench_smoke): two
ranks, one round, a 1 MiB bucket and a small model. It shows that every
measurement runs and reports its ratio; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from typing import Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20
BUCKET_BYTES = 25 * MIB
OVERHEAD_SIZES = (4096, 256 * 1024, 4 * MIB, BUCKET_BYTES)
DDP_LAYERS, DDP_WIDTH = 6, 1024  # 6 x (1024 x 1024 + 1024) fp32: 24 MiB, one default bucket


def smoke() -> None:
    """Sizes of the bounded run (--smoke)."""
    global BUCKET_BYTES, OVERHEAD_SIZES, DDP_LAYERS, DDP_WIDTH
    BUCKET_BYTES = 1 * MIB
    OVERHEAD_SIZES = (4096, BUCKET_BYTES)
    DDP_LAYERS, DDP_WIDTH = 2, 256


# ---- rank side ------------------------------------------------------------------


def timed(fn: Callable[[], None], barrier: Callable[[], None]) -> float:
    """Seconds one call of fn takes on this rank, after all ranks lined up."""
    barrier()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def slowest(seconds: float, gloo) -> float:
    """The slowest rank's time: a collective is done when its last rank is."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
    return t.item()


def rounds_of(pairs: int, a: Callable[[], float], b: Callable[[], float]) -> Dict[str, List[float]]:
    out: Dict[str, List[float]] = {"a": [], "b": []}
    for _ in range(pairs):
        out["a"].append(a())
        out["b"].append(b())
    return out


def emit(rank: int, record: Dict) -> None:
    if rank == 0:
        print(json.dumps(record), flush=True)


def bench_allreduce(rank, world, gloo, rounds):
    import torch
    import torch.distributed as dist

    n = BUCKET_BYTES // 4
    hz_t = torch.ones(n)  # registered memory: the backend's allocator placed it there
    gloo_t = torch.ones(n)
    bar = lambda: dist.barrier(group=gloo)  # noqa: E731
    for _ in range(2):  # warm up both paths
        dist.all_reduce(hz_t)
        dist.all_reduce(gloo_t, group=gloo)
    r = rounds_of(rounds, lambda: slowest(timed(lambda: dist.all_reduce(hz_t), bar), gloo),
                  lambda: slowest(timed(lambda: dist.all_reduce(gloo_t, group=gloo), bar), gloo))
    hz_ms = statistics.median(r["a"]) * 1e3
    gloo_ms = statistics.median(r["b"]) * 1e3
    emit(rank, {"bench": "allreduce", "ranks": world, "bytes": BUCKET_BYTES, "dtype": "float32",
                "harmonaize_ms": round(hz_ms, 3), "gloo_ms": round(gloo_ms, 3),
                "gloo_over_harmonaize": round(gloo_ms / hz_ms, 2),
                "goal": ">= 3" if BUCKET_BYTES == 25 * MIB else None,
                "harmonaize_rounds_ms": [round(x * 1e3, 3) for x in r["a"]],
                "gloo_rounds_ms": [round(x * 1e3, 3) for x in r["b"]]})


def bench_overhead(rank, world, gloo, rounds):
    import torch
    import torch.distributed as dist

    import harmonaize

    dev = harmonaize.device()
    uid = [dev.new_uid() if rank == 0 else None]
    dist.broadcast_object_list(uid, src=0, group=gloo)
    raw = dev.communicator(uid[0], world, rank)
    bar = lambda: dist.barrier(group=gloo)  # noqa: E731
    fp32 = harmonaize._native.CONSTANTS["HZ_FP32"]
    hz_sum = harmonaize._native.CONSTANTS["HZ_SUM"]
    for size in OVERHEAD_SIZES:
        buf = dev.alloc(size)  # the same registered memory for both
        t = torch.frombuffer(buf, dtype=torch.float32)
        count = size // 4
        calls = max(1, min(200, (64 * MIB) // size))  # enough calls to time small sizes

        def backend() -> float:
            bar()
            t0 = time.perf_counter()
            for _ in range(calls):
                dist.all_reduce(t)
            return slowest((time.perf_counter() - t0) / calls, gloo)

        def direct() -> float:
            bar()
            t0 = time.perf_counter()
            for _ in range(calls):
                raw.allreduce(buf.address, buf.address, count, fp32, hz_sum)
            return slowest((time.perf_counter() - t0) / calls, gloo)

        backend()
        direct()
        r = rounds_of(rounds, backend, direct)
        be, rw = statistics.median(r["a"]) * 1e6, statistics.median(r["b"]) * 1e6
        emit(rank, {"bench": "overhead", "ranks": world, "bytes": size, "calls_per_round": calls,
                    "backend_us": round(be, 1), "raw_hz_allreduce_us": round(rw, 1),
                    "backend_over_raw": round(be / rw, 3),
                    "goal": "<= 1.2" if size == 25 * MIB else None,
                    "backend_rounds_us": [round(x * 1e6, 1) for x in r["a"]],
                    "raw_rounds_us": [round(x * 1e6, 1) for x in r["b"]]})
        del t, buf
    raw.destroy()


def ddp_model():
    import torch

    torch.manual_seed(0)
    layers = []
    for _ in range(DDP_LAYERS):
        layers += [torch.nn.Linear(DDP_WIDTH, DDP_WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def bench_ddp(rank, world, gloo, rounds):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    models = {"harmonaize": DDP(ddp_model(), gradient_as_bucket_view=True),
              "gloo": DDP(ddp_model(), process_group=gloo, gradient_as_bucket_view=True)}
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in models.items()}
    x = torch.randn(16, DDP_WIDTH)
    bar = lambda: dist.barrier(group=gloo)  # noqa: E731

    def step(name: str) -> float:
        def run():
            opts[name].zero_grad(set_to_none=False)
            models[name](x).square().mean().backward()
            opts[name].step()
        return slowest(timed(run, bar), gloo)

    for _ in range(2):
        step("harmonaize")
        step("gloo")
    r = rounds_of(rounds, lambda: step("harmonaize"), lambda: step("gloo"))
    params = sum(p.numel() for p in models["gloo"].parameters()) * 4
    hz_ms, gloo_ms = statistics.median(r["a"]) * 1e3, statistics.median(r["b"]) * 1e3
    emit(rank, {"bench": "ddp_step", "ranks": world, "param_bytes": params, "batch": 16,
                "harmonaize_ms": round(hz_ms, 3), "gloo_ms": round(gloo_ms, 3),
                "gloo_over_harmonaize": round(gloo_ms / hz_ms, 2),
                "harmonaize_rounds_ms": [round(v * 1e3, 3) for v in r["a"]],
                "gloo_rounds_ms": [round(v * 1e3, 3) for v in r["b"]]})


def rank_main(rounds: int) -> int:
    import torch
    import torch.distributed as dist

    import harmonaize.distributed  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("harmonaize", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    bench_allreduce(rank, world, gloo, rounds)
    bench_overhead(rank, world, gloo, rounds)
    bench_ddp(rank, world, gloo, rounds)
    dist.barrier(group=gloo)
    dist.destroy_process_group()
    return 0


# ---- launcher ---------------------------------------------------------------------


def launch(ranks: List[int], rounds: int, extra: List[str]) -> int:
    sys.path.insert(0, os.environ.get("HZ_PY_TEST_DIR",
                                      os.path.join(HERE, "..", "..", "integration", "python")))
    from hz_service import Service
    from ranks import describe, run_ranks

    status = 0
    with Service() as svc:
        for world in ranks:
            sockets = svc.tenant_with_vms(f"bench{world}", world)
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # Gloo over TCP loopback
            results = run_ranks(os.path.abspath(__file__), sockets,
                                ["--rank-process", "--rounds", str(rounds), *extra], timeout=900)
            sys.stdout.write(results[0].stdout)
            sys.stdout.flush()
            if any(r.returncode != 0 for r in results):
                sys.stderr.write(describe(results) + svc.log())
                status = 1
    return status


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="2,3,4", help="world sizes to run, comma-separated")
    p.add_argument("--rounds", type=int, default=7, help="alternating rounds per measurement")
    p.add_argument("--smoke", action="store_true",
                   help="bounded run: 2 ranks, 1 round, small sizes (numbers mean nothing)")
    p.add_argument("--rank-process", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.smoke:
        smoke()
    if a.rank_process:
        return rank_main(a.rounds)
    if a.smoke:
        return launch([2], 1, ["--smoke"])
    return launch([int(x) for x in a.ranks.split(",")], a.rounds, [])


if __name__ == "__main__":
    sys.exit(main())
