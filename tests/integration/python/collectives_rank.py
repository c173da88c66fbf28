# SPDX-License-Identifier: Apache-2.0
"""One rank of test_collectives: every collective of the harmonaize backend,
checked against Gloo in the same processes.

The default process group is harmonaize; a Gloo group over the same ranks
is the reference. Where Gloo implements the operation for the dtype, its
result is compared; where it does not (bfloat16 and bool reductions, AVG,
reduce_scatter, the *_base forms), the reference is computed from the inputs
that Gloo all-gathers, with the reduction rules the device specifies: a left
fold in rank order, float16/bfloat16 accumulated in float32 and rounded once
(protocol/SPEC.md 7.4.4, 7.4.6). That reference is bit-exact; Gloo's own
sums of three or more floats associate differently and are compared within a
tolerance (see test_collectives.py).

Prints one JSON line: {"rank": r, "checked": n, "failures": [...]}.
"""

from __future__ import annotations

import datetime
import json
import sys
import traceback
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

import harmonaize
import harmonaize.distributed as hzd

R = dist.ReduceOp
OPS = [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG, R.BAND, R.BOR]
OP_NAMES = ["SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR"]
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INTS = (torch.int8, torch.uint8, torch.int32, torch.int64)
# Gloo 1.13 reduces these dtypes; the others are checked against the reference only.
GLOO_REDUCES = (torch.float32, torch.float64, torch.float16, torch.int8, torch.uint8,
                torch.int32, torch.int64)
SHAPES: Sequence[Tuple[int, ...]] = ((), (1,), (7,), (3, 5, 2), (257, 129), (1 << 20) + 3,)

rank = world = 0
gloo: Optional[dist.ProcessGroup] = None
checked = 0
failures: List[str] = []


def shape_of(s) -> Tuple[int, ...]:
    return (s,) if isinstance(s, int) else s


def make(shape, dtype: torch.dtype, seed: int, for_prod: bool = False,
         placement: str = "registered") -> torch.Tensor:
    """Deterministic, rank-dependent data; small integers where ops could overflow."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    shape = shape_of(shape)
    if placement == "staged":  # ordinary memory: the backend stages it
        hzd.use_registered_memory(False)
    try:
        if dtype == torch.bool:
            t = torch.randint(0, 2, shape, generator=g).bool()
        elif dtype in FLOATS:
            t = (torch.rand(shape, generator=g, dtype=torch.float64) * 4 - 2)
            if for_prod:
                t = t.clamp(0.5, 1.5)
            t = t.to(dtype)
        else:
            hi = 3 if for_prod else 50
            t = torch.randint(1, hi, shape, generator=g).to(dtype)
        if placement == "strided" and t.dim() >= 2:
            t = t.transpose(0, 1).contiguous().transpose(0, 1)
    finally:
        if placement == "staged":
            hzd.use_registered_memory(True)
    return t


def gathered(x: torch.Tensor) -> List[torch.Tensor]:
    """Every rank's x, in rank order, through Gloo (as bytes: any dtype)."""
    raw = x.contiguous().reshape(-1).view(torch.uint8)
    out = [torch.empty_like(raw) for _ in range(world)]
    dist.all_gather(out, raw, group=gloo)
    return [o.view(x.dtype).reshape(x.shape) for o in out]


def gview(t: torch.Tensor) -> torch.Tensor:
    """t as a dtype Gloo 1.13 copies (bfloat16 as float16, bool as uint8): the
    same bits and shape, for the copying collectives."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.float16)
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t


def fold(xs: Sequence[torch.Tensor], op) -> torch.Tensor:
    """The device's reduction: a left fold in rank order (SPEC.md 7.4.4, 7.4.6)."""
    dtype = xs[0].dtype
    if dtype == torch.bool:
        stack = torch.stack(list(xs))
        return stack.any(0) if op in (R.SUM, R.MAX, R.BOR) else stack.all(0)
    if dtype in (torch.float16, torch.bfloat16):
        return fold([x.float() for x in xs], op).to(dtype)
    acc = xs[0].clone()
    for x in xs[1:]:
        if op in (R.SUM, R.AVG):
            acc = acc + x
        elif op == R.PRODUCT:
            acc = acc * x
        elif op == R.MIN:
            acc = torch.minimum(acc, x)
        elif op == R.MAX:
            acc = torch.maximum(acc, x)
    if op == R.AVG:
        acc = acc / len(xs) if dtype.is_floating_point else torch.div(acc, len(xs),
                                                                      rounding_mode="trunc")
    return acc.to(dtype)


def tolerance(dtype: torch.dtype) -> Dict[str, float]:
    """Gloo's sums of 3+ floats associate differently; a few ulps of the type."""
    return {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float64: dict(rtol=1e-12, atol=1e-14),
            torch.float16: dict(rtol=2e-3, atol=2e-3)}.get(dtype, dict(rtol=0, atol=0))


class CaseFailed(Exception):
    pass


def check(name: str, fn: Callable[[], None]) -> None:
    """Runs a case; the first failure ends the run (the ranks would no longer
    call the same collectives)."""
    global checked
    checked += 1
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - reported with the case's name
        failures.append(f"{name}: {traceback.format_exc(limit=4)}")
        raise CaseFailed(name) from e


def equal(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        diff = (got.double() - want.double()).abs().max().item() if got.numel() else 0
        raise AssertionError(f"{what}: differs (max abs diff {diff})")


# ---- cases ------------------------------------------------------------------


def all_reduce_case(shape, dtype, op, placement: str) -> None:
    x = make(shape, dtype, seed=len(shape_of(shape)) * 31 + OPS.index(op),
             for_prod=op == R.PRODUCT, placement=placement)
    ins = gathered(x)
    original = x.clone()
    t = x.clone() if placement != "strided" else x  # the strided view itself, in place
    dist.all_reduce(t, op=op)
    equal(t, fold(ins, op), "against the rank-order reference")
    if dtype in GLOO_REDUCES and op != R.AVG:
        g = original
        dist.all_reduce(g, op=op, group=gloo)
        if dtype.is_floating_point and op in (R.SUM, R.PRODUCT):
            torch.testing.assert_close(t, g, **tolerance(dtype))
        else:
            equal(t, g, "against Gloo")


def copy_cases(shape, dtype) -> None:
    x = make(shape, dtype, seed=7)
    for root in range(world):
        a, b = x.clone(), x.clone()
        dist.broadcast(a, src=root)
        dist.broadcast(gview(b), src=root, group=gloo)
        equal(a, b, f"broadcast from {root}")
    outs = [torch.empty_like(x) for _ in range(world)]
    refs = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(outs, x)
    dist.all_gather([gview(r) for r in refs], gview(x), group=gloo)
    for i in range(world):
        equal(outs[i], refs[i], f"all_gather block {i}")
    flat = torch.empty((world * x.numel(),), dtype=dtype)
    dist._all_gather_base(flat, x.reshape(-1).contiguous())
    equal(flat, torch.cat([r.reshape(-1) for r in refs]), "_all_gather_base")
    root = world - 1
    gl = [torch.empty_like(x) for _ in range(world)] if rank == root else None
    dist.gather(x, gl, dst=root)
    if rank == root:
        for i in range(world):
            equal(gl[i], refs[i], f"gather block {i}")
    src = [make(shape, dtype, seed=100 + i) for i in range(world)] if rank == 0 else None
    got, ref = torch.empty_like(x), torch.empty_like(x)
    dist.scatter(got, src, src=0)
    dist.scatter(gview(ref), [gview(s.clone()) for s in src] if src else None, src=0, group=gloo)
    equal(got, ref, "scatter")


def reduce_cases(shape, dtype) -> None:
    x = make(shape, dtype, seed=11)
    ins = gathered(x)
    for op in (R.SUM, R.MAX):
        t = x.clone()
        dist.reduce(t, dst=1 % world, op=op)
        if rank == 1 % world:
            equal(t, fold(ins, op), f"reduce {op}")
        else:
            equal(t, x, f"reduce {op} leaves non-roots' tensors alone")
    blocks = [make(shape, dtype, seed=20 + i) for i in range(world)]
    all_blocks = [gathered(b) for b in blocks]  # all_blocks[i][r]: rank r's block i
    out = torch.empty_like(x)
    dist.reduce_scatter(out, blocks, op=R.SUM)
    equal(out, fold(all_blocks[rank], R.SUM), "reduce_scatter")
    flat_in = torch.cat([b.reshape(-1) for b in blocks])
    out2 = torch.empty((x.numel(),), dtype=dtype)
    dist._reduce_scatter_base(out2, flat_in, op=R.MAX)
    equal(out2, fold(all_blocks[rank], R.MAX).reshape(-1), "_reduce_scatter_base")
    ts = [make(shape, dtype, seed=30 + i) for i in range(3)]
    want = [fold(gathered(t), R.SUM) for t in ts]
    dist.all_reduce_coalesced(ts, op=R.SUM)
    for i in range(3):
        equal(ts[i], want[i], f"all_reduce_coalesced tensor {i}")


def alltoall_cases(dtype) -> None:
    rows = 4 * world
    x = make((rows, 3), dtype, seed=40)
    a, b = torch.empty_like(x), torch.empty_like(x)
    dist.all_to_all_single(a, x)
    dist.all_to_all_single(gview(b), gview(x), group=gloo)
    equal(a, b, "all_to_all_single, even")
    # Uneven: rank r sends (r + i + 1) rows to rank i.
    in_splits = [rank + i + 1 for i in range(world)]
    out_splits = [i + rank + 1 for i in range(world)]
    x = make((sum(in_splits), 5), dtype, seed=41)
    a = torch.empty((sum(out_splits), 5), dtype=dtype)
    b = torch.empty_like(a)
    dist.all_to_all_single(a, x, out_splits, in_splits)
    dist.all_to_all_single(gview(b), gview(x), out_splits, in_splits, group=gloo)
    equal(a, b, "all_to_all_single, uneven")
    # all_to_all of lists: rank s sends rank r a block of (r + 2) rows that
    # every rank can rebuild.
    def block(sender: int, receiver: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(5000 + sender * 64 + receiver)
        return torch.randint(0, 100, (receiver + 2, 3), generator=g).to(dtype)

    ins = [block(rank, i) for i in range(world)]
    outs = [torch.empty((rank + 2, 3), dtype=dtype) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for i in range(world):
        equal(outs[i], block(i, rank), f"all_to_all block from {i}")


def p2p_cases(shape, dtype) -> None:
    right, left = (rank + 1) % world, (rank - 1) % world
    x = make(shape, dtype, seed=60)
    everyone = gathered(x)
    got = torch.empty_like(x)
    # Both directions at once on every rank: no deadlock, pairs matched per peer.
    reqs = [dist.isend(x, right), dist.irecv(got, left)]
    for r in reqs:
        r.wait()
    equal(got, everyone[left], "isend/irecv ring")
    y = torch.empty_like(x)
    if rank == 0:
        dist.send(x, dst=world - 1)
    elif rank == world - 1:
        dist.recv(y, src=0)
        equal(y, everyone[0], "send/recv")


def complex_case(op) -> None:
    """Complex tensors reduce as pairs of reals (torch.distributed hands the
    backend their real view), so SUM and AVG are the real fold per component."""
    x = torch.complex(make((5, 3), torch.float32, seed=70), make((5, 3), torch.float32, seed=71))
    ins = gathered(x)
    t = x.clone()
    dist.all_reduce(t, op=op)
    want = torch.view_as_complex(fold([torch.view_as_real(i) for i in ins], op))
    equal(t, want, "complex against the rank-order reference")
    if op == R.SUM:
        g = x.clone()
        dist.all_reduce(g, op=op, group=gloo)
        torch.testing.assert_close(t, g, **tolerance(torch.float32))


def main() -> int:
    global rank, world, gloo
    dist.init_process_group("harmonaize", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    try:
        run_cases()
    except CaseFailed:
        pass
    print(json.dumps({"rank": rank, "checked": checked, "failures": failures}), flush=True)
    if failures:
        return 1
    dist.barrier(group=gloo)
    dist.destroy_process_group()
    return 0


def run_cases() -> None:
    for dtype in FLOATS + INTS + (torch.bool,):
        for shape in SHAPES:
            big = shape_of(shape) and torch.Size(shape_of(shape)).numel() > 100_000
            ops = (R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG)
            if dtype == torch.bool:
                ops = (R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR)
            if big:
                ops = ops[:1] + ops[3:4]  # the large sizes: SUM and MAX
            for op in ops:
                placements = ("registered", "staged") if big else ("registered",)
                for placement in placements:
                    check(f"all_reduce {OP_NAMES[OPS.index(op)]} {dtype} {shape} {placement}",
                          lambda: all_reduce_case(shape, dtype, op, placement))
        for shape in ((), (7,), (3, 5, 2), (257, 129)):
            check(f"copy ops {dtype} {shape}", lambda: copy_cases(shape, dtype))
            check(f"p2p {dtype} {shape}", lambda: p2p_cases(shape, dtype))
            if dtype != torch.bool:
                check(f"reductions {dtype} {shape}", lambda: reduce_cases(shape, dtype))
        check(f"alltoall {dtype}", lambda: alltoall_cases(dtype))
    for op in (R.SUM, R.AVG):
        check(f"all_reduce {OP_NAMES[OPS.index(op)]} complex64", lambda: complex_case(op))
    check("all_reduce of a transposed view", lambda: all_reduce_case((64, 33), torch.float32,
                                                                     R.SUM, "strided"))
    check("barrier", lambda: dist.barrier())


if __name__ == "__main__":
    sys.exit(main())
