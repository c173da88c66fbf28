# SPDX-License-Identifier: Apache-2.0
"""The torch.distributed backend ``"harmonaize"``.

Importing this module registers the backend::

    import harmonaize.distributed  # noqa: F401
    import torch.distributed as dist
    dist.init_process_group(backend="harmonaize")  # env://, tcp://, file://, a Store

Each rank uses its process's device (:func:`harmonaize.device`, normally from
``$HZ_DEVICE``); the ranks agree on a communicator through torch's store.
Collectives run on the provider; every operation is asynchronous, and a
failure (a rank that died, a rank that never called the collective within the
process group's timeout, a mismatch) raises a :class:`harmonaize.errors.CollectiveError`
(a ``RuntimeError``) on every rank instead of hanging.

When the process group is created, large CPU tensors start coming from the
device's registered memory (:func:`use_registered_memory`), so DDP's gradient
buckets are all-reduced in place; set ``HZ_TORCH_REGISTERED_MEMORY=0`` (or call
``use_registered_memory(False)``) to keep torch's own allocator, in which case
tensors are staged through registered memory for each operation.
"""

from __future__ import annotations

import datetime
import os
from typing import Any, Optional

import torch.distributed as dist

from . import _c10d
from .device import device

BACKEND = "harmonaize"
#: CPU tensors from this size up come from registered memory.
DEFAULT_MIN_BYTES = 64 * 1024


def _create(store: Any, rank: int, world_size: int, timeout: datetime.timedelta) -> Any:
    dev = device()
    if os.environ.get("HZ_TORCH_REGISTERED_MEMORY", "1") != "0":
        use_registered_memory(True)
    return _c10d.create_process_group(store, rank, world_size, timeout, dev.native.capsule())


def use_registered_memory(enabled: bool = True, min_bytes: int = DEFAULT_MIN_BYTES) -> bool:
    """Makes CPU tensors of at least ``min_bytes`` come from the device's
    registered memory (``enabled``), or gives torch its own allocator back.
    Tensors keep the memory they were allocated with. Returns whether the
    registered allocator is now in use."""
    if not enabled:
        _c10d.uninstall_allocator()
        return False
    return _c10d.install_allocator(device().native.capsule(), min_bytes)


def registered_memory_in_use() -> bool:
    """Whether new CPU tensors come from registered memory."""
    return _c10d.allocator_installed()


def abort(group: Optional[Any] = None) -> None:
    """Aborts the group's communicator on every rank: their pending and later
    collectives raise :class:`harmonaize.errors.AbortedError`."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    _c10d.abort(pg)


if BACKEND.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, _create)

__all__ = ["BACKEND", "DEFAULT_MIN_BYTES", "use_registered_memory", "registered_memory_in_use",
           "abort"]
