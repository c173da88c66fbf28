# SPDX-License-Identifier: Apache-2.0
"""One rank of test_failures: what goes wrong raises, on every rank, and
never hangs. Prints one JSON line per case: {"case", "rank", "error"} where
error is the exception's class name (or null), then exits; rank 2 is killed
by itself in the last case.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import sys
from typing import Callable, Optional

import torch
import torch.distributed as dist

import harmonaize.distributed  # noqa: F401  (registers the backend)

rank = 0


def report(case: str, fn: Callable[[], None]) -> Optional[BaseException]:
    try:
        fn()
        error = None
    except RuntimeError as e:  # every backend failure is a RuntimeError subclass
        error = e
    print(json.dumps({"case": case, "rank": rank,
                      "error": type(error).__name__ if error else None,
                      "message": str(error) if error else ""}), flush=True)
    return error


def works(group=None) -> None:
    t = torch.ones(3)
    dist.all_reduce(t, group=group)
    assert t.tolist() == [float(dist.get_world_size(group))] * 3


def main() -> int:
    global rank
    dist.init_process_group("harmonaize", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()

    # Unsupported reductions fail at the call, before anything reaches the device.
    report("bxor", lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BXOR))
    report("int16", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16)))
    report("after unsupported", works)

    # Ranks that disagree get a mismatch, and the group stays usable.
    report("mismatch", lambda: dist.all_reduce(torch.ones(4 if rank == 0 else 5)))
    report("after mismatch", works)

    # Work.wait(timeout) on rank 0 alone: it gives up and aborts the group,
    # so the others fail too instead of waiting.
    waited = dist.new_group(backend="harmonaize")
    if rank == 0:
        work = dist.all_reduce(torch.ones(2), group=waited, async_op=True)
        report("wait timeout", lambda: work.wait(timeout=datetime.timedelta(milliseconds=500)))
    dist.barrier()
    report("after wait timeout", lambda: works(waited))

    # The device's timeout: rank 2 does not call the collective in time.
    timed = dist.new_group(backend="harmonaize", timeout=datetime.timedelta(seconds=2))
    if rank != 2:
        report("group timeout", lambda: works(timed))
    dist.barrier()
    if rank == 2:
        report("group timeout", lambda: works(timed))

    # A rank that dies: every other rank's collectives fail.
    doomed = dist.new_group(backend="harmonaize")
    works(doomed)
    dist.barrier()
    if rank == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    report("peer died", lambda: works(doomed))
    report("peer died, default group", works)
    return 0


if __name__ == "__main__":
    sys.exit(main())
