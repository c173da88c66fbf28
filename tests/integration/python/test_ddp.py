# SPDX-License-Identifier: Apache-2.0
"""DDP on the harmonaize backend reaches the parameters DDP on Gloo reaches.

Both train the same model from the same weights on the same data, in the
same rank processes, for 20 steps with several gradient buckets.

* Two ranks: bit-identical. Each bucket is a sum of two values, and IEEE
  addition is commutative, so no reduction order can change it.
* Three ranks: within 1e-5 of the largest parameter (in practice a few
  ulps). The device sums in rank order, (g0 + g1) + g2 (protocol/SPEC.md
  7.4.6); Gloo's ring all-reduce starts each chunk's sum at a different rank,
  so some elements are associated differently and round differently, and the
  differences carry through the optimizer's steps.

It also checks that the gradients went to the device in place: with
gradient_as_bucket_view, every gradient is a view of a DDP bucket, and every
bucket lies in the device's registered memory.
"""

from __future__ import annotations

import os

import pytest

from ranks import describe, run_ranks

HERE = os.path.dirname(__file__)


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_matches_gloo(sockets, world: int) -> None:
    results = run_ranks(os.path.join(HERE, "ddp_rank.py"), sockets(world))
    assert all(r.returncode == 0 for r in results), describe(results)
    for r in results:
        (got,) = r.json_lines()
        if world == 2:
            assert got["identical"], describe(results)
        else:
            assert got["max_abs_diff"] <= 1e-5 * got["max_abs_param"], describe(results)
        assert got["registered_grad_bytes"] == got["grad_bytes"], describe(results)
