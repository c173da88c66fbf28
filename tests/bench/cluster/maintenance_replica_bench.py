#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""maintenance_replica_bench: a maintenance notice answered with peer-host checkpoints, and the restore.

Two hosts, h0 and h1, are network namespaces on this machine
(tests/support/python/cluster_net.py) whose links are shaped with tc tbf to
--rate-mbit in each direction; each runs harmonaized with [cluster], Redis runs
in a namespace of its own. One tenant has --ranks VM sockets on h0 (container
tenants over virtio-user, through the Python package `harmonaize`) and one on
h1. In the same run:

save_to_peer
  service_s     from `hzctl maintenance schedule --host h0 --at +600` on h0 until
                every rank has seen CHECKPOINT/DURABLE at tier PEER_HOST: each rank
                (one process, one session) holds --bytes of state in registered
                memory, has set a PEER_HOST policy for its own stream and
                subscribed to MAINTENANCE and CHECKPOINT; on its
                MAINTENANCE/SCHEDULED notice it saves the state (CKPT_SAVE,
                zero-copy) and approves the notice (EVENT_ACK with APPROVE),
                then waits for its DURABLE.
  reference_s   the tenant doing it itself, over the same link: each rank (a
                process in h0's namespace, the same bytes in memory) writes its
                state to a file with write+fsync, then streams it over TCP to a
                receiver in h1's namespace that writes and fsyncs it and answers
                one byte; all ranks at once, from the first write to the last
                answer.
  link_bound_s  ranks x bytes at the tbf rate (the bytes that must cross h0's link).
  ratio         reference_s / service_s (> 1: the service path is faster).

restore_from_peer (after save_to_peer)
  h0's harmonaized is SIGKILLed and its membership record expires; then a
  process of the same tenant on h1's VM socket restores every rank's checkpoint
  into registered memory, one after the other, with the package's
  restore_state (two CKPT_RESTOREs: a probe for the metadata, then the restore;
  per_checkpoint_requests_s times each), and checks each bit-exact afterwards.
  service_s     the restores, from the first probe to the last byte written.
  reference_s   reading the same bytes from local files (the reference's copies on
                h1) with read(), one after the other, into memory.
  ratio         reference_s / service_s.
  The page cache is dropped (sync; echo 3 > /proc/sys/vm/drop_caches) before
  each timed phase of both paths; where that is not allowed the reference
  reads with O_DIRECT instead ("page_cache" in the output says which).

One JSON line per measurement:
  {"bench":"maintenance_replica","phase":"save_to_peer","ranks":N,"bytes_per_rank":S,
   "rate_mbit":R,"service_s":..,"reference_s":..,"link_bound_s":..,"ratio":..,...}
  {"bench":"maintenance_replica","phase":"restore_from_peer",...,"verified":true}
and readable lines on stderr.

Usage: maintenance_replica_bench.py [--ranks N] [--bytes B] [--rate-mbit R] [--smoke]
--smoke: 1 rank, 1 MiB: checks only that the run completes and the restored bytes match.
Needs root (namespaces, drop_caches) and the Python package (harmonaize, with
torch) on PYTHONPATH; run it from a build (ctest sets the environment) or set
HZ_HARMONAIZED, HZ_HZCTL and PYTHONPATH as the smoke test does.

The rank processes are this file run with an internal mode (_save_rank,
_restore_rank, _diy_send, _diy_recv, _read_files).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import random
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

HERE = os.path.abspath(__file__)
LEASE_MS = 1000
TENANT = "bench"
STEP = 1
DIY_PORT = 7100
CHUNK = 4 << 20
TIER_PEER_HOST = 2


def payload(seed: int, nbytes: int) -> bytes:
    """A rank's state: the same bytes for the service path, the reference and the check."""
    return random.Random(seed).randbytes(nbytes)


def emit(obj: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def wait_go() -> None:
    """Blocks until the driver writes a line on stdin (the start of a timed phase)."""
    if not sys.stdin.readline():
        raise SystemExit("driver went away")


# ---- the tenant's processes (run as subprocesses of the driver) --------------


def save_rank(a: argparse.Namespace) -> int:
    """One rank on h0: waits for the maintenance notice, saves, approves, waits for DURABLE."""
    import harmonaize
    import torch
    from harmonaize import Tier, Topic

    dev = harmonaize.device(f"vhost-user:{a.socket}")
    block = dev.alloc(a.bytes)
    memoryview(block)[:a.bytes] = payload(a.seed, a.bytes)
    state = {"state": torch.frombuffer(block, dtype=torch.uint8, count=a.bytes)}
    dev.set_checkpoint_policy(a.stream, retention=2, tier=Tier.PEER_HOST)
    dev.subscribe([Topic.MAINTENANCE, Topic.CHECKPOINT])
    emit({"ready": True})
    deadline = time.monotonic() + a.timeout
    t: Dict[str, float] = {}
    info: Dict[str, Any] = {}
    while "durable" not in t:
        left = deadline - time.monotonic()
        ev = dev.next_event(timeout=max(left, 0.0)) if left > 0 else None
        if ev is None:
            emit({"error": f"timed out after {a.timeout} s", "seen": sorted(t)})
            return 1
        if ev.topic == Topic.MAINTENANCE and ev.kind_name == "SCHEDULED" and "notice" not in t:
            t["notice"] = time.monotonic()
            r = dev.save_state(state, stream=a.stream, step=STEP)
            t["saved"] = time.monotonic()
            dev.ack(ev, approve=ev.approvable)
            t["approved"] = time.monotonic()
            info = {"zero_copy_bytes": r.zero_copy_bytes, "staged_bytes": r.staged_bytes,
                    "stall_us": r.info.stall_us, "approvable": ev.approvable}
        elif ev.topic == Topic.CHECKPOINT:
            f = ev.fields
            if f["stream"] != a.stream or f["step"] != STEP:
                continue  # another rank's stream: the log is the tenant's
            if ev.kind_name == "DURABLE" and f["tier"] == TIER_PEER_HOST:
                t["durable"] = time.monotonic()
            elif ev.kind_name == "FAILED":
                emit({"error": f"CHECKPOINT/FAILED tier {f['tier']} status {f['status']}"})
                return 1
    emit({"stream": a.stream, **{f"t_{k}": v for k, v in t.items()}, **info})
    return 0


class _TimedNative:
    """The device's native handle, timing each CKPT_RESTORE the package makes
    (restore_state probes for the metadata, then restores)."""

    def __init__(self, native: Any) -> None:
        self._native = native
        self.calls: List[float] = []

    def ckpt_restore(self, *args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        try:
            return self._native.ckpt_restore(*args, **kwargs)
        finally:
            self.calls.append(time.monotonic() - start)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._native, name)


def restore_rank(a: argparse.Namespace) -> int:
    """On h1: restores each stream's checkpoint into registered memory, then checks them."""
    import harmonaize
    import torch

    dev = harmonaize.device(f"vhost-user:{a.socket}")
    timed = _TimedNative(dev.native)
    dev.native = timed
    streams = [int(s) for s in a.streams.split(",")]
    seeds = [int(s) for s in a.seeds.split(",")]
    blocks = [dev.alloc(a.bytes) for _ in streams]
    targets = [{"state": torch.frombuffer(b, dtype=torch.uint8, count=a.bytes)} for b in blocks]
    emit({"ready": True})
    wait_go()
    out = []
    for stream, into in zip(streams, targets):
        timed.calls.clear()
        start = time.monotonic()
        _, r = dev.restore_state(stream=stream, step=STEP, into=into)
        end = time.monotonic()
        out.append({"stream": stream, "t_start": start, "t_end": end, "bytes": r.info.bytes,
                    "zero_copy_bytes": r.zero_copy_bytes, "requests_s": list(timed.calls)})
    for o, block, seed in zip(out, blocks, seeds):
        o["match"] = memoryview(block)[:a.bytes] == payload(seed, a.bytes)
    emit({"restores": out})
    return 0


def diy_send(a: argparse.Namespace) -> int:
    """The reference on h0: write+fsync the state to a file, then copy it to h1 over TCP."""
    data = payload(a.seed, a.bytes)
    emit({"ready": True})
    wait_go()
    start = time.monotonic()
    fd = os.open(a.file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view[:CHUNK]):]
        os.fsync(fd)
    finally:
        os.close(fd)
    local = time.monotonic()
    host, port = a.dest.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=a.timeout) as s:
        s.sendall(len(data).to_bytes(8, "little"))
        s.sendall(data)
        if s.recv(1) != b"\x01":
            emit({"error": "the receiver did not confirm"})
            return 1
    emit({"t_start": start, "t_local": local, "t_end": time.monotonic()})
    return 0


def diy_recv(a: argparse.Namespace) -> int:
    """The reference on h1: receives one state, writes and fsyncs it, answers one byte."""
    with socket.socket() as ls:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((a.listen, a.port))
        ls.listen(1)
        ls.settimeout(a.timeout)
        emit({"ready": True})
        conn, _ = ls.accept()
    with conn:
        conn.settimeout(a.timeout)
        head = b""
        while len(head) < 8:
            part = conn.recv(8 - len(head))
            if not part:
                raise SystemExit("sender closed early")
            head += part
        left = int.from_bytes(head, "little")
        buf = bytearray(CHUNK)
        fd = os.open(a.file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            while left:
                n = conn.recv_into(buf, min(left, CHUNK))
                if n == 0:
                    raise SystemExit("sender closed early")
                view = memoryview(buf)[:n]
                while view:
                    view = view[os.write(fd, view):]
                left -= n
            os.fsync(fd)
        finally:
            os.close(fd)
        conn.sendall(b"\x01")
    emit({"done": True})
    return 0


def read_files(a: argparse.Namespace) -> int:
    """The restore's reference: reads each file into memory, one after the other."""
    files = a.files.split(",")
    seeds = [int(s) for s in a.seeds.split(",")]
    # O_DIRECT needs an aligned buffer and aligned lengths: an anonymous mapping is.
    size = (a.bytes + 4095) // 4096 * 4096
    bufs = [mmap.mmap(-1, size) for _ in files]
    flags = os.O_RDONLY | (os.O_DIRECT if a.direct else 0)
    emit({"ready": True})
    wait_go()
    out = []
    for path, buf in zip(files, bufs):
        start = time.monotonic()
        fd = os.open(path, flags)
        try:
            got = 0
            view = memoryview(buf)
            while got < a.bytes:
                n = os.readv(fd, [view[got:size]])
                if n == 0:
                    break
                got += n
        finally:
            os.close(fd)
        out.append({"file": os.path.basename(path), "t_start": start, "t_end": time.monotonic(),
                    "bytes": got})
    for o, buf, seed in zip(out, bufs, seeds):
        o["match"] = o["bytes"] == a.bytes and memoryview(buf)[:a.bytes] == payload(seed, a.bytes)
    emit({"reads": out})
    return 0


# ---- the driver --------------------------------------------------------------


class Child:
    """A subprocess that prints JSON lines; each read is bounded by a timeout."""

    def __init__(self, proc: subprocess.Popen, label: str, err_path: str) -> None:
        self.proc, self.label, self.err_path, self.buf = proc, label, err_path, b""

    def line(self, timeout: float) -> Dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{self.label}: no answer within {timeout:.0f} s: "
                                   f"{self.stderr()}")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    rc = self.proc.wait(5)
                    raise RuntimeError(f"{self.label} exited (rc {rc}): {self.stderr()}")
                self.buf += chunk
        raw, self.buf = self.buf.split(b"\n", 1)
        obj = json.loads(raw)
        if "error" in obj:
            raise RuntimeError(f"{self.label}: {obj['error']}")
        return obj

    def go(self) -> None:
        self.proc.stdin.write(b"\n")
        self.proc.stdin.flush()

    def stderr(self) -> str:
        try:
            with open(self.err_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def end(self, timeout: float = 10) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def drop_page_cache() -> bool:
    subprocess.run(["sync"], check=False, timeout=120)
    try:
        with open("/proc/sys/vm/drop_caches", "w", encoding="ascii") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run(ranks: int, nbytes: int, rate_mbit: float, timeout: float) -> List[Dict[str, Any]]:
    from cluster_host import ClusterHost, wait_until
    from cluster_net import ClusterNet

    py = sys.executable
    children: List[Child] = []

    def spawn(argv: List[str], label: str, net: Optional[Any] = None,
              member: Optional[str] = None) -> Child:
        err_path = os.path.join(work, f"{len(children)}.stderr")
        with open(err_path, "wb") as err:
            kw = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
            argv = [py, HERE, *argv]
            proc = net.popen(member, argv, **kw) if net else subprocess.Popen(argv, **kw)
        c = Child(proc, label, err_path)
        children.append(c)
        return c

    seeds = [1000 + r for r in range(ranks)]
    streams = [r + 1 for r in range(ranks)]
    results: List[Dict[str, Any]] = []
    with ClusterNet(["store", "h0", "h1"], rate_mbit=rate_mbit) as net:
        net.start_redis()
        h0, h1 = ClusterHost(net, "h0", LEASE_MS), ClusterHost(net, "h1", LEASE_MS)
        hosts = [h0, h1]
        work = tempfile.mkdtemp(prefix="hz-maint-bench-")
        try:
            for h in hosts:
                h.start()
                assert h.hzctl("tenant", "create", TENANT)["ok"]
            if wait_until(lambda: all(len(h.hosts()) == 2 for h in hosts), 30) is None:
                raise RuntimeError("the two hosts did not see each other within 30 s")
            socks0 = []
            for r in range(ranks):
                path = os.path.join(h0.dir, f"rank{r}.sock")
                assert h0.hzctl("vm", "bind", "--tenant", TENANT, "--socket", path)["ok"]
                socks0.append(path)
            sock1 = os.path.join(h1.dir, "restore.sock")
            assert h1.hzctl("vm", "bind", "--tenant", TENANT, "--socket", sock1)["ok"]

            # -- the reference: write+fsync, then a TCP copy to h1 that is written+fsynced there
            for side in ("h0", "h1"):
                os.makedirs(os.path.join(work, side))
            diy0 = [os.path.join(work, "h0", f"state{r}") for r in range(ranks)]
            diy1 = [os.path.join(work, "h1", f"state{r}") for r in range(ranks)]
            recv = [spawn(["_diy_recv", "--listen", net.address("h1"), "--port",
                           str(DIY_PORT + r), "--file", diy1[r], "--timeout", str(timeout)],
                          f"reference receiver {r}", net, "h1") for r in range(ranks)]
            for c in recv:
                c.line(timeout)
            send = [spawn(["_diy_send", "--file", diy0[r], "--bytes", str(nbytes), "--seed",
                           str(seeds[r]), "--dest", f"{net.address('h1')}:{DIY_PORT + r}",
                           "--timeout", str(timeout)], f"reference sender {r}", net, "h0")
                    for r in range(ranks)]
            for c in send:
                c.line(timeout)
            dropped = drop_page_cache()
            t0 = time.monotonic()
            for c in send:
                c.go()
            sent = [c.line(timeout) for c in send]
            for c in recv:
                c.line(timeout)
            ref_save = max(s["t_end"] for s in sent) - t0
            ref_local = max(s["t_local"] for s in sent) - t0

            # -- the service: maintenance notice, CKPT_SAVE at PEER_HOST, approval, DURABLE
            rank_procs = [spawn(["_save_rank", "--socket", socks0[r], "--stream",
                                 str(streams[r]), "--bytes", str(nbytes), "--seed",
                                 str(seeds[r]), "--timeout", str(timeout)], f"rank {r}")
                          for r in range(ranks)]
            for c in rank_procs:
                c.line(timeout + 60)  # torch's import on a loaded machine
            drop_page_cache()
            t0 = time.monotonic()
            sched = h0.hzctl("maintenance", "schedule", "--host", "h0", "--at", "+600",
                             "--duration", "60")
            if not sched.get("ok"):
                raise RuntimeError(f"maintenance schedule: {sched}")
            t_scheduled = time.monotonic()
            done = [c.line(timeout) for c in rank_procs]
            service_save = max(d["t_durable"] for d in done) - t0
            status = h0.hzctl("maintenance", "status").get("result", {})
            link_bound = ranks * nbytes * 8 / (rate_mbit * 1e6)
            per_rank = [{"stream": d["stream"],
                         "notice_s": round(d["t_notice"] - t0, 4),
                         "saved_s": round(d["t_saved"] - t0, 4),
                         "approved_s": round(d["t_approved"] - t0, 4),
                         "durable_s": round(d["t_durable"] - t0, 4),
                         "save_stall_us": d["stall_us"],
                         "zero_copy_bytes": d["zero_copy_bytes"]} for d in done]
            maint = [{k: m.get(k) for k in ("id", "state", "approved", "told", "starts_at")
                      if k in m} for m in status.get("maintenances", [])]
            results.append({
                "bench": "maintenance_replica", "phase": "save_to_peer", "ranks": ranks,
                "bytes_per_rank": nbytes, "rate_mbit": rate_mbit,
                "service_s": round(service_save, 4), "reference_s": round(ref_save, 4),
                "reference_local_fsync_s": round(ref_local, 4),
                "link_bound_s": round(link_bound, 4),
                "ratio": round(ref_save / service_save, 3),
                "service_of_link_bound": round(link_bound / service_save, 3),
                "schedule_call_s": round(t_scheduled - t0, 4),
                "per_rank": per_rank, "maintenance": maint,
                "reference": "each rank: write+fsync to a file on h0, then TCP to h1 where it "
                             "is written+fsynced; ranks concurrently; same shaped link"})
            log(f"save_to_peer: {ranks} x {nbytes} B at {rate_mbit:g} Mbit/s: service "
                f"{service_save:.3f} s, do-it-yourself {ref_save:.3f} s (local fsync "
                f"{ref_local:.3f} s), link bound {link_bound:.3f} s, ratio "
                f"{ref_save / service_save:.2f}")
            for c in rank_procs + send + recv:
                c.end()

            # -- h0 dies; its record expires; h1 restores from the replicas
            h0.kill()
            if wait_until(lambda: h1.hosts() == ["h1"], 20 * LEASE_MS / 1000) is None:
                raise RuntimeError("h0's membership record did not expire")
            restorer = spawn(["_restore_rank", "--socket", sock1, "--streams",
                              ",".join(map(str, streams)), "--seeds", ",".join(map(str, seeds)),
                              "--bytes", str(nbytes)], "restore rank")
            restorer.line(timeout + 60)
            drop_page_cache()
            restorer.go()
            restored = restorer.line(timeout)["restores"]
            service_restore = restored[-1]["t_end"] - restored[0]["t_start"]

            reader = spawn(["_read_files", "--files", ",".join(diy1), "--seeds",
                            ",".join(map(str, seeds)), "--bytes", str(nbytes)]
                           + ([] if dropped else ["--direct"]), "reference reader")
            reader.line(timeout)
            drop_page_cache()
            reader.go()
            reads = reader.line(timeout)["reads"]
            ref_restore = reads[-1]["t_end"] - reads[0]["t_start"]
            verified = all(r["match"] and r["bytes"] == nbytes for r in restored)
            results.append({
                "bench": "maintenance_replica", "phase": "restore_from_peer", "ranks": ranks,
                "bytes_per_rank": nbytes, "rate_mbit": rate_mbit,
                "service_s": round(service_restore, 4), "reference_s": round(ref_restore, 4),
                "ratio": round(ref_restore / service_restore, 3),
                "per_checkpoint_s": [round(r["t_end"] - r["t_start"], 4) for r in restored],
                "per_checkpoint_requests_s": [[round(x, 4) for x in r["requests_s"]]
                                              for r in restored],
                "reference_per_file_s": [round(r["t_end"] - r["t_start"], 4) for r in reads],
                "verified": verified, "reference_verified": all(r["match"] for r in reads),
                "page_cache": "dropped before each" if dropped else "not dropped; reference O_DIRECT",
                "reference": "read() of the same bytes from local files on the same disk, "
                             "one after the other"})
            log(f"restore_from_peer: {ranks} x {nbytes} B on h1 after h0 died: service "
                f"{service_restore:.3f} s, local file read {ref_restore:.3f} s, ratio "
                f"{ref_restore / service_restore:.2f}, bit-exact {verified}")
            for c in (restorer, reader):
                c.end()
        finally:
            for c in children:
                if c.proc.poll() is None:
                    c.proc.kill()
                    try:
                        c.proc.wait(5)
                    except subprocess.TimeoutExpired:
                        pass
            for h in hosts:
                h.stop()  # also removes the state directory of the one killed
            shutil.rmtree(work, ignore_errors=True)
    return results


def main() -> int:
    modes = {"_save_rank": save_rank, "_restore_rank": restore_rank, "_diy_send": diy_send,
             "_diy_recv": diy_recv, "_read_files": read_files}
    if len(sys.argv) > 1 and sys.argv[1] in modes:
        sp = argparse.ArgumentParser()
        for opt in ("--socket", "--file", "--dest", "--listen", "--streams", "--seeds",
                    "--files"):
            sp.add_argument(opt)
        for opt in ("--stream", "--bytes", "--seed", "--port"):
            sp.add_argument(opt, type=int)
        sp.add_argument("--timeout", type=float, default=120)
        sp.add_argument("--direct", action="store_true")
        return modes[sys.argv[1]](sp.parse_args(sys.argv[2:]))

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=2, help="VM sockets (ranks) of the tenant on h0")
    ap.add_argument("--bytes", type=int, default=64 << 20, help="state per rank")
    ap.add_argument("--rate-mbit", type=float, default=1000, help="tbf rate of each link")
    ap.add_argument("--timeout", type=float, default=300, help="bound of each wait, seconds")
    ap.add_argument("--smoke", action="store_true",
                    help="1 rank, 1 MiB: checks that the run completes and restores bit-exact")
    a = ap.parse_args()
    if a.smoke:
        a.ranks, a.bytes, a.timeout = 1, 1 << 20, 60
    ok = True
    for line in run(a.ranks, a.bytes, a.rate_mbit, a.timeout):
        print(json.dumps(line), flush=True)
        if line["phase"] == "restore_from_peer":
            ok = ok and line["verified"] and line["reference_verified"]
        ok = ok and line["service_s"] > 0 and line["reference_s"] > 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
