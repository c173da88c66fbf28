# SPDX-License-Identifier: Apache-2.0
"""Every collective of the torch.distributed backend against Gloo, on three
ranks (container tenants on a real harmonaized): all_reduce with every
ReduceOp the device offers, all_reduce_coalesced, broadcast, reduce,
all_gather and _all_gather_base, reduce_scatter and _reduce_scatter_base,
all_to_all_single (even and uneven) and all_to_all, send/recv and
isend/irecv, gather, scatter and barrier; float32/64, float16, bfloat16,
int8/uint8/int32/int64, bool and complex64; 0-d to 1M-element tensors and odd shapes;
tensors in registered memory, staged ones and non-contiguous views.

Results are compared bit for bit with the device's specified reduction (a
rank-order left fold; float16/bfloat16 accumulated in float32) computed from
Gloo-gathered inputs, and with Gloo's own results: exactly for integers,
MIN/MAX and copies; within a few ulps for float SUM/PRODUCT, because Gloo's
ring all-reduce adds three ranks' values in a different association.
"""

from __future__ import annotations

import os

from ranks import describe, run_ranks

HERE = os.path.dirname(__file__)


def test_every_collective_matches_gloo(sockets) -> None:
    results = run_ranks(os.path.join(HERE, "collectives_rank.py"), sockets(3))
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        (summary,) = r.json_lines()
        assert summary["failures"] == [], describe(results)
        assert summary["checked"] > 300
