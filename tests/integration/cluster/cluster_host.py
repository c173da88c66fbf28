# SPDX-License-Identifier: Apache-2.0
"""One harmonaized per network namespace, as a host of a cluster."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any, Callable, Dict, Optional

from cluster_net import ClusterNet

HARMONAIZED = os.environ.get("HZ_HARMONAIZED", "harmonaized")
HZCTL = os.environ.get("HZ_HZCTL", "hzctl")


class ClusterHost:
    """harmonaized in `member`'s namespace with a [cluster] section."""

    def __init__(self, net: ClusterNet, member: str, lease_ms: int = 1000,
                 host_name: Optional[str] = None, store: Optional[str] = None) -> None:
        self.net = net
        self.member = member
        self.name = host_name or member
        self.dir = tempfile.mkdtemp(prefix=f"hz-{member}-")
        self.control = os.path.join(self.dir, "control.sock")
        self.log_path = os.path.join(self.dir, "harmonaized.log")
        self.proc: Optional[subprocess.Popen] = None
        store = store or f"{net.address('store')}:6379"
        with open(os.path.join(self.dir, "harmonaized.toml"), "w", encoding="utf-8") as f:
            f.write("[scheduler]\nenabled = false\n\n"
                    f"[cluster]\nstore = \"{store}\"\nhost_name = \"{self.name}\"\n"
                    f"data_address = \"{net.address(member)}\"\nlease_ms = {lease_ms}\n")

    def start(self, timeout: float = 20.0) -> None:
        """Starts the daemon and waits for its control socket."""
        log = open(self.log_path, "ab")
        self.proc = self.net.popen(
            self.member,
            [HARMONAIZED, "--config", os.path.join(self.dir, "harmonaized.toml"), "--state-dir",
             self.dir, "--control-socket", self.control, "--no-metrics", "--log-level", "info"],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.control):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"harmonaized on {self.member} did not start:\n{self.log()}")
            time.sleep(0.05)

    def wait_exit(self, timeout: float = 20.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: the host dies without leaving the cluster."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(20)

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def hzctl(self, *args: str) -> Dict[str, Any]:
        """An hzctl command's result (it fails the test when the service refuses)."""
        out = subprocess.run([HZCTL, "--socket", self.control, "--json", *args],
                             capture_output=True, text=True, timeout=30)
        answer = json.loads(out.stdout)
        assert answer.get("ok"), f"hzctl {' '.join(args)}: {answer}"
        return answer["result"]

    def cluster(self) -> Dict[str, Any]:
        return self.hzctl("cluster", "status")

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
