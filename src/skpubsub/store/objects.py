"""The object table and the alive-object store.

An object occupies a slot while it is alive (count/time windows) or while some
result holds it (``refs``), so results can always name it. Alive objects are
also posted per keyword, which is what re-evaluation reads when a result loses
a member or a kNN/top-k subscription registers under a retaining window.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from msgspec.structs import astuple
from numba import njit, types
from numba.extending import overload

from ..io.events import Pub, PubBlock
from ..core import postings as P
from ..core.layouts import Laid, ObjectLive, Objects, cached
from ..core.columns import NO_IDS, Columns, SegmentPool, as_index, grow_ids, grown, put_ids, segment_items


PubColumns = namedtuple("PubColumns", Pub.__struct_fields__)  # a run of pubs field by field (tuples)


def pub_columns(evs: list[Pub] | PubBlock) -> PubColumns:
    """The fields of ``evs`` as columns: a :class:`PubBlock`'s own (lists, ``seq`` perhaps a
    ``range``; a column left out, its default repeated), else in one pass over the events
    (tuples; a pass per field cost more)."""
    if type(evs) is PubBlock:
        n = len(evs)
        return PubColumns(*((PubBlock.DEFAULTS[f],) * n if c is None else c
                            for f, c in zip(PubBlock.FIELDS, map(evs.__getattribute__, PubBlock.FIELDS))))
    if not evs:
        return PubColumns(*(((),) * len(PubColumns._fields)))
    return PubColumns(*zip(*map(astuple, evs)))


class ObjectTable(Laid):
    """Columnar objects: O(1) add/free, keyword ids in a segment pool.

    ``keep_words`` (a window that retains no object): each object's words are kept as given
    (``words``, a tuple per slot in use), since a keyword id may then stand for a word not
    learnt (``Engine.add_run``)."""

    def __init__(self, keep_words: bool = False) -> None:
        # One 64-byte record per slot: a refill or an expiry reads an object's fields at once.
        self.cols = Columns({
            "alive": (np.bool_, False), "refs": (np.int32, 0), "kw_len": (np.int32, 0),
            # expiry_lo: an integer expiry's remainder past float(expiry) (engine.Engine._lives;
            # SPEC 6 "Times"); int32 fills the record's padding, which stays 64 bytes
            "expiry_lo": (np.int32, 0), "kw_off": (np.int64, 0),
            "x": (np.float64, 0.0), "y": (np.float64, 0.0), "wo": (np.float64, 0.0),
            "expiry": (np.float64, math.inf), "seq": (np.int64, -1),
        }, record=True)
        self.kw = SegmentPool({"id": np.int32})
        self.ids = NO_IDS  # slot -> id (an object array: the columnar notifications index it)
        self.keep_words = keep_words
        self.words = NO_IDS  # slot -> its keywords as given (a tuple), with ``keep_words``
        # slot -> last refill that read the object (results.refill reads each object once)
        self.stamp = np.zeros(0, dtype=np.int64)
        self.stamp_next = np.zeros(1, dtype=np.int64)

    def add(self, ev: Pub, kw_ids: list[int], expiry: float, alive: bool, expiry_lo: int = 0) -> int:
        c = self.cols
        slot = c.add()
        self.ids = grow_ids(self.ids, slot)
        self.ids[slot] = ev.id
        if self.keep_words:
            self.words = grow_ids(self.words, slot)
            self.words[slot] = ev.keywords
        c.x[slot], c.y[slot], c.seq[slot], c.expiry[slot] = ev.x, ev.y, ev.seq, expiry
        c.expiry_lo[slot] = expiry_lo
        n = len(kw_ids)
        off = self.kw.alloc(n)
        self.kw.id[off:off + n] = kw_ids
        c.kw_off[slot], c.kw_len[slot] = off, n
        c.wo[slot] = 1.0 / math.sqrt(n)  # scoring.object_weight
        c.alive[slot] = alive
        return slot

    def add_many(self, evs: list[Pub], kw_ids, expiry: np.ndarray, alive: bool,
                 expiry_lo: np.ndarray | int = 0, cols: PubColumns | None = None,
                 lens: np.ndarray | None = None) -> np.ndarray:
        """``add`` of each event in turn, the columns written for all at once; returns the slots.
        ``kw_ids``: the events' keyword ids one after another (each event has as many as keywords);
        ``cols``, ``lens``: ``pub_columns(evs)`` and the keyword counts, if the caller has them."""
        c = self.cols
        n = len(evs)
        if cols is None:
            cols = pub_columns(evs)
        slots = c.add_many(n)
        at = as_index(slots)  # fresh slots are consecutive: slices, not scatters
        self.ids = put_ids(self.ids, slots, list(cols.id))
        if self.keep_words:
            self.words = put_ids(self.words, slots, list(cols.keywords))
        c.x[at] = np.fromiter(cols.x, np.float64, n)
        c.y[at] = np.fromiter(cols.y, np.float64, n)
        c.seq[at] = np.fromiter(cols.seq, np.int64, n)
        c.expiry[at] = expiry
        c.expiry_lo[at] = expiry_lo
        if lens is None:
            lens = np.fromiter(map(len, cols.keywords), np.int64, n)
        c.kw_off[at] = self.kw.put_many("id", lens, kw_ids)
        c.kw_len[at] = lens
        c.wo[at] = 1.0 / np.sqrt(lens)  # scoring.object_weight
        c.alive[at] = alive
        return slots

    def keywords_csr(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The keyword ids of ``slots`` as CSR: (offsets, int32 ids)."""
        lens = self.cols.kw_len[slots].astype(np.int64)
        off = np.zeros(len(slots) + 1, dtype=np.int64)
        np.cumsum(lens, out=off[1:])
        return off, self.kw.id[segment_items(self.cols.kw_off[slots], lens)[0]]

    def keywords(self, slot: int) -> np.ndarray:
        off = self.cols.kw_off[slot]
        return self.kw.id[off:off + self.cols.kw_len[slot]]

    def free(self, slot: int) -> None:
        self.kw.release(int(self.cols.kw_off[slot]), int(self.cols.kw_len[slot]))
        self.ids[slot] = None
        if self.keep_words:
            self.words[slot] = None
        self.cols.free(slot)

    def free_many(self, slots: list[int]) -> None:
        """``free`` of each slot in turn."""
        c = self.cols
        at = np.asarray(slots, dtype=np.int64)  # one conversion for every column below
        self.kw.release_many(c.kw_off[at], c.kw_len[at].astype(np.int64))
        self.ids[at] = None
        if self.keep_words:
            self.words[at] = None
        c.free_many(slots, at)

    def _layouts(self) -> tuple[Objects, tuple]:
        if len(self.stamp) < self.cols.capacity:
            self.stamp = grown(self.stamp, self.cols.capacity, 0)
        key = (self.cols.capacity, self.kw.capacity, len(self.stamp))
        return cached(self, key, lambda: Objects(self.cols.records, self.kw.id, self.stamp, self.stamp_next))

    @property
    def nbytes(self) -> int:
        return self.cols.nbytes + self.kw.nbytes

    def _check(self) -> None:
        """Assert the table's invariants (a test helper, O(slots + pool size)): free slots
        cleared (not alive, no references, no id), every slot in use has an id, ``refs >=
        0``, a keyword segment of distinct ids and ``wo = 1/sqrt(keywords)`` (with ``keep_words``,
        an id per word kept; a free slot keeps none); the segments in use lie inside the pool,
        never overlap each other or a free segment, and with the free ones tile it."""
        c = self.cols
        c._check()  # free slots at their fill values: not alive, refs 0, no segment
        top = c.top
        in_use = np.ones(top, dtype=np.bool_)
        in_use[np.asarray(c._free, dtype=np.int64)] = False
        used, free = np.flatnonzero(in_use), np.flatnonzero(~in_use)
        assert not len(used) or used[-1] < len(self.ids), "an object slot past ids"
        assert not np.any(np.equal(self.ids[used], None)), "an object slot in use without an id"
        assert np.all(np.equal(self.ids[free[free < len(self.ids)]], None)), "a free object slot keeps an id"
        assert np.all(np.equal(self.ids[top:], None)), "an id past top"
        assert np.all(c.refs[used] >= 0), "negative reference count"
        kw_off, kw_len = c.kw_off[used], c.kw_len[used]
        assert np.all(kw_len >= 1), "an object without keywords"
        if self.keep_words:
            words = self.words
            assert not len(used) or used[-1] < len(words), "an object slot past words"
            assert np.array_equal(np.fromiter(map(len, words[used]), np.int64, len(used)), kw_len), \
                "an object's keyword ids are not one per word kept"
            assert np.all(np.equal(words[free[free < len(words)]], None)), "a free object slot keeps words"
        idx, owner = segment_items(kw_off, kw_len)
        kw = self.kw.id[idx].astype(np.int64)
        assert np.all(kw >= 0) and len(np.unique((owner << 32) | kw)) == len(kw), "keyword ids not distinct"
        assert np.array_equal(c.wo[used], 1.0 / np.sqrt(kw_len.astype(np.float64))), "wo is not 1/sqrt(keywords)"
        self.kw._check(kw_off, kw_len)


class AliveStore:
    """Alive objects posted per keyword id, in compiled posting lists (keyed by the keyword
    id) that the refill kernel (:mod:`skpubsub.results.refill`) reads directly.

    Entries are ``slot << 32 | seq`` (the seq's low 32 bits). Deletion is lazy: an entry
    dies with its object (``alive`` off, or the slot re-used by another object), a scan
    compacts what it reads, and a sweep runs once dead entries outnumber live ones.
    O(#keywords) insert, O(1) remove.
    """

    def __init__(self, objs: ObjectTable) -> None:
        self.objs = objs
        self.store = P.PostingStore()
        self.count = 0  # alive objects
        self.live = 0  # their entries
        self.version = 0  # moves with every change of the alive objects (``tree``'s cache)
        self._tree: tuple | None = None  # (version, by_class, results.initial.Tree)

    def __getstate__(self) -> dict:
        """Without the postings: they are a function of the alive objects, rebuilt on load
        without dead entries or spare room (snapshots stay small)."""
        state = self.__dict__.copy()
        state["store"] = None
        state["_tree"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)  # the object table is restored first (it is pickled first)
        self.store = P.PostingStore()
        self.count = self.live = self.version = 0
        self._tree = None
        c = self.objs.cols
        for o in np.flatnonzero(c.alive[: c.top]).tolist():
            self.add(o, self.objs.keywords(o))

    def add(self, slot: int, kw_ids) -> None:
        kws = np.asarray(kw_ids, dtype=np.int32)
        self.store.reserve(len(kws), len(kws))
        post_object(self.store.plain, slot, self.objs.cols.seq[slot], kws)
        self.count += 1
        self.live += len(kws)
        self._changed()

    def added(self, n: int, entries: int) -> None:
        """``n`` objects with ``entries`` keywords were posted by a kernel."""
        self.count += n
        self.live += entries
        self._changed()

    def remove(self, slot: int, kw_ids) -> None:
        """The object's ``alive`` flag is already off: its entries are dead."""
        self.count -= 1
        self.live -= len(kw_ids)
        self._changed()
        if self.store.entries > 2 * self.live + 65536:
            sweep(self.store.arrays, self.objs.cols.records)

    def _changed(self) -> None:
        self.version += 1
        self._tree = None  # (its memory: ~100 MB at 200,000 alive objects)

    @property
    def has_tree(self) -> bool:
        """Is ``tree`` built for the alive objects as they are?"""
        return self._tree is not None and self._tree[0] == self.version

    def tree(self, by_class: bool):
        """The alive objects by keyword and place (:class:`skpubsub.results.initial.Tree`;
        ``by_class``: by number of keywords too, for top-k), kept while they do not change
        (runs of subscriptions between the same objects share it)."""
        from ..results.initial import Tree

        hit = self._tree
        if hit is None or hit[0] != self.version or hit[1] != by_class:
            c = self.objs.cols
            alive = np.flatnonzero(c.alive[: c.top])
            hit = self._tree = (self.version, by_class, Tree.build(alive, self.objs.layout, by_class))
        return hit[2]

    def posting(self, kw: int) -> np.ndarray:
        """Alive object slots carrying ``kw``, sorted."""
        return np.sort(read_posting(self.store.arrays, np.int64(kw), self.objs.cols.records))

    def _check(self) -> None:
        """Assert the store's invariants (a test helper, O(entries)): the posting store's
        own (``PostingStore._check``); every alive object has exactly one live entry (its
        slot and seq, as ``postings.read`` reads it) under each of its keywords, and no live
        entry is under a keyword its object lacks; ``count`` is the alive objects and
        ``live`` their keywords. Dead entries (lazy deletion) may stay anywhere."""
        self.store._check()
        c = self.objs.cols
        alive = np.flatnonzero(c.alive[: c.top])
        assert self.count == len(alive), ("alive count", self.count, len(alive))
        assert self.live == int(c.kw_len[alive].sum()), ("live entries", self.live, int(c.kw_len[alive].sum()))
        keys, ents, _ = self.store._flat()
        assert np.all(keys >= 0), "a list under a negative key"
        o = ents >> 32
        assert np.all(o < c.capacity), "an entry of no object slot"
        live = c.alive[o] & ((c.seq[o] & 0xFFFFFFFF) == (ents & 0xFFFFFFFF))
        got = (o[live] << 32) | keys[live]
        idx, owner = segment_items(c.kw_off[alive], c.kw_len[alive])
        want = np.sort((alive[owner].astype(np.int64) << 32) | self.objs.kw.id[idx].astype(np.int64))
        got = np.sort(got)
        assert len(np.unique(got)) == len(got), "an alive object posted twice under one keyword"
        assert np.array_equal(got, want), ("alive postings differ from the alive objects' keywords",
                                           np.setdiff1d(want, got)[:5] >> 32, np.setdiff1d(got, want)[:5] >> 32)


@njit(cache=True)
def post_object(st, slot, seq, kws):
    """Post object ``slot`` (its seq ``seq``) under each keyword id of ``kws`` in store ``st``."""
    entry = (np.int64(slot) << 32) | (seq & 0xFFFFFFFF)
    for w in kws:
        P.append(st, np.int64(w), entry, P.NO_FILTER)


@overload(P.entry_id)
def _object_entry(ent, live, where):
    """``postings.entry_id`` for the alive store: the object is alive and its slot not
    re-used since (the entry's low half is its seq's)."""
    if not (isinstance(live, types.BaseNamedTuple) and live.instance_class is ObjectLive):
        return None

    def impl(ent, live, where):
        o = ent >> 32
        r = live.rec[o]
        return o if r.alive and (r.seq & 0xFFFFFFFF) == (ent & 0xFFFFFFFF) else np.int64(-1)
    return impl


@njit(cache=True)
def read_posting(st, key, orec):
    p = P.lookup(st.h_keys, st.h_vals, key)
    if p < 0:
        return np.empty(0, dtype=np.int64)
    out = np.empty(st.meta[P.M_ENTRIES], dtype=np.int64)
    n = P.read(p, ObjectLive(orec), 0, -1, out, st, out, 0)
    return out[:n].copy()


@njit(cache=True)
def sweep(st, orec):
    """Drop every dead entry: O(entries)."""
    out = np.empty(st.meta[P.M_ENTRIES], dtype=np.int64)
    for p in range(st.meta[P.M_POSTINGS]):
        if st.p_head[p] >= 0:
            P.read(p, ObjectLive(orec), 0, -1, out, st, out, 0)
