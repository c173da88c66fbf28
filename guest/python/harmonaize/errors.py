# SPDX-License-Identifier: Apache-2.0
"""Exceptions for every libharmonaize error code.

Each ``hz_err`` code of ``include/harmonaize/hz.h`` raises its own class; all
derive from :class:`HarmonaizeError`, itself a :class:`RuntimeError`, so code
that already catches the ``RuntimeError`` torch.distributed raises keeps
working. Two groups sit between the base and the codes:
:class:`CollectiveError` (a communicator failed: timeout, abort, mismatch) and
:class:`DeviceLostError` (the device or its service went away).

Every instance carries ``code`` (the negative ``hz_err`` value) and ``name``
(its C name, e.g. ``"HZ_EABORTED"``).
"""

from __future__ import annotations

from typing import Dict, Optional, Type


class HarmonaizeError(RuntimeError):
    """A libharmonaize call failed."""

    code: int = 0
    name: str = "HZ_OK"

    def __init__(self, message: str = "", *, code: Optional[int] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
            self.name = _NAMES.get(code, f"hz_err({code})")

    def __reduce__(self):  # keeps the code across pickling (multiprocessing)
        return (_rebuild, (self.code, str(self)))


class CollectiveError(HarmonaizeError):
    """A communicator could not complete an operation on every rank."""


class DeviceLostError(HarmonaizeError):
    """The device, its connection or the host service went away."""


class InvalidArgumentError(HarmonaizeError, ValueError):
    """HZ_EINVAL: a malformed request or argument."""

    code, name = -1, "HZ_EINVAL"


class NotSupportedError(HarmonaizeError):
    """HZ_ENOTSUP: the device does not offer this operation or feature."""

    code, name = -2, "HZ_ENOTSUP"


class PermissionDeniedError(HarmonaizeError):
    """HZ_EPERM: the object belongs to another tenant, or a class is not allowed."""

    code, name = -3, "HZ_EPERM"


class NotFoundError(HarmonaizeError, LookupError):
    """HZ_ENOENT: no such object (stream, checkpoint, communicator, region)."""

    code, name = -4, "HZ_ENOENT"


class AlreadyExistsError(HarmonaizeError):
    """HZ_EEXIST: the object already exists (a checkpoint step, a rank)."""

    code, name = -5, "HZ_EEXIST"


class LimitExceededError(HarmonaizeError):
    """HZ_ELIMIT: a tenant quota or device limit was reached."""

    code, name = -6, "HZ_ELIMIT"


class TryAgainError(HarmonaizeError):
    """HZ_EAGAIN: temporarily out of resources; the call may be retried."""

    code, name = -7, "HZ_EAGAIN"


class TimedOutError(CollectiveError):
    """HZ_ETIMEDOUT: not every rank arrived within the communicator's timeout."""

    code, name = -8, "HZ_ETIMEDOUT"


class AbortedError(CollectiveError):
    """HZ_EABORTED: the communicator was aborted (a rank died, left, timed out or aborted)."""

    code, name = -9, "HZ_EABORTED"


class MismatchError(CollectiveError):
    """HZ_EMISMATCH: ranks disagree on the operation, count, type, op or root."""

    code, name = -10, "HZ_EMISMATCH"


class UnregisteredMemoryError(HarmonaizeError):
    """HZ_EFAULT: a buffer lies outside registered memory."""

    code, name = -11, "HZ_EFAULT"


class HostIOError(HarmonaizeError):
    """HZ_EIO: the host failed to read or write storage."""

    code, name = -12, "HZ_EIO"


class CorruptError(HarmonaizeError):
    """HZ_ECORRUPT: stored data failed verification (CRC32C)."""

    code, name = -13, "HZ_ECORRUPT"


class ShutdownError(DeviceLostError):
    """HZ_ESHUTDOWN: the host service is shutting down."""

    code, name = -14, "HZ_ESHUTDOWN"


class VersionError(HarmonaizeError):
    """HZ_EVERSION: the device speaks an incompatible protocol version."""

    code, name = -15, "HZ_EVERSION"


class TooSmallError(HarmonaizeError):
    """HZ_ETOOSMALL: a result buffer was too small."""

    code, name = -16, "HZ_ETOOSMALL"


class BusyError(HarmonaizeError):
    """HZ_EBUSY: the object is in use (a save in progress, a region in flight)."""

    code, name = -17, "HZ_EBUSY"


class StateError(HarmonaizeError):
    """HZ_ESTATE: not valid in the current state (e.g. events before subscribing)."""

    code, name = -18, "HZ_ESTATE"


class WrongQueueError(HarmonaizeError):
    """HZ_EQUEUE: the opcode is not allowed on the queue it was sent on."""

    code, name = -19, "HZ_EQUEUE"


class NoDeviceError(DeviceLostError):
    """HZ_ENODEV: no HarmonAIze device, or it went away."""

    code, name = -100, "HZ_ENODEV"


class TransportError(DeviceLostError):
    """HZ_ETRANSPORT: the transport to the device failed (connection lost, bad reply)."""

    code, name = -101, "HZ_ETRANSPORT"


class OutOfMemoryError(HarmonaizeError):
    """HZ_ENOMEM: out of memory or of registered memory."""

    code, name = -102, "HZ_ENOMEM"


class PendingError(HarmonaizeError):
    """HZ_EPENDING: the request is still in progress."""

    code, name = -103, "HZ_EPENDING"


_CLASSES: Dict[int, Type[HarmonaizeError]] = {
    cls.code: cls
    for cls in (
        InvalidArgumentError, NotSupportedError, PermissionDeniedError, NotFoundError,
        AlreadyExistsError, LimitExceededError, TryAgainError, TimedOutError, AbortedError,
        MismatchError, UnregisteredMemoryError, HostIOError, CorruptError, ShutdownError,
        VersionError, TooSmallError, BusyError, StateError, WrongQueueError, NoDeviceError,
        TransportError, OutOfMemoryError, PendingError,
    )
}
_NAMES: Dict[int, str] = {code: cls.name for code, cls in _CLASSES.items()}


def error_class(code: int) -> Type[HarmonaizeError]:
    """The exception class raised for an ``hz_err`` code."""
    return _CLASSES.get(code, HarmonaizeError)


def error_for(code: int, message: str) -> HarmonaizeError:
    """An exception instance for ``code`` (unknown codes give a plain HarmonaizeError)."""
    cls = error_class(code)
    if cls is HarmonaizeError:
        return HarmonaizeError(message, code=code)
    return cls(message)


def _rebuild(code: int, message: str) -> HarmonaizeError:
    return error_for(code, message)


__all__ = ["HarmonaizeError", "CollectiveError", "DeviceLostError", "error_class", "error_for"] + [
    cls.__name__ for cls in _CLASSES.values()
]
