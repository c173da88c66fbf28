# SPDX-License-Identifier: Apache-2.0
"""Several hosts on one machine: network namespaces joined by veth pairs.

Each member (a host, the cluster store) is a network namespace with one
interface, eth0, cabled by a veth pair to a bridge that lives in a namespace of
its own (the switch). Nothing is created in the namespace of the caller, so the
test traffic flows only between these namespaces (and each one's loopback).
Links can be shaped with tc's token bucket (tbf) in both directions: this is
the bottleneck the inter-host leg sees on a real cluster. A member can be cut
off (its switch port goes down) and healed, which is a network partition.

Every namespace is named hzt<pid>x<n>-<member>, so that `remove_stale()`
(run by the ctest fixture before and after the multi-host tests) can delete
what a killed run left behind without touching a live run's namespaces.

Usage:
    with ClusterNet(["store", "h0", "h1"], rate_mbit=1000) as net:
        proc = net.popen("h0", ["harmonaized", ...])
        net.address("store")  # "10.77.0.1"
        net.cut("h1"); net.heal("h1")
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

SUBNET = "10.77.0"
_STALE = re.compile(r"^hzt(\d+)x\d+-")
_counter = itertools.count()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


class ClusterNet:
    """The namespaces, their links and the processes started in them."""

    def __init__(self, members: Sequence[str], rate_mbit: Optional[float] = None) -> None:
        if os.geteuid() != 0:
            raise RuntimeError("the multi-host tests create network namespaces: run them as root")
        self.members = list(members)
        self.rate_mbit = rate_mbit
        self.tag = f"hzt{os.getpid()}x{next(_counter)}"
        self.procs: List[subprocess.Popen] = []
        self._created: List[str] = []

    # -- lifetime ---------------------------------------------------------

    def __enter__(self) -> "ClusterNet":
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        switch = self._add_ns("switch")
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for i, member in enumerate(self.members):
            ns = self._add_ns(member)
            port = f"p{i}"
            _ip("-n", switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                "netns", ns)
            _ip("-n", switch, "link", "set", port, "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.address(member)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            if self.rate_mbit:
                self._shape(ns, "eth0")
                self._shape(switch, port)

    def down(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for ns in reversed(self._created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        self._created.clear()

    # -- members ----------------------------------------------------------

    def ns(self, member: str) -> str:
        return f"{self.tag}-{member}"

    def address(self, member: str) -> str:
        return f"{SUBNET}.{self.members.index(member) + 1}"

    def exec_argv(self, member: str, argv: Sequence[str]) -> List[str]:
        return ["ip", "netns", "exec", self.ns(member), *argv]

    def popen(self, member: str, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        """Starts argv in member's namespace; killed by down() if still running."""
        p = subprocess.Popen(self.exec_argv(member, argv), **kwargs)
        self.procs.append(p)
        return p

    def cut(self, member: str) -> None:
        """A partition: member's switch port goes down; it reaches no one."""
        _ip("-n", self.ns("switch"), "link", "set", f"p{self.members.index(member)}", "down")

    def heal(self, member: str) -> None:
        _ip("-n", self.ns("switch"), "link", "set", f"p{self.members.index(member)}", "up")

    def slow_data_path(self, member: str, rate_mbit: float) -> None:
        """member's traffic with the other hosts now runs at rate_mbit, both
        ways; its traffic with the store keeps the link's rate, as on a
        separate management network (htb: the store's address in a class of
        its own)."""
        i = self.members.index(member)
        store = self.address("store")
        for ns, dev, match in ((self.ns(member), "eth0", "dst"),
                               (self.ns("switch"), f"p{i}", "src")):
            tc = ["ip", "netns", "exec", ns, "tc"]
            for args in (["qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb",
                          "default", "10"],
                         ["class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb",
                          "rate", f"{rate_mbit}mbit"],
                         ["class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb",
                          "rate", f"{self.rate_mbit or 1000}mbit"],
                         ["filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "u32",
                          "match", "ip", match, f"{store}/32", "flowid", "1:20"]):
                subprocess.run(tc + args, check=True, capture_output=True, timeout=10)

    def start_redis(self, member: str = "store", port: int = 6379) -> subprocess.Popen:
        """redis-server in member's namespace, without persistence; waits until it answers."""
        addr = self.address(member)
        p = self.popen(member, ["redis-server", "--bind", addr, "--port", str(port), "--save", "",
                                "--appendonly", "no", "--protected-mode", "no"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ping = subprocess.run(self.exec_argv(member, ["redis-cli", "-h", addr, "-p", str(port),
                                                         "PING"]),
                                  capture_output=True, text=True, timeout=10)
            if "PONG" in ping.stdout:
                return p
            if p.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start (scripts/install-deps.sh installs it)")

    # -- internals --------------------------------------------------------

    def _add_ns(self, member: str) -> str:
        ns = self.ns(member)
        _ip("netns", "add", ns)
        self._created.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        return ns

    def _shape(self, ns: str, dev: str) -> None:
        # Burst: at least one MTU-sized frame and 1 ms at the rate, as tbf needs.
        rate_bytes = self.rate_mbit * 1e6 / 8
        burst = max(16 * 1024, int(rate_bytes / 1000))
        subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                        "rate", f"{self.rate_mbit}mbit", "burst", str(burst), "latency", "50ms"],
                       check=True, capture_output=True, timeout=10)


def remove_stale() -> List[str]:
    """Deletes the namespaces of runs whose process is gone; returns their names."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    removed = []
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _STALE.match(name)
        if not m:
            continue
        pid = int(m.group(1))
        try:
            os.kill(pid, 0)
            continue  # a live run's
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        # Processes still inside (a daemon a killed run left) go with it.
        pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True,
                              timeout=10).stdout.split()
        for p in pids:
            try:
                os.kill(int(p), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
        removed.append(name)
    return removed


if __name__ == "__main__":
    if sys.argv[1:] == ["--remove-stale"]:
        gone = remove_stale()
        print(f"cluster_net: removed {len(gone)} stale namespaces" + (f": {' '.join(gone)}" if gone else ""))
    else:
        print("usage: cluster_net.py --remove-stale", file=sys.stderr)
        sys.exit(2)
