# SPDX-License-Identifier: Apache-2.0
"""The device: one connection per process, shared by everything in it.

A device socket (or ``/dev/harmonaizeN``) serves one session at a time, and
registered memory belongs to that session, so a process opens its device
once: :func:`device` returns that one :class:`Device`, and the
torch.distributed backend runs its collectives through it too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple, Union

from . import _native
from .errors import InvalidArgumentError
from .events import Event, Topic, TopicsArg, topic_mask

if TYPE_CHECKING:
    from .checkpoint import RestoreResult, SaveResult

_C = _native.CONSTANTS
#: ``step`` meaning "the newest checkpoint of the stream".
LATEST = _C["HZ_STEP_LATEST"]

# Blocking waits are cut into slices so that Ctrl-C (KeyboardInterrupt) is
# seen while a rank waits for a notice.
_WAIT_SLICE_S = 0.2


class Tier(enum.IntEnum):
    """Minimum durability of a checkpoint stream."""

    HOST_MEMORY = 0  # held in host memory: survives the guest, not the host
    LOCAL_DISK = 1  # committed to the host's disk with a CRC32C per chunk
    PEER_HOST = 2  # the local disk, and a replica on another host of the cluster


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """What HELLO negotiated for this session."""

    transport: str  # "driver" or "vhost-user"
    path: str
    version: Tuple[int, int]
    num_request_queues: int
    features: int
    session_id: int
    max_regions: int
    max_comm_ranks: int


@dataclasses.dataclass(frozen=True)
class CheckpointInfo:
    """One checkpoint of a stream, or the outcome of a save or restore."""

    step: int
    bytes: int
    time_s: int = 0
    durable: bool = False  # committed at its tier (False: staged in host memory)
    tier: int = 0
    stall_us: int = 0  # saves: how long the device held the caller

    @classmethod
    def from_native(cls, d: Dict[str, int]) -> "CheckpointInfo":
        return cls(step=d["step"], bytes=d["bytes"], time_s=d["time_s"],
                   durable=d["state"] == _C["HZ_CKPT_DURABLE"], tier=d["tier"],
                   stall_us=d["stall_us"])


@dataclasses.dataclass(frozen=True)
class Topology:
    """The coarse topology summary of the tenant's allocation (SPEC.md 7.7)."""

    num_hosts: int
    cross_group_bw: int
    cross_host_bw: int
    groups: List[Dict[str, int]]
    devices: List[Dict[str, int]]


class Device:
    """A HarmonAIze device. Use :func:`device` to get the process's one."""

    def __init__(self, spec: Optional[str] = None) -> None:
        self.native = _native._Device(spec or "")
        self._events_lock = threading.Lock()

    # ---- the session -----------------------------------------------------

    @property
    def info(self) -> DeviceInfo:
        """The negotiated protocol version, features and limits."""
        return DeviceInfo(**self.native.info())

    @property
    def spec(self) -> str:
        return self.native.spec

    def topology(self) -> Topology:
        """The tenant's allocation, coarsely: groups, devices, bandwidth classes."""
        t = self.native.topology()
        return Topology(num_hosts=t["num_hosts"], cross_group_bw=t["cross_group_bw"],
                        cross_host_bw=t["cross_host_bw"], groups=t["groups"],
                        devices=t["devices"])

    def hint_batch_size(self, min_batch: int, max_batch: int, step: int = 1) -> int:
        """Declares the batch sizes the job accepts; returns the provider's suggestion."""
        return self.native.hint_declare(min_batch, max_batch, step)

    def energy_slack(self, slowdown_pct: int, duration_s: int) -> int:
        """Accepts collectives slowed by at most slowdown_pct percent for duration_s
        seconds while the host's energy is constrained (SPEC §7.10); 0, 0 withdraws.
        Returns the unix time the declaration ends (0 when withdrawn)."""
        return self.native.energy_slack(slowdown_pct, duration_s)

    # ---- registered memory ---------------------------------------------------

    def alloc(self, nbytes: int) -> Any:
        """Registered memory (a buffer-protocol object) that collectives and
        checkpoints use in place; freed when the last reference goes."""
        return self.native.alloc(nbytes)

    def is_registered(self, address: int, nbytes: int) -> bool:
        """Whether ``[address, address + nbytes)`` lies in this device's registered memory."""
        return self.native.is_registered(address, nbytes)

    def memory_stats(self) -> Dict[str, int]:
        """The registered-memory pool: blocks, live and cached bytes, hits and misses."""
        return self.native.pool_stats()

    def trim_memory(self) -> int:
        """Gives cached registered memory back to the device; returns the bytes freed."""
        return self.native.pool_trim()

    # ---- events ---------------------------------------------------------------

    def subscribe(self, topics: TopicsArg = (Topic.MAINTENANCE, Topic.PREEMPTION),
                  from_seq: Optional[int] = None) -> None:
        """Starts (or replaces) the subscription. ``from_seq=None`` resumes after
        the last acknowledged event, so a restarted job sees what it missed."""
        seq = _C["HZ_SEQ_CURSOR"] if from_seq is None else from_seq
        self.native.subscribe(topic_mask(topics), seq)

    def next_event(self, timeout: Optional[float] = None) -> Optional[Event]:
        """The next event, waiting at most ``timeout`` seconds (None: until one
        comes, 0: only what is already there); None when none came."""
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        while True:
            left = _WAIT_SLICE_S if deadline is None else deadline - time.monotonic()
            # At least a millisecond: the library looks at the queue only when it waits.
            ms = max(1, int(min(left, _WAIT_SLICE_S) * 1000))
            with self._events_lock:
                record = self.native.next_event(ms)
            if record is not None:
                return Event.from_record(record)
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def events(self, timeout: Optional[float] = None) -> Iterator[Event]:
        """Yields events as they come; stops after ``timeout`` seconds without one."""
        while True:
            ev = self.next_event(timeout)
            if ev is None:
                return
            yield ev

    def fileno(self) -> int:
        """A descriptor that polls readable when an event may be waiting (for
        ``selectors`` and asyncio); then call ``next_event(0)``. Subscribe first."""
        return self.native.event_fd()

    async def next_event_async(self, timeout: Optional[float] = None) -> Optional[Event]:
        """Awaits the next event without blocking the event loop."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            ev = self.next_event(0)
            if ev is not None:
                return ev
            ready = loop.create_future()
            fd = self.fileno()
            loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
            try:
                left = None if deadline is None else max(0.0, deadline - loop.time())
                await asyncio.wait_for(ready, min(left, _WAIT_SLICE_S) if left is not None
                                       else _WAIT_SLICE_S)
            except asyncio.TimeoutError:
                if deadline is not None and loop.time() >= deadline:
                    return self.next_event(0)
            finally:
                loop.remove_reader(fd)

    def ack(self, event: Union[Event, int], approve: bool = False) -> None:
        """Acknowledges every event up to ``event``; ``approve=True`` also tells
        the provider that an approvable maintenance or preemption may start
        early (the job has saved what it needs)."""
        seq = event.seq if isinstance(event, Event) else int(event)
        self.native.ack(seq, _C["HZ_ACK_F_APPROVE"] if approve else 0)

    # ---- checkpoints ------------------------------------------------------------

    def set_checkpoint_policy(self, stream: int, *, retention: int = 2,
                              tier: Tier = Tier.LOCAL_DISK, stall_budget_ms: int = 1000,
                              rpo_s: int = 60, auto_save_on_notice: bool = False) -> None:
        """Creates the stream (1..2**32-1) or replaces its policy."""
        flags = _C["HZ_CKPT_F_AUTO_SAVE_ON_NOTICE"] if auto_save_on_notice else 0
        self.native.ckpt_set_policy(stream, flags, retention, int(tier), stall_budget_ms, rpo_s)

    def list_checkpoints(self, stream: int, max_entries: int = 1024) -> List[CheckpointInfo]:
        """The stream's complete checkpoints, oldest first."""
        return [CheckpointInfo.from_native(d) for d in self.native.ckpt_list(stream, max_entries)]

    def delete_checkpoint(self, stream: int, step: int = LATEST) -> None:
        """Removes a checkpoint from every tier."""
        self.native.ckpt_delete(stream, step)

    def save_state(self, state: Any, *, stream: int, step: int,
                   extra: Optional[Dict[str, Any]] = None) -> "SaveResult":
        """Saves the tensors of ``state`` (a state_dict, or nested dicts and
        lists of them) through the provider; see :func:`harmonaize.checkpoint.save_state`."""
        from .checkpoint import save_state
        return save_state(self, state, stream=stream, step=step, extra=extra)

    def restore_state(self, *, stream: int, step: int = LATEST, into: Any = None,
                      strict: bool = True) -> Tuple[Any, "RestoreResult"]:
        """Restores a checkpoint saved with :meth:`save_state`; see
        :func:`harmonaize.checkpoint.restore_state`."""
        from .checkpoint import restore_state
        return restore_state(self, stream=stream, step=step, into=into, strict=strict)

    # ---- communicators ----------------------------------------------------------

    def new_uid(self) -> bytes:
        """A fresh communicator uid (32 bytes) to hand to the other ranks."""
        return self.native.new_uid()

    def communicator(self, uid: bytes, nranks: int, rank: int, timeout: float = 300.0) -> Any:
        """Joins a raw communicator (blocks until every rank joined). For
        PyTorch use ``init_process_group(backend="harmonaize")`` instead."""
        if not 0 <= rank < nranks:
            raise InvalidArgumentError(f"rank {rank} is not in [0, {nranks})")
        return _native._Communicator(self.native, uid, nranks, rank, int(timeout * 1000))


_lock = threading.Lock()
_device: Optional[Device] = None


def device(spec: Optional[str] = None) -> Device:
    """This process's device, opened on first use: ``spec``, else ``$HZ_DEVICE``
    (``/dev/harmonaize0`` or ``vhost-user:/path/to.sock``), else the first
    ``/dev/harmonaizeN``. Later calls return the same device; asking for a
    different one is an error (one session per process)."""
    global _device
    with _lock:
        if _device is None:
            _device = Device(spec or os.environ.get("HZ_DEVICE"))
        elif spec and spec != _device.spec:
            raise InvalidArgumentError(
                f"this process already uses device {_device.spec!r}; cannot also open {spec!r}")
        return _device

__all__ = ["Device", "DeviceInfo", "CheckpointInfo", "Topology", "Tier", "LATEST", "device"]
