# SPDX-License-Identifier: Apache-2.0
"""Cluster membership across real hosts: one harmonaized per network namespace,
Redis in a namespace of its own, every link through a bridge.

The lease is 1 s here: a host that stops renewing is dropped by the others
about 1.3 s (a lease and a round) later. The waits below allow ten times that:
they bound a hang, they do not measure speed.
"""

from __future__ import annotations

import subprocess

import pytest

from cluster_host import ClusterHost, wait_until
from cluster_net import ClusterNet

LEASE_MS = 1000
LIMIT_S = 10 * LEASE_MS / 1000


@pytest.fixture
def cluster():
    """Three hosts and a running store; yields (net, hosts, redis process)."""
    with ClusterNet(["store", "h0", "h1", "h2"]) as net:
        redis = net.start_redis()
        hosts = [ClusterHost(net, m, LEASE_MS) for m in ("h0", "h1", "h2")]
        try:
            for h in hosts:
                h.start()
            yield net, hosts, redis
        finally:
            for h in hosts:
                h.stop()


def all_see(hosts, names) -> bool:
    return all(h.hosts() == names for h in hosts)


def test_hosts_see_each_other_with_data_addresses_and_leases(cluster):
    net, hosts, _ = cluster
    assert wait_until(lambda: all_see(hosts, ["h0", "h1", "h2"]), LIMIT_S) is not None
    st = hosts[0].cluster()
    assert st["mode"] == "cluster"
    assert st["state"] == "member"
    assert st["host"] == "h0"
    assert st["store"] == f"{net.address('store')}:6379"
    by_name = {h["name"]: h for h in st["hosts"]}
    assert by_name["h0"]["self"] and not by_name["h1"]["self"]
    assert by_name["h2"]["data_address"] == net.address("h2")
    assert 0 < by_name["h1"]["lease_remaining_ms"] <= LEASE_MS
    # The human view names every host.
    text = subprocess.run([hosts[1].hzctl_path, "--socket", hosts[1].control, "cluster", "status"],
                          capture_output=True, text=True, timeout=30).stdout
    assert "h1 (data 10.77.0.3)" in text and "(this host)" in text
    for name in ("h0", "h2"):
        assert name in text


def test_a_killed_host_is_dropped_by_every_other_host_in_bounded_time(cluster):
    _, hosts, _ = cluster
    assert wait_until(lambda: all_see(hosts, ["h0", "h1", "h2"]), LIMIT_S) is not None
    hosts[2].kill()
    took = wait_until(lambda: all_see(hosts[:2], ["h0", "h1"]), LIMIT_S)
    assert took is not None, "a dead host is still listed"
    print(f"killed host dropped by both others after {took:.2f} s (lease {LEASE_MS} ms)")
    assert hosts[0].cluster()["hosts_left"] == 1


def test_a_host_that_stops_leaves_at_once(cluster):
    _, hosts, _ = cluster
    assert wait_until(lambda: all_see(hosts, ["h0", "h1", "h2"]), LIMIT_S) is not None
    assert hosts[1].terminate() == 0
    assert "event=cluster_left host=h1" in hosts[1].log()
    assert wait_until(lambda: all_see([hosts[0], hosts[2]], ["h0", "h2"]), LIMIT_S) is not None


def test_a_partitioned_host_is_dropped_isolates_itself_and_rejoins_when_healed(cluster):
    net, hosts, _ = cluster
    assert wait_until(lambda: all_see(hosts, ["h0", "h1", "h2"]), LIMIT_S) is not None
    net.cut("h2")
    assert wait_until(lambda: all_see(hosts[:2], ["h0", "h1"]), LIMIT_S) is not None
    # The cut-off host knows: it lost the store for a whole lease, so it
    # drops the others as they dropped it. Its operator still gets answers.
    assert wait_until(lambda: hosts[2].cluster()["state"] == "isolated", LIMIT_S) is not None
    st = hosts[2].cluster()
    assert st["hosts"] == []
    assert "cluster store" in st["detail"]
    net.heal("h2")
    assert wait_until(lambda: all_see(hosts, ["h0", "h1", "h2"]), LIMIT_S) is not None
    assert hosts[2].cluster()["state"] == "member"


def test_a_store_restart_is_survived_and_every_host_registers_again(cluster):
    net, hosts, redis = cluster
    assert wait_until(lambda: all_see(hosts, ["h0", "h1", "h2"]), LIMIT_S) is not None
    redis.kill()
    redis.wait(10)
    assert wait_until(lambda: all(h.cluster()["state"] == "isolated" for h in hosts),
                      LIMIT_S) is not None
    for h in hosts:
        assert h.proc.poll() is None, f"{h.name} exited when the store went away:\n{h.log()}"
    net.start_redis()  # empty: nothing survived in it
    assert wait_until(lambda: all_see(hosts, ["h0", "h1", "h2"]), LIMIT_S) is not None
    assert all(h.cluster()["state"] == "member" for h in hosts)


def test_a_second_host_under_a_taken_name_refuses_to_start():
    with ClusterNet(["store", "h0", "h1"]) as net:
        net.start_redis()
        first = ClusterHost(net, "h0", LEASE_MS)
        impostor = ClusterHost(net, "h1", LEASE_MS, host_name="h0")
        try:
            first.start()
            try:
                impostor.start()  # its control socket may appear before it gives up
            except RuntimeError:
                pass
            assert impostor.wait_exit() != 0
            assert "host name h0 is held by another live harmonaized" in impostor.log()
            assert first.hosts() == ["h0"]
            assert first.cluster()["hosts"][0]["data_address"] == net.address("h0")
        finally:
            first.stop()
            impostor.stop()


def test_a_host_whose_store_is_unreachable_at_start_serves_and_joins_later():
    with ClusterNet(["store", "h0"]) as net:
        host = ClusterHost(net, "h0", LEASE_MS)
        try:
            host.start()
            assert host.cluster()["state"] in ("isolated", "store_unreachable")
            host.hzctl("tenant", "create", "acme")  # the host serves meanwhile
            net.start_redis()
            assert wait_until(lambda: host.cluster()["state"] == "member", LIMIT_S) is not None
            assert host.hosts() == ["h0"]
        finally:
            host.stop()
