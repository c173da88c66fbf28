# SPDX-License-Identifier: Apache-2.0
"""Provider notices from the device's event queue (protocol/SPEC.md, section 8).

An :class:`Event` is one record: a per-tenant sequence number, a :class:`Topic`,
a topic-specific kind, flags, coarse times and a payload. ``Event.fields``
decodes the payload of the topics of protocol version 1.0; unknown topics and
kinds keep their raw bytes, as the specification asks drivers to ignore what
they do not know.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from typing import Dict, Iterable, List, Mapping, Tuple, Union


class Topic(enum.IntEnum):
    """Event topics; subscribe with a set of these."""

    FAILURE = 0
    MAINTENANCE = 1
    PREEMPTION = 2
    CAPACITY = 3
    CONGESTION = 4
    CHECKPOINT = 5
    NEGOTIATION = 6
    HINT = 7
    ENERGY = 8
    LOST = 15  # always delivered: events the log no longer holds


#: Kind names per topic (SPEC.md 8.3).
KINDS: Mapping[Topic, Tuple[str, ...]] = {
    Topic.FAILURE: ("DEVICE_FAILED", "DEVICE_DEGRADED", "HOST_FAILED"),
    Topic.MAINTENANCE: ("SCHEDULED", "STARTED", "CANCELLED", "COMPLETED", "SERVICE_RESTARTED"),
    Topic.PREEMPTION: ("SCHEDULED", "STARTED", "CANCELLED"),
    Topic.CAPACITY: ("AVAILABLE", "RESERVATION_STARTED", "RESERVATION_ENDED",
                     "RESERVATION_RELEASED", "ALLOCATION_CHANGED"),
    Topic.CONGESTION: ("FABRIC", "HOST_MEMORY", "STORAGE"),
    Topic.CHECKPOINT: ("DURABLE", "FAILED", "JIT_SAVED", "JIT_FAILED"),
    Topic.NEGOTIATION: ("RESERVATION_REVOKED", "OFFER_WITHDRAWN", "OFFER_EXPIRED", "OFFER_MADE"),
    Topic.HINT: ("BATCH_SIZE",),
    Topic.ENERGY: ("LEVEL_CHANGED",),
    Topic.LOST: ("EVENTS_LOST",),
}

# Payload layouts: (struct format, field names), little-endian.
_PAYLOADS: Mapping[Topic, Tuple[str, Tuple[str, ...]]] = {
    Topic.FAILURE: ("<I4xQ", ("device_index", "errors")),
    Topic.MAINTENANCE: ("<QI", ("duration_s", "device_index")),
    Topic.PREEMPTION: ("<II", ("devices", "device_index")),
    Topic.CAPACITY: ("<QQQH", ("reservation_id", "count", "devices_now", "device_kind")),
    Topic.CONGESTION: ("<B", ("level",)),
    Topic.CHECKPOINT: ("<IIQII", ("stream", "tier", "step", "status", "flags")),
    Topic.NEGOTIATION: ("<QQQI4xQQQHBB", ("negotiation_id", "reservation_id", "offer_id", "reason",
                                          "start_s", "duration_s", "expires_s", "count",
                                          "locality", "device_kind")),
    Topic.HINT: ("<6I", ("suggested", "min_batch", "max_batch", "step", "n_now", "n_peak")),
    Topic.ENERGY: ("<BB", ("level", "sources")),
    Topic.LOST: ("<QQQ", ("lost", "first_seq", "last_seq")),
}

#: ``device_index`` value meaning "not one device" (the whole VM or allocation).
ALL_DEVICES = 0xFFFFFFFF
_APPROVABLE = 1 << 0
_REPLAY = 1 << 1

TopicsArg = Union[Topic, int, Iterable[Union[Topic, int]]]


def topic_mask(topics: TopicsArg) -> int:
    """The subscription mask for one topic or an iterable of topics."""
    if isinstance(topics, int):
        topics = [topics]
    mask = 0
    for t in topics:
        mask |= 1 << int(Topic(t))
    return mask


@dataclasses.dataclass(frozen=True)
class Event:
    """One provider notice."""

    seq: int
    topic: Union[Topic, int]
    kind: int
    flags: int
    time_s: int
    deadline_s: int
    payload: bytes

    @classmethod
    def from_record(cls, record: Tuple[int, int, int, int, int, int, bytes]) -> "Event":
        seq, topic, kind, flags, time_s, deadline_s, payload = record
        try:
            topic = Topic(topic)
        except ValueError:
            pass  # a topic of a later protocol version: kept as its number
        return cls(seq, topic, kind, flags, time_s, deadline_s, payload)

    @property
    def kind_name(self) -> str:
        """The kind's name (e.g. ``"SCHEDULED"``), or ``"KIND_<n>"`` when unknown."""
        names = KINDS.get(self.topic, ()) if isinstance(self.topic, Topic) else ()
        return names[self.kind] if self.kind < len(names) else f"KIND_{self.kind}"

    @property
    def approvable(self) -> bool:
        """Whether :meth:`Device.ack` may approve it (an early start)."""
        return bool(self.flags & _APPROVABLE)

    @property
    def replay(self) -> bool:
        """Whether this event was delivered before (after a reconnect or resubscribe)."""
        return bool(self.flags & _REPLAY)

    @property
    def fields(self) -> Dict[str, int]:
        """The payload decoded for the topic (empty for unknown topics)."""
        layout = _PAYLOADS.get(self.topic) if isinstance(self.topic, Topic) else None
        if layout is None:
            return {}
        fmt, names = layout
        return dict(zip(names, struct.unpack_from(fmt, self.payload)))

    def is_notice(self, *topics: Topic) -> bool:
        """True for a SCHEDULED maintenance or preemption (of the given topics, default both)."""
        wanted = topics or (Topic.MAINTENANCE, Topic.PREEMPTION)
        return self.topic in wanted and self.kind == 0

    def __str__(self) -> str:
        topic = self.topic.name if isinstance(self.topic, Topic) else f"TOPIC_{self.topic}"
        extra = ", ".join(f"{k}={v}" for k, v in self.fields.items())
        flags: List[str] = [n for n, b in (("approvable", _APPROVABLE), ("replay", _REPLAY))
                            if self.flags & b]
        return (f"event {self.seq}: {topic}/{self.kind_name}"
                f"{' (' + ', '.join(flags) + ')' if flags else ''}"
                f"{', deadline ' + str(self.deadline_s) if self.deadline_s else ''}"
                f"{' [' + extra + ']' if extra else ''}")


__all__ = ["Topic", "KINDS", "Event", "topic_mask", "ALL_DEVICES"]
