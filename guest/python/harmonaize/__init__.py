# SPDX-License-Identifier: Apache-2.0
"""HarmonAIze for Python: the tenant side of the harmonaize device.

The device is opened once per process (:func:`device`: ``$HZ_DEVICE``, e.g.
``vhost-user:/run/harmonaize/t1.sock`` for a container tenant, or the first
``/dev/harmonaizeN`` in a VM). Through it a job

* receives provider notices (maintenance, preemption, failures, ...):
  :meth:`Device.subscribe`, :meth:`Device.events`, :meth:`Device.fileno` for
  selectors and asyncio, :meth:`Device.ack` (with ``approve=True`` to let a
  maintenance start early);
* checkpoints through the provider: :meth:`Device.save_state` and
  :meth:`Device.restore_state` for PyTorch state, with stream policies,
  listing and deletion;
* declares batch-size ranges (:meth:`Device.hint_batch_size`) and reads the
  coarse topology summary (:meth:`Device.topology`);
* runs collectives: ``import harmonaize.distributed`` registers the
  torch.distributed backend ``"harmonaize"``.

Every libharmonaize error raises a subclass of :class:`HarmonaizeError`
(see :mod:`harmonaize.errors`).
"""

from .device import (LATEST, CheckpointInfo, Device, DeviceInfo, Tier, Topology,  # noqa: F401
                     device)
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _error_names
from .events import ALL_DEVICES, KINDS, Event, Topic, topic_mask  # noqa: F401

__version__ = "0.1.0"

__all__ = ["Device", "DeviceInfo", "CheckpointInfo", "Topology", "Tier", "LATEST", "device",
           "Event", "Topic", "KINDS", "ALL_DEVICES", "topic_mask"] + list(_error_names)
