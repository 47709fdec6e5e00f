"""Input events: what the :class:`skpubsub.io.validate.Gate` makes of each line.

Events are made only by the Gate; engines trust them. ``seq`` is the event's
position in the stream (its line number when read from a file) and breaks
ranking ties: a larger ``seq`` ranks first (SPEC section 1). A line the Gate turns
down becomes a :class:`Rejection`. Each carries its ``label``, what the run's
metrics count it as. (Messages between the runtime and its engines live in
:mod:`skpubsub.engine.messages`; what engines emit, in :mod:`skpubsub.io.notifications`.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, groupby, repeat
from operator import attrgetter
from typing import Any, Union

import msgspec
import numpy as np

from .lexicon import Words

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


_SUB_FIELDS = tuple(Sub.__struct_fields__)  # positional order of Sub
_SUB_DEFAULTS = dict(zip(_SUB_FIELDS[len(_SUB_FIELDS) - len(Sub.__struct_defaults__):], Sub.__struct_defaults__))
_PUB_FIELDS = tuple(Pub.__struct_fields__)
_PUB_DEFAULTS = dict(zip(_PUB_FIELDS[len(_PUB_FIELDS) - len(Pub.__struct_defaults__):], Pub.__struct_defaults__))


class Packed(list):
    """A block's column, a list, that pickles as the C call that makes it again (``made``:
    the callable and its arguments, an array's ``tolist`` or a text's ``split``): one array
    or string through ``run``'s pipe instead of a million objects, unpickled as the plain
    list (``rawsubs``' columns). Never changed once made: it would pickle as it was made."""

    __slots__ = ("made",)

    @classmethod
    def of(cls, items: list, made: tuple) -> "Packed":
        out = cls(items)
        out.made = made
        return out

    def __reduce__(self):
        return self.made


def packed(col: np.ndarray) -> Packed:
    """``col.tolist()``, pickled as the array."""
    col = np.ascontiguousarray(col)
    return Packed.of(col.tolist(), (np.ndarray.tolist, (col,)))


class Rects(Sequence):
    """A range block's rectangles as one ``(n, 4)`` float64 array (``rawsubs`` reads them so):
    as a sequence the tuples of four floats they stand for, made only when asked for; a
    slice is a view. The engine's ``SubTable.add_many`` reads the array itself."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    @classmethod
    def concat(cls, parts: list["Rects"]) -> "Rects":
        return cls(np.concatenate([p.array for p in parts]))

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Rects(self.array[i])
        return tuple(self.array[i].tolist())

    def __iter__(self):
        return map(tuple, self.array.tolist())

    def __reduce__(self):
        return Rects, (self.array,)


class _Block(Sequence):
    """A run of events of one class as columns, one list (or ``range``) a field, in stream
    order: :class:`SubBlock`, :class:`PubBlock`. A column that is None holds the field's
    default for every record. As a sequence it is its events, made only when asked for
    (``block[i]``, iteration); ``block[i:j]`` is the columns' slice."""

    __slots__ = ()
    EVENT: Any = None  # the event class
    FIELDS: tuple[str, ...] = ()  # its fields, in positional order
    DEFAULTS: dict[str, Any] = {}
    OPTIONAL: tuple[str, ...] = ()  # the fields None by default: a column of None is left out

    def __init__(self, **cols: Any) -> None:
        n = len(cols["seq"])
        for f in self.FIELDS:
            v = cols.get(f)
            if v is not None and len(v) != n:
                raise ValueError(f"column {f} has {len(v)} values, seq {n}")
            setattr(self, f, v)

    @classmethod
    def of(cls, evs: list):
        """The columns of ``evs`` (a column of defaults left None). O(n) in C loops."""
        cols: dict[str, Any] = {f: list(map(attrgetter(f), evs)) for f in cls.FIELDS}
        for f in cls.OPTIONAL:
            col = cols[f]
            if col.count(None) == len(col):
                cols[f] = None
        return cls(**cols)

    @classmethod
    def join(cls, parts: list):
        """One block of consecutive ``parts`` (blocks of this class, or single events)."""
        blocks = [b for is_block, run in groupby(parts, lambda p: type(p) is cls)  # a run of events: one ``of``
                  for b in (run if is_block else (cls.of(list(run)),))]
        if len(blocks) == 1:
            return blocks[0]
        cols: dict[str, Any] = {}
        for f in cls.FIELDS:
            got = [getattr(b, f) for b in blocks]
            if all(c is None for c in got):
                cols[f] = None
            elif all(type(c) is Words for c in got) and (w := Words.concat(got)) is not None:
                cols[f] = w  # coded keywords stay codes
            elif all(type(c) is Rects for c in got):
                cols[f] = Rects.concat(got)
            else:
                d = cls.DEFAULTS.get(f)
                cols[f] = list(chain.from_iterable(repeat(d, len(b)) if c is None else c
                                                   for b, c in zip(blocks, got)))
        return cls(**cols)

    def column(self, f: str) -> Any:
        """Field ``f`` of every record: its column, or its default repeated when None."""
        c = getattr(self, f)
        return repeat(self.DEFAULTS[f], len(self.seq)) if c is None else c

    def __len__(self) -> int:
        return len(self.seq)

    def __iter__(self):
        return map(self.EVENT, *map(self.column, self.FIELDS))

    def _slice(self, i: slice):
        out = type(self).__new__(type(self))
        for f in self.FIELDS:
            c = getattr(self, f)
            setattr(out, f, None if c is None else c[i])
        return out

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self._slice(i)
        defaults = self.DEFAULTS
        return self.EVENT(*(defaults[f] if c is None else c[i]
                            for f, c in zip(self.FIELDS, map(self.__getattribute__, self.FIELDS))))


class SubBlock(_Block):
    """A run of subscriptions as columns, one list (or ``range``) a field of :class:`Sub`:
    what the Gate makes of a block of subscription lines it judged by columns, and what the
    engine registers at once (``SubTable.add_many``) without a ``Sub`` a record. A range
    block has no ``x``, ``y``, ``k``, ... columns; a block without expiries no ``expires``.
    ``one_kind``: the one kind of every record, or None when they differ."""

    __slots__ = _SUB_FIELDS + ("one_kind",)
    EVENT, FIELDS, DEFAULTS, OPTIONAL = Sub, _SUB_FIELDS, _SUB_DEFAULTS, ("rect", "weights", "expires")

    def __init__(self, **cols: Any) -> None:
        super().__init__(**cols)
        kinds, n = self.kind, len(self.seq)
        self.one_kind = kinds[0] if n and kinds.count(kinds[0]) == n else None

    def _slice(self, i: slice) -> "SubBlock":
        out = super()._slice(i)
        out.one_kind = self.one_kind if len(out.seq) else None
        if out.one_kind is None and len(out.seq):
            kinds = out.kind
            out.one_kind = kinds[0] if kinds.count(kinds[0]) == len(kinds) else None
        return out

    def __repr__(self) -> str:
        return f"SubBlock({len(self)} subscriptions, kind={self.one_kind})"


class PubBlock(_Block):
    """A run of objects as columns, one list (or ``range``) a field of :class:`Pub`: what
    the Gate makes of a block of ``pub`` lines it judged by columns, and what the engine's
    publish path reads (``store.objects.pub_columns``) without a ``Pub`` a record. A block
    without expiries has no ``expires`` column."""

    __slots__ = _PUB_FIELDS
    EVENT, FIELDS, DEFAULTS, OPTIONAL = Pub, _PUB_FIELDS, _PUB_DEFAULTS, ("expires",)

    def __repr__(self) -> str:
        return f"PubBlock({len(self)} objects)"


BLOCKS = (SubBlock, PubBlock)


def objects_as_blocks(evs: list) -> list:
    """``evs`` with each run of objects made one :class:`PubBlock`, as ``run``'s reader hands
    them to the engine (``events_of`` undoes it)."""
    return [b for objects, run in groupby(evs, lambda ev: type(ev) is Pub)
            for b in ((PubBlock.of(list(run)),) if objects else run)]


def events_of(items) -> list:
    """``items`` (events, :class:`SubBlock` s and :class:`PubBlock` s) as the events they are, in order."""
    return list(chain.from_iterable(it if type(it) in BLOCKS else (it,) for it in items))


@dataclass(frozen=True, slots=True)
class Rejection:
    """A line (or record) the Gate turned down: ``error`` is the reason, ``raw`` the text
    shown in ``rejected.jsonl``, ``label`` what it meant to be (``op_label`` of its op and
    kind, read by the Gate's own parse) or ``UNREADABLE``."""

    line: int
    error: str
    raw: str
    label: str = UNREADABLE
