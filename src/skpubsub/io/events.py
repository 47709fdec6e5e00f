"""The validated event types and the notifications engines emit.

Events are made only by :class:`skpubsub.io.validate.Gate`; engines trust them.
``seq`` is the event's position in the stream (its line number when read from a
file) and breaks ranking ties: a larger ``seq`` ranks first (SPEC section 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

Id = Union[int, str]
Time = Union[int, float]

RANGE, KNN, TOPK = "range", "knn", "topk"
KINDS = (RANGE, KNN, TOPK)


@dataclass(frozen=True, slots=True)
class Pub:
    seq: int
    id: Id
    t: Time
    x: float
    y: float
    keywords: tuple[str, ...]
    expires: float | None = None  # absolute; only under a time window


@dataclass(frozen=True, slots=True)
class Sub:
    seq: int
    id: Id
    t: Time
    kind: str
    keywords: tuple[str, ...]
    match_all: bool = False
    rect: tuple[float, float, float, float] | None = None  # range
    x: float = 0.0  # knn, topk
    y: float = 0.0
    k: int = 0
    alpha: float = 0.0  # topk
    weights: tuple[float, ...] | None = None  # topk, aligned with keywords; None = all 1
    expires: float | None = None


@dataclass(frozen=True, slots=True)
class Unsub:
    seq: int
    id: Id
    t: Time


@dataclass(frozen=True, slots=True)
class Tick:
    """Runtime-internal: brings a worker to time ``t`` (the expiries due there) when the
    event at stream position ``seq`` was not routed to it. Never read from input."""

    seq: int
    t: Time


@dataclass(frozen=True, slots=True)
class Backfill:
    """Runtime-internal: an alive object a worker lacked, handed over before a new
    subscription there needs it; joins the worker's window without being matched."""

    pub: Pub


@dataclass(frozen=True, slots=True)
class Drop:
    """Runtime-internal: subscription ``id`` leaves this worker (migrated away); silent."""

    id: Id


@dataclass(frozen=True, slots=True)
class Adopt:
    """Runtime-internal: a migrated subscription joins this worker, silently, with the
    results it had: recomputed from the alive objects under a retaining window (which
    the dispatcher backfilled), else rebuilt from ``held``, the objects of its result.
    ``now``: the stream's time (expiries due by then happen first, as for any event)."""

    sub: Sub
    held: tuple[Pub, ...] = ()
    now: Time | None = None


Event = Union[Pub, Sub, Unsub]


@dataclass(frozen=True, slots=True)
class Rejection:
    line: int
    error: str
    raw: str


@dataclass(frozen=True, slots=True)
class Match:
    """A range subscription receives a published object."""

    sub: Id
    t: Time
    object: Id

    def to_json(self) -> dict:
        return {"sub": self.sub, "t": self.t, "object": self.object}


@dataclass(frozen=True, slots=True)
class Change:
    """A kNN/top-k result set changed: ``added`` in new rank order, ``removed`` in old."""

    sub: Id
    t: Time
    added: tuple[Id, ...]
    removed: tuple[Id, ...]

    def to_json(self) -> dict:
        return {"sub": self.sub, "t": self.t, "added": list(self.added), "removed": list(self.removed)}


Notification = Union[Match, Change]
