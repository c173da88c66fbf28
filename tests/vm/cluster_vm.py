#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""vm_cluster_allreduce: a TCG guest on each of two hosts all-reduces through
the device with the real driver.

Two hosts are network namespaces (tests/support/python/cluster_net.py), each
running harmonaized with [cluster]; Redis runs in a namespace of its own.
Rank 0's guest is a VM of host h0 and prints the uid its COMM_UID returned;
rank 1's guest, a VM of host h1, joins with it. Both check the ALLREDUCE result
in guest memory, and h0 reports that the communicator crossed hosts.

Usage: cluster_vm.py HARMONAIZED HZCTL VM_DIR
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for d in ("tests/support/python", "tests/integration/python", "tests/integration/cluster"):
    sys.path.insert(0, os.path.join(TOP, d))

os.environ["HZ_HARMONAIZED"], os.environ["HZ_HZCTL"], VM_DIR = sys.argv[1:4]

from cluster_host import ClusterHost, wait_until  # noqa: E402
from cluster_net import ClusterNet  # noqa: E402


def say(msg: str) -> None:
    print(f"[vm_cluster_allreduce] {msg}", flush=True)


def guest(name: str, socket: str, test: str, log: str, append: str = "") -> subprocess.Popen:
    return subprocess.Popen(
        [os.path.join(TOP, "vm-images/run-guest.sh"), "--dir", VM_DIR, "--name", name, "--socket",
         socket, "--test", test, "--num-vqs", "6", "--vq-size", "128", "--config-size", "64",
         "--timeout", "170", "--append", append, "--log", log],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def main() -> int:
    with ClusterNet(["store", "h0", "h1"]) as net:
        net.start_redis()
        hosts = [ClusterHost(net, m, lease_ms=2000) for m in ("h0", "h1")]
        try:
            sockets = []
            for h in hosts:
                h.start()
                h.hzctl("tenant", "create", "tenant-a")
                sockets.append(os.path.join(h.dir, "vm.sock"))
                h.hzctl("vm", "bind", "--tenant", "tenant-a", "--socket", sockets[-1])
            assert wait_until(lambda: all(len(h.hosts()) == 2 for h in hosts), 30), \
                "the hosts do not see each other"
            logs = [os.path.join(h.dir, "guest.log") for h in hosts]
            rank0 = guest("cluster-vm0", sockets[0], "xvm_rank0", logs[0])
            uid = None
            deadline = time.monotonic() + 150
            while uid is None and time.monotonic() < deadline and rank0.poll() is None:
                m = re.search(r"HZ-UID: ([0-9a-f]{64})", read(logs[0]))
                uid = m.group(1) if m else None
                time.sleep(0.1)
            assert uid, f"rank 0's guest printed no uid:\n{read(logs[0])[-2000:]}"
            say(f"rank 0 (a VM of h0) created uid {uid}")
            rc1 = guest("cluster-vm1", sockets[1], "xvm_rank1", logs[1], f"hz.uid={uid}").wait(200)
            rc0 = rank0.wait(200)
            for i, log in enumerate(logs):
                for line in read(log).splitlines():
                    if "hz_drvtest" in line or "HZ-RESULT" in line:
                        print(f"[vm{i}] {line}")
            assert rc0 == 0 and rc1 == 0, f"guests failed: rank 0 exit {rc0}, rank 1 exit {rc1}"
            for rank, log in enumerate(logs):
                assert f"rank {rank}: ALLREDUCE of 4096 floats correct" in read(log), \
                    f"rank {rank}'s result is missing"
            assert "event=cross_host_comm_formed" in hosts[0].log(), \
                "the communicator did not cross hosts"
            say("PASS")
            return 0
        finally:
            for h in hosts:
                h.stop()


if __name__ == "__main__":
    sys.exit(main())
