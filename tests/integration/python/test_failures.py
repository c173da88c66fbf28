# SPDX-License-Identifier: Apache-2.0
"""Failures of the torch.distributed backend on three ranks: each becomes an
exception (a harmonaize.errors class, a RuntimeError) on every rank concerned,
never a hang. The test's own timeout is the only clock: nothing here asserts
how fast."""

from __future__ import annotations

import os
from typing import Dict, List

from ranks import describe, run_ranks

HERE = os.path.dirname(__file__)


def outcomes(results) -> Dict[str, Dict[int, str]]:
    """case -> rank -> exception class name (None when it succeeded)."""
    out: Dict[str, Dict[int, str]] = {}
    for r in results:
        for line in r.json_lines():
            out.setdefault(line["case"], {})[line["rank"]] = line["error"]
    return out


def test_failures_raise_on_every_rank(sockets) -> None:
    results = run_ranks(os.path.join(HERE, "failures_rank.py"), sockets(3))
    text = describe(results)
    assert [r.returncode for r in results] == [0, 0, -9], text
    got = outcomes(results)
    everyone: List[int] = [0, 1, 2]
    # Unsupported reductions: a clear error at the call, and the group works on.
    assert got["bxor"] == {r: "NotSupportedError" for r in everyone}, text
    assert got["int16"] == {r: "NotSupportedError" for r in everyone}, text
    assert got["after unsupported"] == {r: None for r in everyone}, text
    assert "ReduceOp.BXOR is not supported" in text
    # A mismatch fails every rank and leaves the group usable.
    assert got["mismatch"] == {r: "MismatchError" for r in everyone}, text
    assert got["after mismatch"] == {r: None for r in everyone}, text
    # Work.wait(timeout) gives up on rank 0 and aborts the group everywhere.
    assert got["wait timeout"] == {0: "TimedOutError"}, text
    assert got["after wait timeout"] == {r: "AbortedError" for r in everyone}, text
    # The device's timeout: the ranks that waited time out, the late one finds it aborted.
    assert got["group timeout"] == {0: "TimedOutError", 1: "TimedOutError", 2: "AbortedError"}, text
    # A dead rank: the others' collectives fail, in its groups and in the default one.
    assert got["peer died"] == {0: "AbortedError", 1: "AbortedError"}, text
    assert got["peer died, default group"] == {0: "AbortedError", 1: "AbortedError"}, text
