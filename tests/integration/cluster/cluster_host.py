# SPDX-License-Identifier: Apache-2.0
"""One harmonaized per network namespace, as a host of a cluster."""

from __future__ import annotations

import ctypes
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
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


class UpgradeFailed(RuntimeError):
    """`hzctl upgrade` did not hand over; the message is its answer."""


class Successor:
    """The daemon a live upgrade started, in place of the Popen of the one it
    replaced (the same poll, wait, send_signal, kill and terminate). It is
    the old process's child; once that one exits it is the test's (see
    become_subreaper), so its exit status can still be waited for."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.args = [f"harmonaized (pid {pid})"]
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def become_subreaper() -> None:
    """The test process adopts the orphans of its descendants: a daemon
    started by a live upgrade outlives its parent, the daemon the test
    started, and would otherwise go to init, out of the test's reach. (Any
    other orphan stays a zombie until the test exits, which is harmless.)"""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


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

    def upgrade(self, timeout_s: float = 60.0) -> int:
        """A live upgrade to the same binary with `hzctl upgrade`; the new
        daemon's pid. From then on stop(), kill(), terminate(), wait_exit()
        and log() are the new daemon's: it writes to the same log file (it
        inherits the old one's output) and is tracked by its pid.
        UpgradeFailed when hzctl does not report a hand-over."""
        assert self.proc is not None
        become_subreaper()  # before the old process can exit
        out = subprocess.run([self.hzctl_path, "--socket", self.control, "--json", "--timeout",
                              str(timeout_s), "upgrade", "--binary", self.harmonaized],
                             capture_output=True, text=True, timeout=timeout_s + 30)
        try:
            answer = json.loads(out.stdout)
        except ValueError:
            answer = {"ok": False, "error": f"no answer: {out.stdout!r} {out.stderr!r}"}
        if out.returncode != 0 or not answer.get("ok"):
            raise UpgradeFailed(f"hzctl upgrade (exit {out.returncode}): {json.dumps(answer)}")
        if answer["from"] != self.proc.pid or answer["pid"] == answer["from"]:
            raise UpgradeFailed(f"not a hand-over from process {self.proc.pid}: {answer}")
        # The new process answers before the old one has left; only once it
        # has is the new one the test's child.
        try:
            status = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise UpgradeFailed(f"process {self.proc.pid} still runs after the hand-over "
                                f"to {answer['pid']}") from None
        if status != 0:
            raise UpgradeFailed(f"process {self.proc.pid} exited with {status} after the "
                                "hand-over")
        self.proc = Successor(answer["pid"])
        # ClusterNet kills it with the namespaces if the test does not stop it.
        self.net.procs.append(self.proc)
        return self.proc.pid

    def log_size(self) -> int:
        """Where the log's next line will start (for a part of log_since)."""
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def log_since(self, start: int, end: Optional[int] = None) -> str:
        """The log from byte start (a log_size()) to end (or its end)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                data = f.read() if end is None else f.read(max(0, end - start))
        except OSError:
            return ""
        return data.decode("utf-8", errors="replace")

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
