# SPDX-License-Identifier: Apache-2.0
"""The inter-host leg (InterHostGroup on Gloo) across real hosts: one member
per network namespace, rendezvous through Redis in a namespace of its own.

Each member is gloo_group_probe: it forms the group, runs every operation on
data with an exact expected result, and checks it. The failure cases bound
the time to an error by the group's timeout (2 s here); the waits below allow
far more, to catch a hang, not to measure speed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid

import pytest

from cluster_host import last_json
from cluster_net import ClusterNet

PROBE = os.environ.get("HZ_GLOO_GROUP_PROBE", "gloo_group_probe")
TIMEOUT_MS = 2000


def start_members(net, hosts, key, extra=None, count=1 << 16):
    procs = []
    for rank, h in enumerate(hosts):
        argv = [PROBE, "--store", f"{net.address('store')}:6379", "--key", key, "--address",
                net.address(h), "--rank", str(rank), "--size", str(len(hosts)), "--count",
                str(count), "--timeout-ms", str(TIMEOUT_MS)]
        argv += (extra or {}).get(rank, [])
        procs.append(net.popen(h, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True))
    return procs


def result(proc, limit_s=30):
    return last_json(proc, limit_s)


@pytest.mark.parametrize("nhosts", [2, 4])
def test_every_operation_gives_the_exact_result_across_hosts(nhosts):
    hosts = [f"h{i}" for i in range(nhosts)]
    with ClusterNet(["store", *hosts], rate_mbit=1000) as net:
        net.start_redis()
        procs = start_members(net, hosts, f"t/{uuid.uuid4().hex}/")
        for p in procs:
            rc, r = result(p)
            assert rc == 0 and r.get("ok"), r
            print(f"{nhosts} hosts, rank {r['rank']}: ring {r['ring_ms']:.1f} ms, "
                  f"bcube {r['bcube_ms']:.1f} ms, halving-doubling "
                  f"{r['halving_doubling_ms']:.1f} ms for 256 KiB over a 1 Gbit/s tbf link")


def test_a_member_that_never_arrives_fails_the_formation_in_bounded_time():
    with ClusterNet(["store", "h0", "h1", "h2"]) as net:
        net.start_redis()
        key = f"t/{uuid.uuid4().hex}/"
        procs = []
        for rank, h in enumerate(["h0", "h1"]):  # a group of 3; h2 never comes
            procs.append(net.popen(h, [PROBE, "--store", f"{net.address('store')}:6379", "--key",
                                       key, "--address", net.address(h), "--rank", str(rank),
                                       "--size", "3", "--timeout-ms", str(TIMEOUT_MS)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for p in procs:
            rc, r = result(p)
            assert rc == 1 and r["failed"] == "connect", r
            assert "timed out" in r["error"], r


def test_a_hung_member_fails_the_others_next_operation_with_timed_out():
    with ClusterNet(["store", "h0", "h1", "h2"]) as net:
        net.start_redis()
        procs = start_members(net, ["h0", "h1", "h2"], f"t/{uuid.uuid4().hex}/",
                              extra={2: ["--stop-after-connect"]})
        try:
            for p in procs[:2]:
                rc, r = result(p)
                assert rc == 1 and r["failed"] == "allreduce", r
                assert "timed out" in r["error"], r
        finally:
            procs[2].send_signal(signal.SIGKILL)


def test_a_partitioned_member_fails_the_others_in_bounded_time():
    with ClusterNet(["store", "h0", "h1"], rate_mbit=100) as net:
        net.start_redis()
        # A large buffer on a slow link: the operation is still running when
        # the link is cut.
        net_procs = start_members(net, ["h0", "h1"], f"t/{uuid.uuid4().hex}/", count=1 << 24)
        time.sleep(0.5)
        net.cut("h1")
        for p in net_procs:
            rc, r = result(p)
            assert rc == 1, r
            assert "error" in r, r


def test_an_unreachable_store_fails_the_formation_with_its_cause():
    with ClusterNet(["store", "h0", "h1"]) as net:  # no Redis started
        procs = start_members(net, ["h0", "h1"], f"t/{uuid.uuid4().hex}/")
        for p in procs:
            rc, r = result(p)
            assert rc == 1 and r["failed"] == "connect", r
            assert "cluster store" in r["error"], r
