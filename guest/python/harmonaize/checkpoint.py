# SPDX-License-Identifier: Apache-2.0
"""Provider-executed checkpoints of PyTorch state.

:func:`save_state` hands the tensors of a state (a ``state_dict``, or nested
dicts, lists and tuples holding state_dicts, tensors and plain values) to
the provider, which snapshots them and persists them in the background.
Each tensor is one slice of the checkpoint:

* **zero-copy** when it is a contiguous CPU tensor in the device's registered
  memory (tensors the backend's allocator placed there, or ``Device.alloc``
  buffers): the provider reads it in place;
* **staged** otherwise: it is copied into one registered staging block first.

The layout (paths, dtypes, shapes) and the non-tensor values travel as JSON
metadata inside the checkpoint, so :func:`restore_state` can rebuild the
state, or restore in place ``into`` existing tensors (zero-copy when they are
registered).
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .errors import InvalidArgumentError

if TYPE_CHECKING:
    import torch

    from .device import CheckpointInfo, Device

_FORMAT = "harmonaize.state/1"
_META_CAPACITY = 1 << 20  # the device limits a request's readable part to about this
_ALIGN = 64


@dataclasses.dataclass(frozen=True)
class SaveResult:
    """What a save did: the checkpoint, and how each tensor reached the provider."""

    info: "CheckpointInfo"
    tensors: int
    zero_copy_bytes: int
    staged_bytes: int


@dataclasses.dataclass(frozen=True)
class RestoreResult:
    """What a restore did; ``extra`` is the dict given to :func:`save_state`."""

    info: "CheckpointInfo"
    tensors: int
    zero_copy_bytes: int
    staged_bytes: int
    extra: Optional[Dict[str, Any]]


# ---- the state's structure, as JSON with tensors taken out ------------------


def _flatten(obj: Any, path: str, tensors: List[Tuple[str, "torch.Tensor"]]) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        if obj.layout != torch.strided or obj.is_quantized:
            raise InvalidArgumentError(f"{path}: only dense tensors can be checkpointed")
        if obj.device.type != "cpu":
            raise InvalidArgumentError(f"{path}: only CPU tensors can be checkpointed")
        tensors.append((path, obj))
        return {"T": len(tensors) - 1}
    if isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            if not isinstance(k, (str, int, float, bool)) and k is not None:
                raise InvalidArgumentError(f"{path}: key {k!r} is not a str, int, float or bool")
            items.append([k, _flatten(v, f"{path}/{k}", tensors)])
        return {"D": items}
    if isinstance(obj, (list, tuple)):
        kind = "L" if isinstance(obj, list) else "U"
        return {kind: [_flatten(v, f"{path}/{i}", tensors) for i, v in enumerate(obj)]}
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return {"V": obj}
    raise InvalidArgumentError(f"{path}: cannot checkpoint a {type(obj).__name__}")


def _unflatten(node: Dict[str, Any], tensors: List["torch.Tensor"]) -> Any:
    (kind, value), = node.items()
    if kind == "T":
        return tensors[value]
    if kind == "D":
        return {k: _unflatten(v, tensors) for k, v in value}
    if kind == "L":
        return [_unflatten(v, tensors) for v in value]
    if kind == "U":
        return tuple(_unflatten(v, tensors) for v in value)
    return value


def _dtype(name: str) -> "torch.dtype":
    import torch

    dtype = getattr(torch, name.replace("torch.", ""), None)
    if not isinstance(dtype, torch.dtype):
        raise InvalidArgumentError(f"checkpoint holds an unknown dtype {name!r}")
    return dtype


# ---- placing tensors: in place when registered, else through staging --------


class _Placement:
    """Slices for a list of tensors: their own memory when the device can read
    or write it in place, otherwise a region of one staging block."""

    def __init__(self, device: "Device", tensors: List["torch.Tensor"]) -> None:
        self.slices: List[Tuple[int, int]] = []
        self.staged: List[Tuple["torch.Tensor", int, int]] = []  # tensor, offset, bytes
        self.zero_copy_bytes = 0
        offset = 0
        for t in tensors:
            n = t.numel() * t.element_size()
            if n == 0:
                continue
            if t.is_contiguous() and device.is_registered(t.data_ptr(), n):
                self.slices.append((t.data_ptr(), n))
                self.zero_copy_bytes += n
            else:
                self.slices.append((-1, n))  # filled in once the block exists
                self.staged.append((t, offset, n))
                offset += (n + _ALIGN - 1) // _ALIGN * _ALIGN
        self.staged_bytes = sum(n for _, _, n in self.staged)
        # A checkpoint has at least one slice; a state without tensor bytes gets one pad byte.
        self.block = device.alloc(max(offset, 1)) if offset or not self.slices else None
        if not self.slices:
            self.slices.append((self.block.address, 1))
        it = iter(self.staged)
        for i, (addr, n) in enumerate(self.slices):
            if addr == -1:
                _, off, _ = next(it)
                self.slices[i] = (self.block.address + off, n)

    def _view(self, offset: int, n: int) -> "torch.Tensor":
        import torch

        return torch.frombuffer(self.block, dtype=torch.uint8, count=n, offset=offset)

    def copy_in(self) -> None:
        """Staged tensors' bytes into the block (before a save)."""
        for t, off, n in self.staged:
            self._view(off, n).copy_(t.detach().contiguous().reshape(-1).view(dtype=_byte()))

    def copy_out(self) -> None:
        """The block's bytes into the staged tensors (after a restore); also
        into parameters that require grad, as load_state_dict does."""
        import torch

        with torch.no_grad():
            for t, off, n in self.staged:
                t.copy_(self._view(off, n).view(dtype=t.dtype).reshape(t.shape))


def _byte() -> "torch.dtype":
    import torch

    return torch.uint8


# ---- save and restore --------------------------------------------------------


def save_state(device: "Device", state: Any, *, stream: int, step: int,
               extra: Optional[Dict[str, Any]] = None) -> SaveResult:
    """Saves ``state`` as checkpoint ``step`` of ``stream`` (a stream whose
    policy was set with ``Device.set_checkpoint_policy``). Steps of a stream
    must increase. The call returns once the provider holds a snapshot; the
    tensors may change afterwards. ``extra`` (JSON-serialisable) is stored
    alongside and returned by :func:`restore_state`."""
    from .device import CheckpointInfo

    entries: List[Tuple[str, "torch.Tensor"]] = []
    skeleton = _flatten(state, "", entries)
    tensors = [t for _, t in entries]
    placement = _Placement(device, tensors)
    placement.copy_in()
    meta = json.dumps({
        "format": _FORMAT,
        "skeleton": skeleton,
        "tensors": [{"path": p, "dtype": str(t.dtype), "shape": list(t.shape)} for p, t in entries],
        "extra": extra,
    }, separators=(",", ":")).encode()
    if len(meta) > _META_CAPACITY:
        raise InvalidArgumentError(f"the state's layout needs {len(meta)} bytes of metadata; "
                                   f"at most {_META_CAPACITY} fit in a checkpoint")
    info = device.native.ckpt_save(stream, step, placement.slices, meta)
    return SaveResult(CheckpointInfo.from_native(info), len(tensors), placement.zero_copy_bytes,
                      placement.staged_bytes)


def _targets(meta: Dict[str, Any], into: Any, strict: bool) -> List["torch.Tensor"]:
    """The tensors to restore into: ``into``'s (matched by path) or new ones."""
    import torch

    records = meta["tensors"]
    given: Dict[str, "torch.Tensor"] = {}
    if into is not None:
        found: List[Tuple[str, "torch.Tensor"]] = []
        _flatten(into, "", found)
        given = dict(found)
        missing = [r["path"] for r in records if r["path"] not in given]
        unexpected = sorted(set(given) - {r["path"] for r in records})
        if strict and (missing or unexpected):
            raise InvalidArgumentError(f"checkpoint and target differ: missing in target "
                                       f"{missing[:5]}, not in checkpoint {unexpected[:5]}")
    out = []
    for r in records:
        dtype, shape = _dtype(r["dtype"]), torch.Size(r["shape"])
        t = given.get(r["path"])
        if t is None:
            t = torch.empty(shape, dtype=dtype)
        elif t.dtype != dtype or t.shape != shape:
            raise InvalidArgumentError(f"{r['path']}: checkpoint holds {dtype}{list(shape)}, "
                                       f"target is {t.dtype}{list(t.shape)}")
        out.append(t)
    return out


def restore_state(device: "Device", *, stream: int, step: Optional[int] = None, into: Any = None,
                  strict: bool = True) -> Tuple[Any, RestoreResult]:
    """Restores checkpoint ``step`` (default: the newest) of ``stream``.

    Returns ``(state, result)``: the state as saved, its tensors new ones, or
    ``into``'s own tensors when ``into`` (a structure like the saved one, e.g.
    ``{"model": model.state_dict()}``) is given; those are written in place.
    With ``strict``, ``into`` must hold exactly the saved tensors. Every byte
    is verified by the provider (CRC32C) before any is written."""
    from .device import LATEST, CheckpointInfo

    probe, raw = device.native.ckpt_restore(stream, LATEST if step is None else step, [],
                                            _META_CAPACITY)
    meta = json.loads(raw)
    if meta.get("format") != _FORMAT:
        raise InvalidArgumentError(f"checkpoint {probe['step']} of stream {stream} was not "
                                   f"saved by harmonaize.save_state")
    tensors = _targets(meta, into, strict)
    placement = _Placement(device, tensors)
    # The probe named the step; restoring that one cannot race a newer save.
    info, _ = device.native.ckpt_restore(stream, probe["step"], placement.slices, _META_CAPACITY)
    placement.copy_out()
    state = _unflatten(meta["skeleton"], tensors)
    return state, RestoreResult(CheckpointInfo.from_native(info), len(tensors),
                                placement.zero_copy_bytes, placement.staged_bytes, meta["extra"])


__all__ = ["save_state", "restore_state", "SaveResult", "RestoreResult"]
