# SPDX-License-Identifier: Apache-2.0
"""Communicators across hosts through the real device: container tenants
(cluster_rank, the public C API over virtio-user) on the VM sockets of one
harmonaized per network namespace, with Redis in a namespace of its own and
every link a tbf-shaped veth pair.

A rank process runs beside its host's daemon and reaches it through the VM
socket (a Unix socket), as a VM's QEMU would; only the hosts' traffic crosses
the namespaces.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time

import pytest

from cluster_host import ClusterHost, last_json, wait_until
from cluster_net import ClusterNet

RANK = os.environ.get("HZ_CLUSTER_RANK", "cluster_rank")
TIMEOUT_MS = 3000
# include/harmonaize/hz.h
HZ_EPERM, HZ_ETIMEDOUT, HZ_EABORTED, HZ_EIO = -3, -8, -9, -12
HZ = os.environ.get("HZ_CLI", "hz")
FABRIC = 0  # CONGESTION kind, SPEC.md 8.3.5


class Cluster:
    def __init__(self, net, hosts, redis):
        self.net = net
        self.hosts = hosts
        self.redis = redis
        self.sockets = {}
        self.dir = tempfile.mkdtemp(prefix="hz-xhost-")

    def socket(self, host_index: int, tenant: str = "acme") -> str:
        """A new VM socket of tenant on that host."""
        h = self.hosts[host_index]
        n = self.sockets.get(h.name, 0)
        self.sockets[h.name] = n + 1
        path = os.path.join(h.dir, f"{tenant}-vm{n}.sock")
        h.hzctl("vm", "bind", "--tenant", tenant, "--socket", path)
        return path

    def ranks(self, placement, uid_file=None, tenant="acme", extra=(), timeout_ms=TIMEOUT_MS):
        """One rank process per entry of placement (the host index of each rank)."""
        uid_file = uid_file or os.path.join(self.dir, f"uid-{time.monotonic_ns()}")
        procs = []
        for rank, host in enumerate(placement):
            argv = [RANK, "--socket", self.socket(host, tenant), "--uid-file", uid_file,
                    "--rank", str(rank), "--nranks", str(len(placement)), "--timeout-ms",
                    str(timeout_ms), *extra]
            if rank == 0:
                argv.append("--create-uid")
            if len(set(placement)) > 1:
                argv.append("--cross-host")
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        return procs


def result(proc, limit_s=120):
    return last_json(proc, limit_s)


@pytest.fixture
def cluster():
    names = ["h0", "h1", "h2"]
    with ClusterNet(["store", *names], rate_mbit=1000) as net:
        redis = net.start_redis()
        hosts = [ClusterHost(net, m, lease_ms=1000) for m in names]
        try:
            for h in hosts:
                h.start()
                h.hzctl("tenant", "create", "acme")
            assert wait_until(lambda: all(len(h.hosts()) == 3 for h in hosts), 10)
            yield Cluster(net, hosts, redis)
        finally:
            for h in hosts:
                h.stop()


@pytest.mark.parametrize("placement,flags",
                         [([0, 0, 1, 1], []), ([0, 0, 1, 1], ["--hierarchical"]),
                          ([0, 1, 0, 1], []), ([0, 1, 2], ["--hierarchical"]), ([1, 1], []),
                          ([0, 0, 1], ["--lossy"])],
                         ids=["2x2", "2x2-hierarchical", "interleaved", "3x1-hierarchical",
                              "one-host", "2+1-lossy"])
def test_every_collective_is_exact_on_every_placement(cluster, placement, flags):
    procs = cluster.ranks(placement, extra=flags)
    results = [result(p) for p in procs]
    for rc, r in results:
        assert rc == 0 and r.get("ok"), r
        assert r["checked"] == 3 * 5 * 10  # sizes x reductions x types (fp16, bf16 too)
    if len(set(placement)) > 1:
        log = cluster.hosts[placement[0]].log()
        assert "event=cross_host_comm_formed" in log
        # The leg's cost was measured when the communicator formed, and the
        # inter-host algorithm is chosen per operation from it and counted:
        # every host made the same choices (else Gloo would have hung).
        assert log.count("event=cross_host_leg_model") >= 3  # ring, bcube, halving-doubling
        names = ["cross_host_ring", "cross_host_bcube", "cross_host_halving_doubling"]
        chosen = []
        for h in sorted(set(placement)):
            algos = cluster.hosts[h].hzctl("counters")["result"]["engine"]["algorithms"]
            chosen.append([algos[n] for n in names])
            assert (algos["cross_host_lossy_bf16"] > 0) == ("--lossy" in flags), algos
        assert sum(chosen[0]) > 0  # integers are always reduced hierarchically
        assert all(c == chosen[0] for c in chosen), chosen


def test_a_send_nobody_receives_times_out_within_the_timeout(cluster):
    """Every placement above also runs send and recv across hosts (ring
    shifts posted recv-first, small and of several MiB, a count mismatch);
    here rank 0's send to a rank that never receives completes with
    ETIMEDOUT after the communicator's timeout."""
    procs = cluster.ranks([0, 1], extra=["--unanswered-send"], timeout_ms=2000)
    results = [result(p) for p in procs]
    for rc, r in results:
        assert rc == 0 and r.get("ok"), r
    print(f"the unanswered send completed after {results[0][1]['unanswered_ms']:.0f} ms "
          "(timeout 2000 ms)")
    assert "event=cross_host_p2p_failed" in cluster.hosts[0].log()


def test_another_tenant_cannot_join_with_the_uid_on_any_host(cluster):
    cluster.hosts[1].hzctl("tenant", "create", "eve")
    uid_file = os.path.join(cluster.dir, "uid-scope")
    owner = cluster.ranks([0, 0], uid_file=uid_file)
    # eve, on another host, with acme's uid: refused there too.
    assert wait_until(lambda: os.path.exists(uid_file), 30) is not None
    eve = subprocess.Popen([RANK, "--socket", cluster.socket(1, "eve"), "--uid-file", uid_file,
                            "--rank", "1", "--nranks", "2", "--timeout-ms", str(TIMEOUT_MS)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rc, r = result(eve)
    assert rc == 1 and r["failed"] == "init" and r["code"] == HZ_EPERM, r
    for p in owner:
        rc, r = result(p)
        assert rc == 0 and r.get("ok"), r


def test_a_host_that_dies_mid_collective_fails_every_remote_rank_in_bounded_time(cluster):
    procs = cluster.ranks([0, 1], extra=["--loop", "--count", str(1 << 18)])
    # Wait until both ranks passed their checks and loop.
    first = procs[0].stdout.readline()
    assert json.loads(first).get("ok"), first
    procs[1].stdout.readline()
    time.sleep(0.3)
    killed_at = time.monotonic()
    cluster.hosts[1].kill()
    rc, r = result(procs[0], limit_s=60)
    took = time.monotonic() - killed_at
    assert rc == 1 and r["failed"] == "loop", r
    assert r["code"] in (HZ_EIO, HZ_ETIMEDOUT, HZ_EABORTED), r
    print(f"the surviving rank failed {took:.2f} s after its peer's host died: {r['error']}")
    procs[1].kill()
    procs[1].wait()


def test_a_partition_aborts_the_communicator_once_membership_drops_the_host(cluster):
    """With a 30 s operation timeout, Gloo alone would wait 30 s for the cut
    host; membership drops it after about a lease (1 s) and a round, and
    the communicator's ranks are answered then."""
    procs = cluster.ranks([0, 1], extra=["--loop", "--count", str(1 << 18)], timeout_ms=30000)
    for p in procs:
        assert json.loads(p.stdout.readline()).get("ok")
    time.sleep(0.3)
    cut_at = time.monotonic()
    cluster.net.cut("h1")
    try:
        rc, r = result(procs[0], limit_s=60)
        took = time.monotonic() - cut_at
        assert rc == 1 and r["failed"] == "loop" and r["code"] == HZ_EABORTED, r
        print(f"the rank on h0 was answered {took:.2f} s after the partition (lease 1 s)")
        assert took < 15, "the abort waited for the operation timeout, not for membership"
        assert "left the cluster" in cluster.hosts[0].log()
    finally:
        cluster.net.heal("h1")
        procs[1].kill()
        procs[1].wait()


def test_a_store_outage_aborts_communicators_refuses_inits_and_heals(cluster):
    procs = cluster.ranks([0, 1], extra=["--loop", "--count", str(1 << 16)], timeout_ms=30000)
    for p in procs:
        assert json.loads(p.stdout.readline()).get("ok")
    # The operator sees the communicator on both of its hosts.
    for h in cluster.hosts[:2]:
        comms = h.cluster()["communicators"]
        assert [(c["tenant"], c["hosts"], c["state"]) for c in comms] == \
            [("acme", ["h0", "h1"], "active")], comms
        # With the leg's measured cost, the same on both hosts: the links are
        # shaped to 1 Gbit/s (plus tbf's burst), far below what the machine
        # moves unshaped, so the rates show the links were what it measured.
        model = comms[0]["leg_model"]
        assert sorted(model) == ["bcube", "halving_doubling", "ring"], model
        assert all(0 < m["mbit_s"] < 2000 for m in model.values()), model
    assert cluster.hosts[0].cluster()["communicators"][0]["leg_model"] == \
        cluster.hosts[1].cluster()["communicators"][0]["leg_model"]
    cluster.redis.kill()
    cluster.redis.wait()
    lost_at = time.monotonic()
    try:
        # Each host aborts once it has been without the store for a lease;
        # a host that has not yet may see its peer's connection close first.
        codes = []
        for p in procs:
            rc, r = result(p, limit_s=60)
            assert rc == 1 and r["failed"] == "loop" and r["code"] in (HZ_EABORTED, HZ_EIO), r
            codes.append(r["code"])
        assert HZ_EABORTED in codes, codes
        took = time.monotonic() - lost_at
        print(f"both ranks answered {took:.2f} s after the store went away (lease 1 s)")
        assert took < 15, "the abort waited for the operation timeout"
        # Without the store, a new communicator cannot form; the cause is given.
        for p in cluster.ranks([0, 1]):
            rc, r = result(p)
            assert rc == 1 and r["failed"] == "init" and r["code"] == HZ_EIO, r
    finally:
        cluster.redis = cluster.net.start_redis()
    assert wait_until(lambda: all(len(h.hosts()) == 3 for h in cluster.hosts), 20)
    for p in cluster.ranks([0, 1]):
        rc, r = result(p)
        assert rc == 0 and r.get("ok"), r


def test_a_slowed_link_is_heard_as_fabric_congestion_by_its_tenant_only(cluster):
    """The data path between h0 and h1 drops to a twentieth of the rate the
    communicator measured when it formed; its legs now take far longer than
    their calibration, and the tenant hears CONGESTION/FABRIC (SPEC.md
    8.3.5) on h0 within a window and a poll; another tenant on h0 does not."""
    # Hierarchical all-reduces: their legs are what the links were calibrated
    # with. A generous operation timeout: the slowed legs take longer.
    procs = cluster.ranks([0, 1], extra=["--loop", "--hierarchical", "--count", str(1 << 18)],
                          timeout_ms=30000)
    for p in procs:
        first = p.stdout.readline()
        assert json.loads(first).get("ok"), first
    cluster.hosts[0].hzctl("tenant", "create", "eve")
    acme, eve = cluster.socket(0), cluster.socket(0, "eve")
    for member in ("h0", "h1"):
        cluster.net.slow_data_path(member, 50)

    def fabric(socket):
        out = subprocess.run([HZ, "--device", f"vhost-user:{socket}", "--json", "events",
                              "--topics", "congestion", "--wait-ms", "500"],
                             capture_output=True, text=True, timeout=30).stdout
        events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        # Only the congestion topic was asked for.
        return [bytes.fromhex(e["payload"])[0] for e in events if e.get("kind") == FABRIC]

    levels = []
    heard = wait_until(lambda: bool(levels.extend(fabric(acme)) or levels), 60)
    assert heard is not None, ([result(p, 5) for p in procs if p.poll() is not None],
                               cluster.hosts[0].hzctl("energy", "status"))
    assert max(levels) >= 1, levels  # light or worse
    status = cluster.hosts[0].hzctl("energy", "status")["result"]["congestion"]["fabric"]
    assert status["waiting_ms"] > 0, status
    assert fabric(eve) == []
    for p in procs:
        p.kill()
        p.wait()
