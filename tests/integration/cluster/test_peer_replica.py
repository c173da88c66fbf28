# SPDX-License-Identifier: Apache-2.0
"""Checkpoints of the peer-host tier (SPEC.md 7.5) across two hosts.

Two harmonaized, each in its own network namespace, with Redis in a third.
A container tenant on h0 (`hz` over virtio-user) sets a PEER_HOST policy and
saves; DURABLE at tier PEER_HOST reaches its event log once the replica is
committed on h1. Then h0's daemon is SIGKILLed and its membership record
expires, and a device of the same tenant on h1 lists the checkpoint and
restores it bit-exact; another tenant on h1 can neither list nor restore it.
"""

from __future__ import annotations

import os
import tempfile

from cluster_host import wait_until
# acme_and_eve: the two hosts with both tenants (a fixture).
from cluster_tenants import LEASE_MS, acme_and_eve, checkpoint_events, hz, vm_socket  # noqa: F401

# include/harmonaize/hz.h; SPEC.md 7.5 and 8.3.6
HZ_ENOENT, HZ_EAGAIN = -4, -7
TIER_PEER_HOST, DURABLE, FAILED = 2, 0, 1



def test_a_replica_outlives_its_host_and_stays_the_tenants(acme_and_eve):
    h0, h1 = acme_and_eve
    a0, a1, e1 = vm_socket(h0, "acme"), vm_socket(h1, "acme"), vm_socket(h1, "eve")
    work = tempfile.mkdtemp(prefix="hz-replica-")
    state = os.path.join(work, "state")
    with open(state, "wb") as f:
        f.write(os.urandom(9 << 20 | 12345))  # three chunks, the last one partial

    [r] = hz(a0, "checkpoint", "policy", "--stream", "1", "--tier", "peer_host")
    assert r.get("tier") == "peer_host", r
    [r] = hz(a0, "checkpoint", "save", "--stream", "1", "--step", "7", state)
    assert r.get("step") == 7, r

    durable = (DURABLE, 1, TIER_PEER_HOST, 7, 0)
    assert wait_until(lambda: durable in checkpoint_events(a0), 60) is not None, \
        checkpoint_events(a0)
    assert not [e for e in checkpoint_events(a0) if e[0] == FAILED]
    [listed] = hz(a0, "checkpoint", "list", "--stream", "1")
    assert [(c["step"], c["state"], c["tier"]) for c in listed["checkpoints"]] == \
        [(7, "durable", TIER_PEER_HOST)], listed
    assert "event=ckpt_replica_received" in h1.log()

    # h0 dies without leaving; its record expires.
    h0.kill()
    assert wait_until(lambda: h1.hosts() == ["h1"], 10 * LEASE_MS / 1000) is not None

    [listed] = hz(a1, "checkpoint", "list", "--stream", "1")
    assert [(c["step"], c["state"], c["bytes"]) for c in listed["checkpoints"]] == \
        [(7, "durable", os.path.getsize(state))], listed
    restored = os.path.join(work, "restored")
    [r] = hz(a1, "checkpoint", "restore", "--stream", "1", "--step", "7", restored)
    assert r.get("step") == 7, r
    with open(state, "rb") as a, open(restored, "rb") as b:
        assert a.read() == b.read()

    # Another tenant on the replica's host sees nothing of it.
    [r] = hz(e1, "checkpoint", "list", "--stream", "1")
    assert r.get("code") == HZ_ENOENT, r
    [r] = hz(e1, "checkpoint", "restore", "--stream", "1", "--step", "7",
             os.path.join(work, "stolen"))
    assert r.get("code") == HZ_ENOENT, r
    assert not os.path.exists(os.path.join(work, "stolen"))

    # With no other live host, the tier cannot be asked for now.
    [r] = hz(a1, "checkpoint", "policy", "--stream", "2", "--tier", "peer_host")
    assert r.get("code") == HZ_EAGAIN, r


def test_a_delete_takes_the_replica_on_the_other_host(acme_and_eve):
    h0, h1 = acme_and_eve
    a0, a1 = vm_socket(h0, "acme"), vm_socket(h1, "acme")
    state = os.path.join(tempfile.mkdtemp(prefix="hz-forget-"), "state")
    with open(state, "wb") as f:
        f.write(os.urandom(1 << 20))
    [r] = hz(a0, "checkpoint", "policy", "--stream", "4", "--tier", "peer_host")
    assert r.get("tier") == "peer_host", r
    [r] = hz(a0, "checkpoint", "save", "--stream", "4", "--step", "2", state)
    assert r.get("step") == 2, r
    durable = (DURABLE, 4, TIER_PEER_HOST, 2, 0)
    assert wait_until(lambda: durable in checkpoint_events(a0), 60) is not None
    steps = lambda sock: [c["step"] for c in hz(sock, "checkpoint", "list", "--stream", "4")[0].get(
        "checkpoints", [])]
    assert steps(a1) == [2]  # the replica, on h1
    [r] = hz(a0, "checkpoint", "delete", "--stream", "4", "--step", "2")
    assert r.get("deleted"), r
    assert steps(a0) == []
    assert wait_until(lambda: steps(a1) == [], 10) is not None, steps(a1)
    assert "event=ckpt_replica_forgotten" in h1.log()


def test_a_step_the_replica_host_holds_is_refused_and_the_tenant_hears_failed(acme_and_eve):
    """Stream ids are tenant-wide: h1 already holds (stream 3, step 5) of acme,
    so h0's replica of its own step 5 is refused there; acme's log on h0 gets
    FAILED (status EEXIST) and the checkpoint stays durable on h0's disk."""
    h0, h1 = acme_and_eve
    a0, a1 = vm_socket(h0, "acme"), vm_socket(h1, "acme")
    work = tempfile.mkdtemp(prefix="hz-replica-")
    state = os.path.join(work, "state")
    with open(state, "wb") as f:
        f.write(os.urandom(100000))
    hz(a1, "checkpoint", "policy", "--stream", "3", "--tier", "local_disk")
    assert hz(a1, "checkpoint", "save", "--stream", "3", "--step", "5", state)[0].get("step") == 5
    hz(a0, "checkpoint", "policy", "--stream", "3", "--tier", "peer_host")
    assert hz(a0, "checkpoint", "save", "--stream", "3", "--step", "5", state)[0].get("step") == 5
    failed = (FAILED, 3, TIER_PEER_HOST, 5, 5)  # HZ_S_EEXIST
    assert wait_until(lambda: failed in checkpoint_events(a0), 60) is not None, \
        checkpoint_events(a0)
    [listed] = hz(a0, "checkpoint", "list", "--stream", "3")
    assert [(c["step"], c["state"], c["tier"]) for c in listed["checkpoints"]] == \
        [(5, "durable", 1)], listed  # held on h0's local disk
