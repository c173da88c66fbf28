# SPDX-License-Identifier: Apache-2.0
"""Tenants on a two-host cluster: their VM sockets and the tenant CLI (`hz`)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from typing import Iterator, List

import pytest

from cluster_host import ClusterHost, wait_until
from cluster_net import ClusterNet

HZ = os.environ.get("HZ_CLI", "hz")
LEASE_MS = 1000  # short, so that a killed host is gone soon


def hz(socket: str, *args: str) -> list:
    """Every JSON line `hz --json` printed (results and errors)."""
    out = subprocess.run([HZ, "--device", f"vhost-user:{socket}", "--json", *args],
                         capture_output=True, text=True, timeout=60).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def checkpoint_events(socket: str) -> list:
    """(kind, stream, tier, step, status) of the CHECKPOINT events waiting
    (SPEC.md 8.3.6)."""
    out = []
    for e in hz(socket, "events", "--topics", "checkpoint", "--wait-ms", "200"):
        p = bytes.fromhex(e["payload"])
        le = lambda a, b: int.from_bytes(p[a:b], "little")
        out.append((e["kind"], le(0, 4), le(4, 8), le(8, 16), le(16, 20)))
    return out


def vm_socket(host: ClusterHost, tenant: str) -> str:
    """Binds a VM socket of tenant on host; its path."""
    path = os.path.join(host.dir, f"{tenant}-vm.sock")
    assert host.hzctl("vm", "bind", "--tenant", tenant, "--socket", path)["ok"]
    return path


@contextlib.contextmanager
def two_hosts(tenants: List[str], lease_ms: int) -> Iterator[List[ClusterHost]]:
    """h0 and h1 with Redis, links at 1 Gbit/s, each with the tenants created;
    both stopped at the end."""
    with ClusterNet(["store", "h0", "h1"], rate_mbit=1000) as net:
        net.start_redis()
        members = [ClusterHost(net, "h0", lease_ms), ClusterHost(net, "h1", lease_ms)]
        try:
            for h in members:
                h.start()
                for tenant in tenants:
                    assert h.hzctl("tenant", "create", tenant)["ok"]
            assert wait_until(lambda: all(len(h.hosts()) == 2 for h in members), 10)
            yield members
        finally:
            for h in members:
                if h.proc is not None and h.proc.poll() is None:
                    h.stop()


@pytest.fixture
def acme_and_eve() -> Iterator[List[ClusterHost]]:
    """h0 and h1 (leases of LEASE_MS), each with tenants acme and eve."""
    with two_hosts(["acme", "eve"], LEASE_MS) as members:
        yield members
