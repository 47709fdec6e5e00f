"""What igpt's kernels take: its own named tuples (as :mod:`skpubsub.core.layouts`), built
by :class:`.index.IGPTIndex` just before each call (growth replaces arrays)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# arena columns: lists (keyword, its groups), groups (entries, Theorem 3's statistics),
# entries (slot, kScore*, Theorem 4's suffix maxima, what the individual test reads)
LIST_COLS = {"w": np.int64, "g0": np.int64, "g1": np.int64}
GROUP_COLS = {"e0": np.int64, "e1": np.int64, "mw": np.float64, "ws": np.float64, "key": np.float64,
              "astar": np.float64}
ENTRY_COLS = {"s": np.int64, "key": np.float64, "smw": np.float64, "sws": np.float64, "sa": np.float64,
              "x": np.float64, "y": np.float64, "alpha": np.float64, "ks": np.float64, "w1": np.float64,
              "rmw": np.float64, "rws": np.float64}
# counters (tests and the bench read them): cells skipped (Lemma 6), groups skipped
# (Theorem 3), entries cut by early termination (Theorem 4), entries read, entries
# rejected individually, cells built
N_CELL, N_GROUP, N_ET, N_READ, N_INDIV, N_BUILT = range(6)


class Members(NamedTuple):
    """The top-k slots of each cell, a doubly linked list: its first slot (``head``, per
    cell; -1: none), the next and previous slot (per slot)."""

    head: np.ndarray
    nxt: np.ndarray
    prv: np.ndarray


class Cells(NamedTuple):
    """Per cell, what its last build left: its lists ``l0:l1`` in the list arena, and
    Lemma 6's bound ``lam`` (the least spatial similarity one of its subscriptions needs,
    Eq. 8; -inf: never skipped)."""

    l0: np.ndarray
    l1: np.ndarray
    lam: np.ndarray


class Lists(NamedTuple):
    """The list arena (:data:`LIST_COLS`): a posting list's keyword and its groups ``g0:g1``."""

    w: np.ndarray
    g0: np.ndarray
    g1: np.ndarray


class Groups(NamedTuple):
    """The group arena (:data:`GROUP_COLS`): an α-partition group's entries ``e0:e1`` and
    Theorem 3's statistics (maxima of maxwt, wtsum, its first kScore*, maximum α*)."""

    e0: np.ndarray
    e1: np.ndarray
    mw: np.ndarray
    ws: np.ndarray
    key: np.ndarray
    astar: np.ndarray


class Entries(NamedTuple):
    """The entry arena (:data:`ENTRY_COLS`): slot, kScore*, Theorem 4's suffix maxima (maxwt,
    wtsum, α*), and what the individual test reads (location, α, kScore snapshot, this
    keyword's weight, maximum and sum of the weights after it)."""

    s: np.ndarray
    key: np.ndarray
    smw: np.ndarray
    sws: np.ndarray
    sa: np.ndarray
    x: np.ndarray
    y: np.ndarray
    alpha: np.ndarray
    ks: np.ndarray
    w1: np.ndarray
    rmw: np.ndarray
    rws: np.ndarray


class Arenas(NamedTuple):
    """The append-only arenas a build writes at their fill marks ``tops`` (lists, groups,
    entries), room reserved by the caller."""

    lists: Lists
    groups: Groups
    entries: Entries
    tops: np.ndarray


class CellDirectory(NamedTuple):
    """Every cell's lists by keyword, then cell: the keywords ``w`` (ascending), CSR
    offsets ``off`` into the cells ``c`` (ascending per keyword) and their list ids ``li``."""

    w: np.ndarray
    off: np.ndarray
    c: np.ndarray
    li: np.ndarray


class Built(NamedTuple):
    """What a probe reads of the built cells: ``g`` leaf cells per side, the space
    (``geo``: x1, y1, width, height, maxdist), the cells, the directory and the arenas."""

    g: int
    geo: np.ndarray
    cells: Cells
    directory: CellDirectory
    lists: Lists
    groups: Groups
    entries: Entries


class Taat(NamedTuple):
    """Per slot while an object is probed (term at a time): the last probe that met it
    (``stamp``; ``next[0]`` the last stamp used), its summed share, the list it was first
    met in (-1: rejected), the text part its score needs, its 1 - α."""

    stamp: np.ndarray
    next: np.ndarray
    acc: np.ndarray
    first: np.ndarray
    need: np.ndarray
    oma: np.ndarray


def view(cls: type, table) -> tuple:
    """The named tuple ``cls`` of ``table``'s columns of the same names."""
    return cls(*(getattr(table, name) for name in cls._fields))
