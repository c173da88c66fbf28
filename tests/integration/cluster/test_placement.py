# SPDX-License-Identifier: Apache-2.0
"""Placement across the hosts of a cluster, and commands run on another host.

Three hosts, each a harmonaized in its own network namespace whose scheduler
sees a fixture machine: h0 and h2 a 4-GPU workstation (ws4), h1 an 8-GPU
HGX (hgx8). The operator asks h0 for more GPUs than h0 has: each allocation
goes to as few hosts as can hold it, the best fit first, placed by each host
itself through the cluster store; the tenant's topology summary covers every
part; a spread allocation is released as one. A maintenance of h1,
scheduled from h0, is kept by h1 and cordons it: the next spread avoids h1.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from cluster_host import ClusterHost, wait_until
from cluster_net import ClusterNet

HZ = os.environ.get("HZ_CLI", "hz")
LEASE_MS = 1000


def hzctl(host: ClusterHost, *args: str) -> dict:
    """hzctl's JSON answer, refusals included."""
    out = subprocess.run([host.hzctl_path, "--socket", host.control, "--json", *args],
                         capture_output=True, text=True, timeout=60).stdout
    return json.loads(out)


def ok(answer: dict):
    assert answer.get("ok"), answer
    return answer["result"]


def acme_gpus(host: ClusterHost) -> int:
    """GPUs tenant acme holds on the host, as its scheduler lists them."""
    return sum(a["gpus"] for a in ok(hzctl(host, "allocations")) if a["tenant"] == "acme")


@pytest.fixture
def hosts():
    with ClusterNet(["store", "h0", "h1", "h2"], rate_mbit=1000) as net:
        net.start_redis()
        members = [ClusterHost(net, "h0", LEASE_MS, fixture="ws4"),
                   ClusterHost(net, "h1", LEASE_MS, fixture="hgx8"),
                   ClusterHost(net, "h2", LEASE_MS, fixture="ws4")]
        try:
            for h in members:
                h.start()
                assert h.hzctl("tenant", "create", "acme")["ok"]
            assert wait_until(lambda: all(len(h.hosts()) == 3 for h in members), 10)
            yield members
        finally:
            for h in members:
                h.stop()


def placed(answer: dict) -> dict:
    """{host: GPUs} of a spread allocation's answer."""
    parts = ok(answer)["parts"]
    assert all(len(p["devices"]) == p["gpus"] for p in parts), parts
    return {p["host"]: p["gpus"] for p in parts}


def spread(host: ClusterHost, gpus: int, avoid: str = "") -> dict:
    """An allocation of acme's from `host` that needs other hosts. Each host's
    record reaches the others within a membership round; a plan made from a
    record older than the host's last change fails whole (that host refuses
    its part), so it is asked again until the records are current."""
    answer = {}
    for _ in range(50):
        answer = hzctl(host, "alloc", "--tenant", "acme", "--gpus", str(gpus))
        if answer.get("ok") and avoid not in placed(answer):
            return answer
        if answer.get("ok"):  # placed from a record older than the cordon
            ok(hzctl(host, "release", "--spread", str(answer["result"]["spread"])))
        else:
            # kLimit: a host took devices since its record; kBusy: it was cordoned.
            assert answer["status"] in (6, 17), answer
        wait_until(lambda: False, 0.2)
    return answer


def test_what_one_host_cannot_hold_goes_to_as_few_hosts_as_can(hosts):
    h0, h1, h2 = hosts
    # 6 GPUs: not on h0 (4), all on h1 (8), not split.
    first = spread(h0, 6)
    assert placed(first) == {"h1": 6}, first
    assert [acme_gpus(h) for h in hosts] == [0, 6, 0]
    # --this-host keeps it here: refused, nothing placed anywhere.
    here = hzctl(h0, "alloc", "--tenant", "acme", "--gpus", "6", "--this-host")
    assert not here["ok"] and here["status"] == 6, here  # kLimit
    # Free now: h0 4, h1 2, h2 4. Another 6 needs two hosts: h0's 4 (this
    # host first among equals) and the best fit for the other 2, h1. A
    # failed attempt (a stale record) left nothing anywhere.
    second = spread(h0, 6)
    assert placed(second) == {"h0": 4, "h1": 2}, second
    assert [acme_gpus(h) for h in hosts] == [4, 8, 0]

    # The tenant's summary on h0 covers every part: 4 + 6 + 2 GPUs, 2 hosts.
    sock = os.path.join(h0.dir, "acme.sock")
    ok(hzctl(h0, "vm", "bind", "--tenant", "acme", "--socket", sock))
    topology = lambda: json.loads(subprocess.run(
        [HZ, "--device", f"vhost-user:{sock}", "--json", "topology"],
        capture_output=True, text=True, timeout=30, check=True).stdout)
    assert wait_until(lambda: len(topology()["devices"]) == 12, 10) is not None, topology()
    assert topology()["num_hosts"] == 2

    # Released as one, on both hosts; the other spread stays.
    assert [len(s["parts"]) for s in ok(hzctl(h0, "allocations", "--spread"))] == [1, 2]
    ok(hzctl(h0, "release", "--spread", str(ok(second)["spread"])))
    assert [acme_gpus(h) for h in hosts] == [0, 6, 0]
    assert [s["spread"] for s in ok(hzctl(h0, "allocations", "--spread"))] == \
        [ok(first)["spread"]]


def test_a_maintenance_scheduled_from_another_host_cordons_its_host(hosts):
    h0, h1, h2 = hosts
    ok(hzctl(h1, "alloc", "--tenant", "acme", "--gpus", "6"))  # h1 keeps 2 free
    # Scheduled on h0 for h1: h1 keeps it and tells its tenants (acme has
    # devices there); h0 has none of its own.
    m = ok(hzctl(h0, "maintenance", "schedule", "--host", "h1", "--at", "+0",
                 "--duration", "600"))
    assert m["told"] == 1, m
    assert ok(hzctl(h0, "maintenance", "status"))["maintenances"] == []
    status = lambda: ok(hzctl(h0, "maintenance", "status", "--host", "h1"))
    assert status()["host"] == "h1" and len(status()["maintenances"]) == 1, status()
    on_h1 = lambda: status()["maintenances"]
    assert wait_until(lambda: on_h1()[0]["state"] == "started", 15) is not None, on_h1()
    # Once its record says cordoned, 6 GPUs from h0 go to h0 and h2,
    # although h1's 2 free GPUs fit best.
    assert placed(spread(h0, 6, avoid="h1")) == {"h0": 4, "h2": 2}
    assert acme_gpus(h1) == 6
    # Commands that are not the placement's or the maintenance's stay home.
    refused = hzctl(h0, "--on-host", "h1", "tenant", "list")
    assert not refused["ok"] and "only on the host" in refused["error"], refused
    # A host that is not in the cluster: refused at once.
    gone = hzctl(h0, "--on-host", "h9", "maintenance", "status")
    assert not gone["ok"] and "h9" in gone["error"], gone
