"""Columnar storage helpers: growable struct-of-arrays tables and a segment pool."""

from __future__ import annotations

import mmap
import struct
import sys
from collections import defaultdict
from contextlib import contextmanager

import numpy as np

try:  # NumPy's switch for madvise(MADV_HUGEPAGE) on its allocations of 4 MB and more (on by default)
    from numpy._core.multiarray import _get_madvise_hugepage, _set_madvise_hugepage
except ImportError:  # pragma: no cover - NumPy 1.x
    from numpy.core.multiarray import _get_madvise_hugepage, _set_madvise_hugepage


class Columns:
    """A growable struct of arrays addressed by integer slots, with a free list.

    ``add()`` is amortised O(1) (capacity doubles); ``free(slot)`` is O(1).
    Columns are plain attributes, so hot code reads ``table.x[slots]`` directly.

    ``record=True`` keeps the columns as the fields of one structured array (each column
    a strided view), so the fields of one slot share a cache line or two: a kernel that
    visits slots at random (a posting list's candidates) then misses the cache once or
    twice per slot instead of once per column.  Hot fields go first in ``spec``.
    """

    def __init__(self, spec: dict[str, tuple[type | str, object]], capacity: int = 1024,
                 record: bool = False) -> None:
        self._spec = spec
        self.capacity = 0
        self.record = record
        self._rec: np.ndarray | None = None
        self.reserve(capacity)
        self.top = 0
        self._free: list[int] = []
        self.count = 0

    def reserve(self, capacity: int) -> None:
        """Room for ``capacity`` slots (the new ones at their fill values)."""
        if capacity <= self.capacity:
            return
        old = self.capacity
        if self.record:
            self._rec = grown_records(self._rec, capacity, [(n, d, f) for n, (d, f) in self._spec.items()])
            fill = np.zeros(1, dtype=self._rec.dtype)  # padding zero, as in every record
            for name, (_, f) in self._spec.items():
                fill[name] = f
            self._fill = fill[0]
            # A record written whole as bytes: ``bytes[s * size:(s + 1) * size] = pack(*fields)``
            # (0.15 us; ``_rec[s] = fields`` 0.44). Left out of snapshots, made again here.
            self._bytes = memoryview(self._rec.view(np.uint8))
            packer = record_struct(self._rec.dtype)
            self._pack = packer.pack if packer is not None else None
            self._fill_bytes = fill.tobytes()
        for name, (dtype, fill) in self._spec.items():
            if self.record:
                arr = self._rec[name]
            else:  # (``grown``: a large column grows in place, as the records do)
                arr = grown(getattr(self, name), capacity, fill) if old else np.full(capacity, fill, dtype=dtype)
            setattr(self, name, arr)
        self.capacity = capacity

    def add(self) -> int:
        if self._free:
            slot = self._free.pop()
        else:
            if self.top == self.capacity:
                self._grow()
            slot = self.top
            self.top += 1
        self.count += 1
        return slot

    def add_many(self, n: int) -> np.ndarray:
        """``n`` slots, the same ones as ``n`` calls of ``add`` in turn."""
        reuse = self._free[len(self._free) - min(n, len(self._free)):][::-1]
        del self._free[len(self._free) - len(reuse):]
        fresh = n - len(reuse)
        if self.top + fresh > self.capacity:  # one copy, not one per doubling
            self.reserve(max(self.top + fresh, 2 * self.capacity))
        slots = np.concatenate([np.array(reuse, dtype=np.int64), np.arange(self.top, self.top + fresh)])
        self.top += fresh
        self.count += n
        return slots

    def free(self, slot: int) -> None:
        if self._rec is not None:  # one record of fill values, written whole (a field at a time: ~2 us)
            size = len(self._fill_bytes)
            self._bytes[slot * size:slot * size + size] = self._fill_bytes
        else:
            for name, (_, fill) in self._spec.items():
                getattr(self, name)[slot] = fill
        self._free.append(slot)
        self.count -= 1

    def free_many(self, slots: list[int], at: np.ndarray | None = None) -> None:
        """``free`` of each slot in turn (``at``: the same slots as an int64 array, if the caller has it)."""
        if at is None:
            at = np.asarray(slots, dtype=np.int64)
        if self._rec is not None:  # whole records of fill values, one scatter
            self._rec[at] = self._fill
        else:
            for name, (_, fill) in self._spec.items():
                getattr(self, name)[at] = fill
        self._free.extend(slots)
        self.count -= len(slots)

    def _grow(self) -> None:
        self.reserve(self.capacity * 2)

    @property
    def records(self) -> np.ndarray:
        """The record array whose fields the columns are (``record=True``): what kernels take."""
        return self._rec

    @property
    def nbytes(self) -> int:
        if self._rec is not None:
            return self._rec.nbytes
        return sum(getattr(self, name).nbytes for name in self._spec)

    def _check(self) -> None:
        """Assert the table's invariants (a test helper, O(capacity)), for tables that use
        ``add``/``free`` (igpt's arenas and the plain grid's ``where`` set ``top`` by hand and
        keep no count): ``top`` within the capacity; the free list inside ``top``, without
        duplicates; ``count`` the slots in use; a free slot, and every slot past ``top``, at
        its fill values (``free`` clears a slot)."""
        assert 0 <= self.top <= self.capacity, ("top out of range", self.top, self.capacity)
        free = np.asarray(self._free, dtype=np.int64)
        assert np.all((free >= 0) & (free < self.top)), "a free slot at or past top"
        assert len(np.unique(free)) == len(free), "a slot freed twice"
        assert self.count == self.top - len(free), ("count", self.count, self.top, len(free))
        unused = np.zeros(self.capacity, dtype=np.bool_)
        unused[self.top:] = True
        unused[free] = True
        if self._rec is not None:  # fast path: the records' bytes against a fill record's
            assert len(self._rec) == self.capacity, "record array length"
            fill = np.zeros(1, dtype=self._rec.dtype)  # padding zero, as in every record
            for name, (_, f) in self._spec.items():
                fill[name] = f
            raw = self._rec.view(np.uint8).reshape(self.capacity, -1)
            if (raw[unused] == fill.view(np.uint8)).all():
                return  # else the columns below say which field (or that only bytes differ)
        for name, (_, fill) in self._spec.items():
            col = getattr(self, name)
            assert len(col) == self.capacity, ("column length", name)
            assert np.all(col[unused] == fill), ("a free or unused slot not at its fill value", name)

    def __getstate__(self) -> dict:
        state = _used_state(self)
        state["_rec"] = state["_bytes"] = state["_pack"] = None  # ``reserve`` makes them again
        return state

    def __setstate__(self, state: dict) -> None:
        if not state.get("record"):
            _regrow(self, state, state["_spec"])  # name -> (dtype, fill)
            return
        self.__dict__.update(state)
        cap, self.capacity = self.capacity, 0
        self.reserve(cap)
        for name in self._spec:
            getattr(self, name)[: self.top] = state[name]


LINE = 64  # bytes in a cache line


def records(n: int, fields: list[tuple[str, type | str]]) -> np.ndarray:
    """``n`` records of ``fields``, each record a whole number of cache lines (when larger
    than half of one) and the first starting a line, so a slot's fields are never split
    further than they must be."""
    d = np.dtype(fields, align=True)
    size = -(-d.itemsize // LINE) * LINE if d.itemsize > LINE // 2 else d.itemsize
    d = np.dtype({"names": list(d.names), "formats": [d.fields[f][0] for f in d.names],
                  "offsets": [d.fields[f][1] for f in d.names], "itemsize": size})
    with small_pages():
        buf = np.zeros(n * size + LINE, dtype=np.uint8)
    start = -buf.ctypes.data % LINE
    return buf[start:start + n * size].view(d)


def record_struct(dtype: np.dtype) -> struct.Struct | None:
    """Packs one record of ``dtype`` from its fields' values in order, the padding zero: the
    bytes NumPy would store; None when a field is not a bool, int8/32/64 or float64."""
    codes = {"b1": "?", "i1": "b", "i4": "i", "i8": "q", "f8": "d"}
    fmt, pos = ["<"], 0
    for name in dtype.names:
        dt, off = dtype.fields[name][:2]
        if dt.str[1:] not in codes or dt.byteorder == ">":
            return None
        if off > pos:
            fmt.append(f"{off - pos}x")
        fmt.append(codes[dt.str[1:]])
        pos = off + dt.itemsize
    if dtype.itemsize > pos:
        fmt.append(f"{dtype.itemsize - pos}x")
    packer = struct.Struct("".join(fmt))
    assert packer.size == dtype.itemsize, (packer.format, dtype)
    return packer


@contextmanager
def small_pages():
    """NumPy's allocations in the block get no transparent huge pages. Where THP is on only
    for madvise'd memory (NumPy asks for it), the first touch of each 2 MB page of a fresh
    array may wait on the kernel's direct compaction: touching 512 MB of new arrays took
    0.43-1.2 s of CPU (1.8-6.9 s wall) with it, 0.22 s (0.9 s) without (NOTES.md in index/)."""
    was = _get_madvise_hugepage()
    _set_madvise_hugepage(False)
    try:
        yield
    finally:
        _set_madvise_hugepage(was)


SPAN_FROM = 4 << 20  # bytes from which a table grows inside a span (below, a copy costs little)
SPAN_SIZE = 1 << 34  # address space a span reserves (no memory until touched)
_NORESERVE = 0x4000 if sys.platform.startswith("linux") else 0  # MAP_NORESERVE (not in Python 3.11's mmap)


class _Span(mmap.mmap):
    """Address space reserved for one table that grows (index/NOTES.md, "Growth in place"):
    anonymous memory mapped without reserving swap, so only the pages a table touches cost
    memory. ``used``: the bytes the table's latest array covers; the table grows by a longer
    view of the same memory, its rows neither copied nor touched again, and any older view
    stays valid (it covers a prefix)."""

    used = 0


def _span_of(a: np.ndarray) -> _Span | None:
    """The span ``a`` is the latest whole view of, if any."""
    b = a.base
    while isinstance(b, np.ndarray):
        b = b.base
    if type(b) is not _Span or b.used != a.nbytes or not a.flags.c_contiguous:
        return None
    return b if a.ctypes.data == np.frombuffer(b, np.uint8, 1).ctypes.data else None


def _in_span(a: np.ndarray, shape: tuple, huge: bool) -> tuple[np.ndarray, bool] | None:
    """An array of ``shape`` over ``a``'s span (True: ``a``'s rows are in it already) or over a
    new one (False: the caller copies them; ``huge``: with transparent huge pages, which
    NumPy would have asked for); None when it should not or cannot (small, objects, a
    platform or a system that will not map it): the caller copies as before."""
    dtype = a.dtype
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if nbytes < SPAN_FROM or dtype.hasobject or not _NORESERVE:
        return None
    span = _span_of(a)
    if span is not None and nbytes < span.used:  # smaller (tables only grow): as before
        return None
    kept = span is not None and nbytes <= len(span)
    if not kept:
        try:
            span = _Span(-1, max(SPAN_SIZE, 4 * nbytes), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _NORESERVE)
            if huge:
                span.madvise(mmap.MADV_HUGEPAGE)
        except (OSError, ValueError, OverflowError):  # strict overcommit, an address-space limit
            return None
    span.used = nbytes
    return np.ndarray(shape, dtype=dtype, buffer=span), kept


def grown_records(old: np.ndarray | None, capacity: int, fields) -> np.ndarray:
    """``old``'s records (if any) with room for ``capacity``, the new ones at their fill
    values; ``fields``: (name, dtype, fill). A large table grows in place (``_in_span``),
    a small one is copied into fresh aligned records."""
    n = 0 if old is None else len(old)
    got = None if old is None else _in_span(old, (capacity,), False)  # as ``records``
    rec, kept = got if got is not None else (records(capacity, [(f[0], f[1]) for f in fields]), False)
    raw = rec.view(np.uint8).reshape(capacity, rec.dtype.itemsize)  # as bytes: one memcpy, not one per field
    if n and not kept:
        raw[:n] = old.view(np.uint8).reshape(n, old.dtype.itemsize)
    one = np.zeros(1, dtype=rec.dtype)  # padding zero, as in every record
    for name, _, fill in fields:
        one[name] = fill
    if one.view(np.uint8).any():  # (new memory is zero already)
        raw[n:] = one.view(np.uint8)
    return rec


FEW = 64  # segments up to which ``SegmentPool.alloc_many`` takes them one by one


class SegmentPool:
    """Variable-length segments (keyword lists, k-best lists) in shared flat arrays.

    Freed segments are reused by later segments of the same length (k and keyword
    counts repeat), so no compaction is needed. ``alloc``/``release`` are O(1)
    amortised.
    """

    def __init__(self, spec: dict[str, type | str], capacity: int = 4096) -> None:
        self._spec = spec
        self.capacity = capacity
        for name, dtype in spec.items():
            setattr(self, name, np.zeros(capacity, dtype=dtype))
        self.top = 0
        self._free: defaultdict[int, list[int]] = defaultdict(list)
        self.used = 0

    def alloc(self, n: int) -> int:
        self.used += n
        spare = self._free.get(n)
        if spare:
            return spare.pop()
        while self.top + n > self.capacity:
            self._grow()
        off = self.top
        self.top += n
        return off

    def alloc_many(self, ns) -> np.ndarray:
        """``alloc`` of each length in turn (``ns``: a list or an integer array): one stretch
        at the top when no freed segment of those lengths waits (what a run of new
        subscriptions or objects meets). A short run, ``alloc`` by ``alloc``: a dozen NumPy
        calls cost ~50 us, what a Python step a segment costs for ~100 of them (a stream that
        interleaves subscriptions and objects makes runs of a few)."""
        if len(ns) <= FEW:
            return np.fromiter(map(self.alloc, ns.tolist() if type(ns) is np.ndarray else ns), np.int64, len(ns))
        ns = np.asarray(ns, dtype=np.int64)
        offs = np.empty(len(ns), dtype=np.int64)
        bump = np.ones(len(ns), dtype=bool)  # those no freed segment serves: at the top
        if self._free:
            for n in np.unique(ns).tolist():  # the first of each length take the freed ones,
                spare = self._free.get(n)  # popped from the end, as ``alloc`` would
                if spare:
                    at = np.flatnonzero(ns == n)[:len(spare)]
                    offs[at] = spare[:-len(at) - 1:-1]
                    del spare[-len(at):]
                    bump[at] = False
        total = int(ns[bump].sum())
        while self.top + total > self.capacity:
            self._grow()
        lens = ns[bump]
        at = np.empty(len(lens), dtype=np.int64)
        at[0:1] = self.top
        np.cumsum(lens[:-1], out=at[1:])
        at[1:] += self.top
        offs[bump] = at
        self.top += total
        self.used += int(ns.sum())
        return offs

    def put_many(self, name: str, lens: np.ndarray, values) -> np.ndarray:
        """New segments of ``lens`` holding ``values`` (one after another) in column ``name``;
        returns their offsets."""
        offs = self.alloc_many(lens)
        if len(offs) and (offs[1:] == offs[:-1] + lens[:-1]).all():  # one stretch: a slice
            getattr(self, name)[int(offs[0]):int(offs[0]) + int(lens.sum())] = values
        else:
            getattr(self, name)[segment_items(offs, lens)[0]] = values
        return offs

    def release(self, off: int, n: int) -> None:
        self.used -= n
        self._free[n].append(off)

    def release_many(self, offs: np.ndarray, ns: np.ndarray) -> None:
        """``release`` of each segment in turn, a list call per distinct length."""
        self.used -= int(ns.sum())
        for n in np.unique(ns).tolist():
            self._free[n].extend(offs[ns == n].tolist())

    def _grow(self) -> None:
        new_cap = self.capacity * 2
        for name in self._spec:
            setattr(self, name, grown(getattr(self, name), new_cap, 0))
        self.capacity = new_cap

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, name).nbytes for name in self._spec)

    def _check(self, off: np.ndarray, n: np.ndarray) -> None:
        """Assert the pool's invariants (a test helper), given the offsets ``off`` and
        lengths ``n`` of the segments in use: they and the free segments lie inside ``top``,
        never overlap, and tile ``[0, top)`` exactly (a segment is bump-allocated once, then
        in use or free under its own length); ``used`` is the total length in use."""
        assert 0 <= self.top <= self.capacity, ("top out of range", self.top, self.capacity)
        for name in self._spec:
            assert len(getattr(self, name)) == self.capacity, ("column length", name)
        off, n = np.asarray(off, dtype=np.int64), np.asarray(n, dtype=np.int64)
        assert int(n.sum()) == self.used, ("used", self.used, int(n.sum()))
        spare = [(np.asarray(offs, dtype=np.int64), np.full(len(offs), size, dtype=np.int64))
                 for size, offs in self._free.items()]
        off = np.concatenate([off, *(o for o, _ in spare)])
        ln = np.concatenate([n, *(s for _, s in spare)])
        assert np.all(ln > 0), "an empty segment"
        order = np.argsort(off, kind="stable")
        off, end = off[order], off[order] + ln[order]
        assert len(off) == 0 or (off[0] >= 0 and end[-1] <= self.top), "a segment outside [0, top)"
        assert np.all(end[:-1] <= off[1:]), "segments overlap (in use, free, or both)"
        assert int(ln.sum()) == self.top, ("segments do not tile [0, top): space lost", int(ln.sum()), self.top)

    def __getstate__(self) -> dict:
        return _used_state(self)

    def __setstate__(self, state: dict) -> None:
        _regrow(self, state, {name: (dtype, 0) for name, dtype in state["_spec"].items()})


def _used_state(table: Columns | SegmentPool) -> dict:
    """A table's pickle state with each array cut to its used part (``top``): snapshots
    carry no spare capacity."""
    state = table.__dict__.copy()
    for name in table._spec:
        state[name] = getattr(table, name)[: table.top].copy()
    return state


def _regrow(table: Columns | SegmentPool, state: dict, spec: dict[str, tuple]) -> None:
    """Restore ``_used_state``: arrays back at full capacity, the spare part filled."""
    table.__dict__.update(state)
    for name, (dtype, fill) in spec.items():
        arr = np.full(table.capacity, fill, dtype=dtype)
        arr[: table.top] = state[name]
        setattr(table, name, arr)


NO_IDS = np.empty(0, dtype=object)


def put_ids(ids: np.ndarray, slots: np.ndarray, values: list) -> np.ndarray:
    """``ids`` (grown if need be) with ``values`` at ``slots``, each id stored as given."""
    ids = grow_ids(ids, int(slots.max()))
    boxed = np.empty(len(values), dtype=object)  # a tuple id stays one object, never unpacked
    boxed[:] = values
    ids[as_index(slots)] = boxed
    return ids


def as_index(slots: np.ndarray) -> slice | np.ndarray:
    """``slots`` as a slice when they are consecutive (fresh slots from ``Columns.add_many``),
    else as given: writing a slice of a record field is a strided copy, several times faster
    than a scatter through an index array (bulk registration writes some twenty fields)."""
    n = len(slots)
    if n > 1 and int(slots[-1]) - int(slots[0]) == n - 1 and bool((np.diff(slots) == 1).all()):
        return slice(int(slots[0]), int(slots[0]) + n)
    return slots


def grow_ids(ids: np.ndarray, slot: int) -> np.ndarray:
    """``ids`` (an object array, slot -> id) with room for ``slot``."""
    if slot < len(ids):
        return ids
    out = np.empty(max(16, 2 * len(ids), slot + 1), dtype=object)
    out[: len(ids)] = ids
    return out


def segment_items(off: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pool indices of segments (offsets ``off``, lengths ``n``) one after another, and
    for each the index of its segment (bulk writes and reads of the pools, the tables' ``_check``)."""
    n = np.asarray(n, dtype=np.int64)
    owner = np.repeat(np.arange(len(n)), n)
    start = np.repeat(np.asarray(off, dtype=np.int64) - (np.cumsum(n) - n), n)
    return start + np.arange(int(n.sum())), owner


def grown(a: np.ndarray, capacity: int, fill) -> np.ndarray:
    """``a`` with room for ``capacity`` items (rows), the new ones at ``fill``: a copy, or for
    a large array the same memory grown in place (``_in_span``: ``a`` stays valid, a view
    of the first rows)."""
    shape = (capacity,) + a.shape[1:]
    got = _in_span(a, shape, _get_madvise_hugepage())  # (off under ``small_pages``)
    if got is None:  # a copy (zeros: pages on demand)
        out, kept = (np.zeros(shape, dtype=a.dtype) if fill == 0 else np.full(shape, fill, dtype=a.dtype)), False
    else:
        out, kept = got
        if fill != 0:  # (a span's pages past ``used`` were never written: zero already)
            out[len(a):] = fill
    if not kept:
        out[: len(a)] = a
    return out
