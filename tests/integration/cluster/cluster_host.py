# SPDX-License-Identifier: Apache-2.0
"""One harmonaized per network namespace, as a host of a cluster."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from typing import Any, Callable, Dict, List, Optional

from cluster_net import ClusterNet
from hz_service import Service

FIXTURES = os.environ.get("HZ_SCHED_FIXTURES", "")


class ClusterHost(Service):
    """harmonaized in `member`'s namespace with a [cluster] section."""

    def __init__(self, net: ClusterNet, member: str, lease_ms: int = 1000,
                 host_name: Optional[str] = None, fixture: Optional[str] = None) -> None:
        """fixture: a scheduler fixture host (tests/unit/scheduler/fixtures)
        whose devices this host's scheduler sees; none: no scheduler."""
        super().__init__()
        self.net = net
        self.member = member
        self.name = host_name or member
        self.config = os.path.join(self.dir, "harmonaized.toml")
        store = f"{net.address('store')}:6379"
        with open(self.config, "w", encoding="utf-8") as f:
            f.write(self._scheduler_section(fixture) +
                    f"[cluster]\nstore = \"{store}\"\nhost_name = \"{self.name}\"\n"
                    f"data_address = \"{net.address(member)}\"\nlease_ms = {lease_ms}\n")

    def _scheduler_section(self, fixture: Optional[str]) -> str:
        if fixture is None:
            return "[scheduler]\nenabled = false\n\n"
        # A copy: binding devices to vfio-pci writes into the tree.
        source = os.path.join(FIXTURES, fixture)
        sysfs = os.path.join(self.dir, "sysfs")
        shutil.copytree(os.path.join(source, "sysfs"), sysfs, symlinks=True)
        self.inventory = os.path.join(source, "inventory.toml")
        return (f"[scheduler]\nsysfs_root = \"{sysfs}\"\nprovider_file = \"{self.inventory}\"\n"
                "sync = false\n\n")

    def command(self) -> List[str]:
        argv = super().command()
        argv[argv.index("warn")] = "info"  # the membership events are what the tests read
        return argv + ["--config", self.config]

    def popen(self, argv: List[str], **kwargs: Any):
        """In the host's namespace (ClusterNet kills it if the test does not)."""
        return self.net.popen(self.member, argv, **kwargs)

    def terminate(self) -> int:
        """SIGTERM, as an operator's stop; the exit status. The log stays."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(20)

    def wait_exit(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: the host dies without leaving the cluster."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def cluster(self) -> Dict[str, Any]:
        answer = self.hzctl("cluster", "status")
        assert answer.get("ok"), answer
        return answer["result"]

    def hosts(self) -> list:
        return sorted(h["name"] for h in self.cluster()["hosts"])


def wait_until(pred: Callable[[], bool], limit_s: float) -> Optional[float]:
    """Seconds until pred() held, or None when it did not within limit_s."""
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        if pred():
            return time.monotonic() - start
        time.sleep(0.05)
    return None


def last_json(proc: subprocess.Popen, limit_s: float):
    """(exit status, the last JSON line it printed) of a test program."""
    out, err = proc.communicate(timeout=limit_s)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"no result (rc {proc.returncode}): {err}"
    return proc.returncode, json.loads(lines[-1])
