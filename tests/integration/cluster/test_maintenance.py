# SPDX-License-Identifier: Apache-2.0
"""A maintenance of one host of a cluster, and the job saved from it
(SPEC.md 8.3.2, 7.5.6, 7.6.2).

Tenant acme has a VM on h0 and one on h1; tenant eve only one on h1. The
operator schedules a maintenance of h0: exactly acme's device on h0 hears of
it, and no device on h1. acme's rank on h0 saves its state to the peer-host
tier and approves; with the only tenant told approving, the maintenance
starts at once. Then h0 dies, and acme's rank on h1 restores the state from
the replica, bit-exact; eve can neither list nor restore it.
"""

from __future__ import annotations

import os
import tempfile

from cluster_host import ClusterHost, wait_until
# acme_and_eve: the two hosts with both tenants (a fixture).
from cluster_tenants import LEASE_MS, acme_and_eve, checkpoint_events, hz, vm_socket  # noqa: F401

HZ_ENOENT = -4  # include/harmonaize/hz.h
TIER_PEER_HOST, DURABLE = 2, 0  # SPEC.md 7.5, 8.3.6
APPROVABLE = 1  # HZ_EVENT_F_APPROVABLE
SCHEDULED, STARTED = 0, 1  # MAINTENANCE kinds


def notices(socket: str, *extra: str) -> list:
    return hz(socket, "events", "--topics", "maintenance", "--wait-ms", "300", *extra)


def first(fn, limit_s: float):
    """fn()'s first true value within limit_s, or None."""
    found = []
    wait_until(lambda: bool(found.append(fn()) or found[-1]), limit_s)
    return found[-1] if found and found[-1] else None


def maintenance(host: ClusterHost) -> dict:
    answer = host.hzctl("maintenance", "status")
    assert answer.get("ok"), answer
    [m] = answer["result"]["maintenances"]
    return m



def test_a_maintenance_reaches_only_its_host_and_the_job_restores_elsewhere(acme_and_eve):
    h0, h1 = acme_and_eve
    a0, a1, e1 = vm_socket(h0, "acme"), vm_socket(h1, "acme"), vm_socket(h1, "eve")
    work = tempfile.mkdtemp(prefix="hz-maintenance-")
    state = os.path.join(work, "state")
    with open(state, "wb") as f:
        f.write(os.urandom(5 << 20 | 777))
    [r] = hz(a0, "checkpoint", "policy", "--stream", "1", "--tier", "peer_host")
    assert r.get("tier") == "peer_host", r

    answer = h0.hzctl("maintenance", "schedule", "--host", "h0", "--at", "+600",
                      "--duration", "120")
    assert answer.get("ok"), answer
    assert answer["result"]["told"] == 1

    # Exactly acme's device on h0 hears of it.
    [notice] = first(lambda: notices(a0), 10)
    assert notice["kind"] == SCHEDULED and notice["flags"] & APPROVABLE, notice
    assert notices(a1) == [] and notices(e1) == []
    m = maintenance(h0)
    assert [t["tenant"] for t in m["told"]] == ["acme"] and m["state"] == "scheduled", m
    # h1 has no maintenance of its own.
    assert h1.hzctl("maintenance", "status")["result"]["maintenances"] == []

    # The rank saves to the peer tier, then approves; the maintenance starts.
    [r] = hz(a0, "checkpoint", "save", "--stream", "1", "--step", "3", state)
    assert r.get("step") == 3, r
    durable = (DURABLE, 1, TIER_PEER_HOST, 3, 0)
    assert wait_until(lambda: durable in checkpoint_events(a0), 60) is not None
    # The notice again (not acknowledged yet), approved; then, at once, STARTED.
    seen = notices(a0, "--approve") + notices(a0)
    assert seen[0]["seq"] == notice["seq"], seen
    assert STARTED in [e["kind"] for e in seen[1:]], seen
    m = first(lambda: (lambda m: m if m["state"] == "started" else None)(maintenance(h0)), 10)
    assert m is not None, maintenance(h0)
    assert m["started_early"] and m["told"][0]["approved_s"] > 0, m
    assert m["told"][0]["checkpoints"] >= 1, m

    # h0 goes down for good; acme's rank on h1 restores from the replica.
    h0.kill()
    assert wait_until(lambda: h1.hosts() == ["h1"], 10 * LEASE_MS / 1000) is not None
    restored = os.path.join(work, "restored")
    [r] = hz(a1, "checkpoint", "restore", "--stream", "1", "--step", "3", restored)
    assert r.get("step") == 3, r
    with open(state, "rb") as a, open(restored, "rb") as b:
        assert a.read() == b.read()
    [r] = hz(e1, "checkpoint", "restore", "--stream", "1", "--step", "3",
             os.path.join(work, "stolen"))
    assert r.get("code") == HZ_ENOENT, r
    assert notices(e1) == []
