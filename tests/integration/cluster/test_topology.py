# SPDX-License-Identifier: Apache-2.0
"""A tenant's topology summary across the hosts of a cluster (SPEC.md 7.7).

Two hosts, each a harmonaized in its own network namespace whose scheduler
sees a fixture machine (the same hardware under different identifiers), hold
devices of one tenant. A container tenant on either host reads, through the
real device (`hz topology` over virtio-user), one summary covering both
hosts as coarse groups with a coarse class between them, byte for byte the
same on both; no host name, address or device identifier of either host
reaches it; another tenant sees none of it; and when a host dies, the summary
shrinks and the tenant is told, in bounded time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from cluster_host import ClusterHost, wait_until
from cluster_net import ClusterNet

HZ = os.environ.get("HZ_CLI", "hz")
LEASE_MS = 1000
# Host names that a leak would show: nothing tenant-visible may contain them.
NAMES = ["rack7-node-alpha", "rack9-node-omega"]


def topology(socket: str) -> dict:
    out = subprocess.run([HZ, "--device", f"vhost-user:{socket}", "--json", "topology"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return json.loads(out)


def identifiers(host: ClusterHost) -> set:
    """What identifies a host: its name, its addresses, and every quoted
    identifier of its fixture (PCI addresses, serials, its machine name)."""
    ids = {host.name, host.net.address(host.member)}
    with open(host.inventory, encoding="utf-8") as f:
        ids.update(m for m in re.findall(r'"([^"]{4,})"', f.read()))
    sysfs = os.path.join(host.dir, "sysfs", "bus", "pci", "devices")
    ids.update(os.listdir(sysfs))
    return ids


@pytest.fixture
def hosts():
    with ClusterNet(["store", "h0", "h1"], rate_mbit=1000) as net:
        net.start_redis()
        members = [ClusterHost(net, "h0", LEASE_MS, NAMES[0], fixture="hgx8"),
                   ClusterHost(net, "h1", LEASE_MS, NAMES[1], fixture="hgx8-relabeled")]
        try:
            for h in members:
                h.start()
                assert h.hzctl("tenant", "create", "acme")["ok"]
                assert h.hzctl("tenant", "create", "eve")["ok"]
            assert wait_until(lambda: all(len(h.hosts()) == 2 for h in members), 10)
            yield members
        finally:
            for h in members:
                h.stop()


def alloc(host: ClusterHost, tenant: str, *args: str) -> None:
    answer = host.hzctl("alloc", "--tenant", tenant, *args)
    assert answer.get("ok"), answer


def vm_socket(host: ClusterHost, tenant: str, n: int = 0) -> str:
    path = os.path.join(host.dir, f"{tenant}-vm{n}.sock")
    assert host.hzctl("vm", "bind", "--tenant", tenant, "--socket", path)["ok"]
    return path


def test_a_tenant_sees_its_devices_on_every_host_and_nothing_that_identifies_one(hosts):
    h0, h1 = hosts
    alloc(h0, "acme", "--gpus", "4", "--locality", "group")
    alloc(h1, "acme", "--gpus", "2", "--nics", "1")
    a0, a1, e0 = vm_socket(h0, "acme"), vm_socket(h1, "acme"), vm_socket(h0, "eve")

    # Each host learns the other's shapes within a few membership rounds.
    took = wait_until(lambda: topology(a0)["num_hosts"] == 2 and topology(a1)["num_hosts"] == 2,
                      10 * LEASE_MS / 1000)
    assert took is not None, (topology(a0), topology(a1))
    t0, t1 = topology(a0), topology(a1)
    assert t0 == t1  # the canonical form: the same summary on every host
    assert t0["cross_host_bw"] == "low"
    groups = t0["groups"]
    by_host = {}
    for g in groups:
        by_host.setdefault(g["host"], []).append(g)
    assert sorted(by_host) == [0, 1]
    # The larger host first: the 4-GPU group of h0, then h1's 2 GPUs and a NIC.
    assert [(g["gpus"], g["nics"]) for g in by_host[0]] == [(4, 0)]
    assert sum(g["gpus"] for g in by_host[1]) == 2
    assert sum(g["nics"] for g in by_host[1]) == 1
    assert len(t0["devices"]) == 7

    # Privacy: no name, address or identifier of either host.
    text = json.dumps(t0) + json.dumps(t1)
    for host in hosts:
        for ident in identifiers(host):
            assert ident not in text, ident
    # Another tenant sees nothing of acme's devices, on any host.
    assert topology(e0)["num_hosts"] == 0 and topology(e0)["devices"] == []


def test_the_summary_follows_a_host_that_dies_and_the_tenant_is_told(hosts):
    h0, h1 = hosts
    alloc(h0, "acme", "--gpus", "2", "--locality", "group")
    alloc(h1, "acme", "--gpus", "2", "--locality", "group")
    a0 = vm_socket(h0, "acme")
    assert wait_until(lambda: topology(a0)["num_hosts"] == 2, 10 * LEASE_MS / 1000) is not None
    seen = max((e["seq"] for e in capacity_events(a0)), default=0)

    h1.kill()
    start = time.monotonic()
    took = wait_until(lambda: topology(a0)["num_hosts"] == 1, 10 * LEASE_MS / 1000)
    assert took is not None, "the summary still lists the dead host"
    print(f"summary shrank {time.monotonic() - start:.2f} s after the host died "
          f"(lease {LEASE_MS} ms)")
    assert len(topology(a0)["devices"]) == 2
    # CAPACITY/ALLOCATION_CHANGED tells the tenant to read it again.
    told = lambda: any(e["seq"] > seen and e["kind"] == ALLOCATION_CHANGED
                       for e in capacity_events(a0))
    assert wait_until(told, 5) is not None


ALLOCATION_CHANGED = 4  # SPEC.md 8.3.4


def capacity_events(socket: str) -> list:
    """The CAPACITY events waiting for the tenant, as `hz events` reads them."""
    out = subprocess.run([HZ, "--device", f"vhost-user:{socket}", "--json", "events", "--topics",
                          "capacity", "--wait-ms", "100"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]
