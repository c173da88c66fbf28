# SPDX-License-Identifier: Apache-2.0
"""Launches rank processes the way torch.distributed's env:// rendezvous expects.

Each rank is ``/usr/bin/python3 SCRIPT ARGS`` (the interpreter with Debian's
torch) with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and its own
``HZ_DEVICE`` (a container tenant's VM socket).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
from typing import Dict, List, Optional, Sequence


@dataclasses.dataclass
class RankResult:
    rank: int
    returncode: int
    stdout: str
    stderr: str

    def json_lines(self) -> List[Dict]:
        """The JSON objects the rank printed, one per line."""
        out = []
        for line in self.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                out.append(json.loads(line))
        return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, world: int, port: int, sock: Optional[str]) -> Dict[str, str]:
    env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
               LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    if sock is not None:
        env["HZ_DEVICE"] = f"vhost-user:{sock}"
    return env


def run_ranks(script: str, sockets: Sequence[Optional[str]], args: Sequence[str] = (),
              timeout: float = 240.0) -> List[RankResult]:
    """Runs one process per socket and waits for all (killing them at the timeout)."""
    port = free_port()
    world = len(sockets)
    procs = [subprocess.Popen([sys.executable, script, *args], env=rank_env(r, world, port, s),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r, s in enumerate(sockets)]
    results = []
    for r, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, err = p.communicate()
            err += f"\n[rank {r} killed after {timeout} s]"
        results.append(RankResult(r, p.returncode, out, err))
    return results


def describe(results: Sequence[RankResult]) -> str:
    """Every rank's exit status and output, for assertion messages."""
    return "\n".join(f"--- rank {r.rank}: exit {r.returncode}\n{r.stdout}\n{r.stderr[-4000:]}"
                     for r in results)
