# SPDX-License-Identifier: Apache-2.0
"""A real harmonaized for Python tests and benchmarks.

Starts the daemon with a private state directory, operates it with hzctl
(as scripts/demo.sh does), and binds VM sockets for container tenants: each
rank process then uses ``HZ_DEVICE=vhost-user:<socket>``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any, Dict, List, Optional


class Service:
    """harmonaized as a child process, stopped on exit from a ``with`` block."""

    def __init__(self, harmonaized: Optional[str] = None, hzctl: Optional[str] = None) -> None:
        self.harmonaized = harmonaized or os.environ["HZ_HARMONAIZED"]
        self.hzctl_path = hzctl or os.environ["HZ_HZCTL"]
        self.dir = tempfile.mkdtemp(prefix="hz-py-")
        self.control = os.path.join(self.dir, "control.sock")
        self.log_path = os.path.join(self.dir, "harmonaized.log")
        self.proc: Optional[subprocess.Popen] = None

    def __enter__(self) -> "Service":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def command(self) -> List[str]:
        """The daemon's command line (subclasses add options or a namespace)."""
        return [self.harmonaized, "--state-dir", self.dir, "--control-socket", self.control,
                "--no-metrics", "--log-level", "warn"]

    def popen(self, argv: List[str], **kwargs: Any) -> subprocess.Popen:
        return subprocess.Popen(argv, **kwargs)

    def start(self, timeout: float = 20.0) -> None:
        log = open(self.log_path, "ab")
        self.proc = self.popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        # Started once the control socket answers: harmonaized serves it only
        # after every listener, restored VM sockets included, is up. The file
        # alone comes first.
        deadline = time.monotonic() + timeout
        while not (os.path.exists(self.control) and self._answers()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"harmonaized did not start:\n{self.log()}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            return subprocess.run([self.hzctl_path, "--socket", self.control, "--timeout", "2",
                                   "status"], capture_output=True, timeout=10).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def hzctl(self, *args: str) -> Dict[str, Any]:
        """Runs an hzctl command and returns its JSON answer."""
        out = subprocess.run([self.hzctl_path, "--socket", self.control, "--json", *args],
                             check=True, capture_output=True, text=True, timeout=30).stdout
        return json.loads(out) if out.strip() else {}

    def tenant_with_vms(self, tenant: str, n: int) -> List[str]:
        """Creates a tenant and binds n VM sockets to it; returns the socket paths."""
        self.hzctl("tenant", "create", tenant)
        socks = []
        for i in range(n):
            path = os.path.join(self.dir, f"{tenant}-vm{i}.sock")
            self.hzctl("vm", "bind", "--tenant", tenant, "--socket", path)
            socks.append(path)
        return socks

    def maintenance(self, tenant: str, deadline_s: int = 600, duration_s: int = 300) -> None:
        """Publishes an approvable scheduled maintenance to the tenant."""
        self.hzctl("event", "inject", "--tenant", tenant, "--topic", "maintenance",
                   "--kind", "scheduled", "--deadline-s", str(deadline_s),
                   "--data", json.dumps({"duration_s": duration_s, "approvable": True}))
