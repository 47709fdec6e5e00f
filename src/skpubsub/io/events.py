"""Input events: what the :class:`skpubsub.io.validate.Gate` makes of each line.

Events are made only by the Gate; engines trust them. ``seq`` is the event's
position in the stream (its line number when read from a file) and breaks
ranking ties: a larger ``seq`` ranks first (SPEC section 1). A line the Gate turns
down becomes a :class:`Rejection`. Each carries its ``label``, what the run's
metrics count it as. (Messages between the runtime and its engines live in
:mod:`skpubsub.engine.messages`; what engines emit, in :mod:`skpubsub.io.notifications`.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import msgspec

Id = Union[int, str]
Time = Union[int, float]

RANGE, KNN, TOPK = "range", "knn", "topk"
KINDS = (RANGE, KNN, TOPK)
MAX_K = 1000  # the largest k a kNN or top-k subscription may ask for (SPEC 1)
UNREADABLE = "unreadable"  # the label of a rejected line whose op could not be read


def op_label(op: str, kind: str | None = None) -> str:
    """What metrics count an event as: its op, a ``sub`` with its kind (``sub:knn``)."""
    return f"sub:{kind}" if op == "sub" and kind is not None else op


_SUB_LABEL = {kind: op_label("sub", kind) for kind in KINDS}

# Events are msgspec Structs: made in C, a Sub in 0.1 us where a slotted dataclass takes
# 0.5 (and a frozen one 1.4, each field through ``object.__setattr__``), more than parsing
# its line. Frozen: immutable and hashable by value. ``gc=False``: an event holds only ids,
# times and tuples of strings, never a cycle, so the collector need not track millions.
class Pub(msgspec.Struct, frozen=True, gc=False):
    seq: int
    id: Id
    t: Time
    x: float
    y: float
    keywords: tuple[str, ...]
    expires: Time | None = None  # absolute, as given (an int stays exact); only under a time window

    @property
    def label(self) -> str:
        return "pub"


class Sub(msgspec.Struct, frozen=True, gc=False):
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
    expires: Time | None = None  # as given

    @property
    def label(self) -> str:
        return _SUB_LABEL[self.kind]


class Unsub(msgspec.Struct, frozen=True, gc=False):
    seq: int
    id: Id
    t: Time

    @property
    def label(self) -> str:
        return "unsub"


Event = Union[Pub, Sub, Unsub]


@dataclass(frozen=True, slots=True)
class Rejection:
    """A line (or record) the Gate turned down: ``error`` is the reason, ``raw`` the text
    shown in ``rejected.jsonl``, ``label`` what it meant to be (``op_label`` of its op and
    kind, read by the Gate's own parse) or ``UNREADABLE``."""

    line: int
    error: str
    raw: str
    label: str = UNREADABLE
