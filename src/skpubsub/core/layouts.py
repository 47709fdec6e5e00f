"""What the compiled kernels take: a few bundled layouts instead of dozens of arrays.

Each layout is a named tuple of arrays (and a few scalars) that Python builds just before a
kernel call, from the tables that own the arrays (they may have grown since the last call).
Numba passes a named tuple as one argument, so a kernel's signature reads like a sentence:
``publish_run(start, n_active, run, tables, grid, directory, work, kbest)``, where ``tables``
is a :class:`Tables` and ``work`` a :class:`Work`, named tuples of named tuples. Where a
table is a record array (the subscription, object and grid-slot tables, one record per slot,
:func:`skpubsub.core.columns.records`), the layout carries the record array itself, and a
kernel takes the field views it needs once, at its top.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np


class Postings(NamedTuple):
    """One posting store (:class:`skpubsub.core.postings.PostingStore`): a hash map from
    int64 keys to block-linked lists of int64 entries."""

    h_keys: np.ndarray
    h_vals: np.ndarray
    p_head: np.ndarray
    p_tail: np.ndarray
    p_fill: np.ndarray
    p_key: np.ndarray
    p_free: np.ndarray
    blk_next: np.ndarray
    blk_data: np.ndarray
    blk_free: np.ndarray
    meta: np.ndarray
    lv: np.ndarray  # a grid store's levels per token (``PostingStore.track_levels``)
    blk_filter: np.ndarray  # each entry's filter (``postings.FILTER``), when the store keeps them


class Subs(NamedTuple):
    """The subscription table (:class:`skpubsub.store.subscriptions.SubTable`): one record a
    slot (``rec``), keyword ids and unit weights (``kw_id``, ``kw_ws``, by ``kw_off``/``kw_len``),
    k-best buffers (``res_obj``, ``res_key``, ``res_dom``, by ``res_off``/``res_n``) and the
    buffer policy (``B_*``)."""

    rec: np.ndarray
    kw_id: np.ndarray
    kw_ws: np.ndarray
    res_obj: np.ndarray
    res_key: np.ndarray
    res_dom: np.ndarray
    policy: int


class Objects(NamedTuple):
    """The object table (:class:`skpubsub.store.objects.ObjectTable`): one record a slot,
    keyword ids by ``kw_off``/``kw_len``; ``stamp``/``next``: a refill's "already read" marks
    (slot -> last refill that read it; ``next[0]`` the last stamp used)."""

    rec: np.ndarray
    kw: np.ndarray
    stamp: np.ndarray
    next: np.ndarray


class Grid(NamedTuple):
    """A compiled grid (:class:`skpubsub.index.cgrid.CompiledGrid`): per-slot records
    (``slots``: epoch, stamp, box, pkth, tok, nkw, kw0, level, pending), its posting store,
    geometry (``geo``: x1, y1, width, height, maxdist; ``lmax``, ``max_cells``), CkQST's cost
    model (``counts``, ``theta_n``, ``warm_n``), keyword frequencies (``freq``: objects that
    carry each; ``refs``: the vocabulary's holders of each, ``placing.rarest``), the prefix filter
    (``prefix`` on while top-k slots exist, ``rb`` its bounds) and the last scan stamp."""

    slots: np.ndarray
    store: Postings
    geo: np.ndarray
    lmax: int
    max_cells: int
    counts: np.ndarray
    theta_n: float
    warm_n: int
    freq: np.ndarray
    refs: np.ndarray
    rb: np.ndarray
    prefix: bool
    stamp_next: np.ndarray


class Directory(NamedTuple):
    """aoiq's keyword-pair directory (:func:`skpubsub.index.aoiq.probe_tokens`): pair codes
    to pair ids, each pair's blocks (first block, start, count) and the blocks' third-keyword
    intervals and tokens. Empty for an index without pairs."""

    pk_keys: np.ndarray
    pk_vals: np.ndarray
    p_b0: np.ndarray
    p_start: np.ndarray
    p_count: np.ndarray
    d_min: np.ndarray
    d_max: np.ndarray
    d_tok: np.ndarray


class Run(NamedTuple):
    """A run of pubs for the publish kernel: object slots, positions, keyword ids (CSR by
    ``kwoff``), object weights, the objects leaving the window before each pub (CSR by
    ``exp_off``), and whether the window retains objects."""

    obj: np.ndarray
    x: np.ndarray
    y: np.ndarray
    kwoff: np.ndarray
    kw: np.ndarray
    wo: np.ndarray
    exp_off: np.ndarray
    exp_obj: np.ndarray
    retains: bool


class Probes(NamedTuple):
    """Objects to probe an index with: positions and keyword ids (CSR by ``kwoff``)."""

    x: np.ndarray
    y: np.ndarray
    kwoff: np.ndarray
    kw: np.ndarray


class Pre(NamedTuple):
    """Candidates found before the kernel runs (igpt's top-k, aoiq's Algorithm 2): per pub
    (``pc`` by ``pc_off``) and per expiry (``pe`` by ``pe_off``); ``foreign`` slot bits (1: held
    by another index, 2: refilled in this run, a candidate of every later object, listed in
    ``rf[:rf_n[0]]``); ``scanned``: the grid is also scanned per object."""

    foreign: np.ndarray
    pc_off: np.ndarray
    pc: np.ndarray
    pe_off: np.ndarray
    pe: np.ndarray
    rf: np.ndarray
    rf_n: np.ndarray
    scanned: bool


class Heap(NamedTuple):
    """A refill's candidate heap: key, seq (later lives), object slot; and ``ids``, room for
    one alive-store list (as many entries as the store's blocks hold)."""

    key: np.ndarray
    seq: np.ndarray
    obj: np.ndarray
    ids: np.ndarray


class Scratch(NamedTuple):
    """The publish kernel's work arrays, sized by the driver before a call (it never allocates)."""

    toks: np.ndarray  # an object's posting tokens
    probe: np.ndarray  # the scan's lookups of them in stages (probe.probe_scratch)
    srt: np.ndarray  # its keywords, sorted (aoiq's pairs)
    cands: np.ndarray  # candidate slots of one object
    hold_s: np.ndarray  # holders of the objects leaving before one pub: slot
    hold_p: np.ndarray  # ... and the expiry's index
    hold_j: np.ndarray  # ... and where the holder's buffer had the object (``_remove`` starts there)
    old_o: np.ndarray  # a refilled result before the refill: objects
    old_k: np.ndarray  # ... and keys
    heap: Heap
    queue: np.ndarray  # slots whose re-post did not fit (Python re-posts them)
    dead: np.ndarray  # objects that left the window
    ptok: np.ndarray  # a re-post's tokens
    cell: np.ndarray  # a cell box (4 int32)
    ext: np.ndarray  # a region's extent (4 float64)


class Rows(NamedTuple):
    """Output rows (the publish kernel's changes): pub index, slot, object that entered and
    its key, object that left and its key, and 1 for a removal on expiry."""

    i: np.ndarray
    s: np.ndarray
    a: np.ndarray
    d: np.ndarray
    ka: np.ndarray
    kd: np.ndarray
    r: np.ndarray


class Tables(NamedTuple):
    """The tables the publish kernel reads and changes: subscriptions, objects, and the alive
    objects' postings (``Postings``)."""

    subs: Subs
    objs: Objects
    alive: Postings


class Work(NamedTuple):
    """The publish kernel's inputs and outputs of one call besides the tables: precomputed
    candidates, work arrays, output rows and the counters (``kernel.C_*``)."""

    pre: Pre
    scratch: Scratch
    rows: Rows
    counters: np.ndarray


class NoteCols(NamedTuple):
    """Net notifications as columns (:func:`skpubsub.engine.netting.net_changes`): pub
    index, slot, range match or change, added and removed objects (CSR)."""

    i: np.ndarray
    s: np.ndarray
    match: np.ndarray
    add_off: np.ndarray
    add_obj: np.ndarray
    rem_off: np.ndarray
    rem_obj: np.ndarray


class SlotLive(NamedTuple):
    """When a grid entry ``slot << 32 | epoch`` is live (``postings.read``, overloaded in
    :mod:`skpubsub.index.cgrid`): the subscription is active, the epoch is its current one, it
    is posted on the list's level and its box covers the list's cell. Views of the records,
    taken once per scan."""

    active: np.ndarray
    epoch: np.ndarray
    level: np.ndarray
    box: np.ndarray


class ObjectLive(NamedTuple):
    """When an alive-store entry ``object << 32 | seq`` is live (``postings.read``, overloaded
    in :mod:`skpubsub.store.objects`): the object is alive and its slot not re-used since."""

    rec: np.ndarray


def cached(owner: Any, key: Any, build: Callable[[], tuple]) -> tuple[tuple, tuple]:
    """(layout, its ``plain`` form) of ``owner``, built again only when ``key`` changes (the
    capacities of the arrays it holds: growth replaces them). Building one costs microseconds
    of Python, paid per item by the kernels called once per item. Kept in ``owner._layout_cache``,
    which its snapshots leave out (``uncached``)."""
    hit = owner.__dict__.get("_layout_cache")
    if hit is None or hit[0] != key:
        lay = build()
        hit = owner._layout_cache = (key, lay, plain(lay))
    return hit[1], hit[2]


class Laid:
    """A table the kernels take as a cached layout (``_layouts()``: see ``cached``)."""

    def _layouts(self) -> tuple[tuple, tuple]:
        raise NotImplementedError

    @property
    def layout(self) -> Any:
        """The table as the kernels take it (built again after growth replaced arrays)."""
        return self._layouts()[0]

    @property
    def plain(self) -> tuple:
        """``layout`` as a plain tuple (``plain``)."""
        return self._layouts()[1]

    def __getstate__(self) -> dict:
        return uncached(self.__dict__.copy())


def uncached(state: dict) -> dict:
    """An owner's pickle state without its cached layouts."""
    state.pop("_layout_cache", None)
    return state


def plain(layout: tuple) -> tuple:
    """A layout as plain tuples, for a kernel called from Python once per item: Numba reads
    the types of plain tuples in C but of named tuples in Python (microseconds a call), so
    such a kernel takes plain tuples and names them again inside (``Subs(*subs)``)."""
    return tuple(plain(v) if isinstance(v, tuple) else v for v in layout)


def rows(cap: int) -> Rows:
    """Room for ``cap`` output rows."""
    return Rows(np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64),
                np.empty(cap, dtype=np.int64), np.empty(cap), np.empty(cap), np.empty(cap, dtype=np.int8))


def note_cols(n: int) -> NoteCols:
    """Room for ``n`` net notifications."""
    return NoteCols(np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64), np.empty(n, dtype=np.bool_),
                    np.empty(n + 1, dtype=np.int64), np.empty(n, dtype=np.int64), np.empty(n + 1, dtype=np.int64),
                    np.empty(n, dtype=np.int64))


def heap(n: int, entries: int) -> Heap:
    """Room for a refill's ``n`` candidates and a list of up to ``entries`` entries."""
    return Heap(np.empty(n), np.empty(n), np.empty(n, dtype=np.int64), np.empty(entries, dtype=np.int64))
