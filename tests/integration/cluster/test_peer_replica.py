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
TIER_LOCAL_DISK, TIER_PEER_HOST, DURABLE, FAILED = 1, 2, 0, 1



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


def restart(host) -> None:
    """An operator's stop and start of the host's daemon, same state."""
    assert host.terminate() == 0
    if os.path.exists(host.control):
        os.unlink(host.control)  # start() waits for the new one
    host.start()


def test_a_restarted_source_keeps_its_replicas_and_resumes_the_copy_it_lacked(acme_and_eve):
    """h0 knows after a restart which checkpoints have their copy on h1 (they
    list PEER_HOST), and the copy that could not be made (h1 was down) is
    made once h1 is back, without the tenant saving again."""
    h0, h1 = acme_and_eve
    a0 = vm_socket(h0, "acme")
    work = tempfile.mkdtemp(prefix="hz-resume-")
    states = []
    for step in (1, 2):
        states.append(os.path.join(work, f"state{step}"))
        with open(states[-1], "wb") as f:
            f.write(os.urandom(200000 + step))
    [r] = hz(a0, "checkpoint", "policy", "--stream", "5", "--tier", "peer_host")
    assert r.get("tier") == "peer_host", r
    assert hz(a0, "checkpoint", "save", "--stream", "5", "--step", "1", states[0])[0].get("step") == 1
    assert wait_until(lambda: (DURABLE, 5, TIER_PEER_HOST, 1, 0) in checkpoint_events(a0), 60)

    # h1 leaves: step 2 is durable on h0's disk only.
    assert h1.terminate() == 0
    assert wait_until(lambda: h0.hosts() == ["h0"], 10 * LEASE_MS / 1000) is not None
    assert hz(a0, "checkpoint", "save", "--stream", "5", "--step", "2", states[1])[0].get("step") == 2
    assert wait_until(lambda: any(e[0] == FAILED and e[3] == 2 for e in checkpoint_events(a0)), 60)

    tiers = lambda: [(c["step"], c["tier"]) for c in
                     hz(a0, "checkpoint", "list", "--stream", "5")[0].get("checkpoints", [])]
    restart(h0)
    assert tiers() == [(1, TIER_PEER_HOST), (2, TIER_LOCAL_DISK)]

    if os.path.exists(h1.control):
        os.unlink(h1.control)
    h1.start()
    assert wait_until(lambda: (DURABLE, 5, TIER_PEER_HOST, 2, 0) in checkpoint_events(a0), 60), \
        h0.log()[-3000:]
    assert tiers() == [(1, TIER_PEER_HOST), (2, TIER_PEER_HOST)]
    assert "event=ckpt_replica_resumed tenant=acme stream=5 step=2" in h0.log()
    assert "event=ckpt_replica_resumed tenant=acme stream=5 step=1" not in h0.log()
    a1 = vm_socket(h1, "acme")
    restored = os.path.join(work, "restored")
    assert hz(a1, "checkpoint", "restore", "--stream", "5", "--step", "2", restored)[0].get("step") == 2
    with open(states[1], "rb") as a, open(restored, "rb") as b:
        assert a.read() == b.read()
