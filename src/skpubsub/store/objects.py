"""The object table and the alive-object store.

An object occupies a slot while it is alive (count/time windows) or while some
result holds it (``refs``), so results can always name it. Alive objects are
also posted per keyword, which is what re-evaluation reads when a result loses
a member or a kNN/top-k subscription registers under a retaining window.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..io.events import Pub
from ..core import postings as P
from ..core.columns import NO_IDS, Columns, SegmentPool, grow_ids


class ObjectTable:
    """Columnar objects: O(1) add/free, keyword ids in a segment pool."""

    def __init__(self) -> None:
        # One 64-byte record per slot: a refill or an expiry reads an object's fields at once.
        self.cols = Columns({
            "alive": (np.bool_, False), "refs": (np.int32, 0), "kw_len": (np.int32, 0), "kw_off": (np.int64, 0),
            "x": (np.float64, 0.0), "y": (np.float64, 0.0), "wo": (np.float64, 0.0),
            "expiry": (np.float64, math.inf), "seq": (np.int64, -1),
        }, record=True)
        self.kw = SegmentPool({"id": np.int32})
        self.ids = NO_IDS  # slot -> id (an object array: the columnar notifications index it)

    def add(self, ev: Pub, kw_ids: list[int], expiry: float, alive: bool) -> int:
        c = self.cols
        slot = c.add()
        self.ids = grow_ids(self.ids, slot)
        self.ids[slot] = ev.id
        c.x[slot], c.y[slot], c.seq[slot], c.expiry[slot] = ev.x, ev.y, ev.seq, expiry
        n = len(kw_ids)
        off = self.kw.alloc(n)
        self.kw.id[off:off + n] = kw_ids
        c.kw_off[slot], c.kw_len[slot] = off, n
        c.wo[slot] = 1.0 / math.sqrt(n)  # scoring.object_weight
        c.alive[slot] = alive
        return slot

    def keywords(self, slot: int) -> np.ndarray:
        off = self.cols.kw_off[slot]
        return self.kw.id[off:off + self.cols.kw_len[slot]]

    def free(self, slot: int) -> None:
        self.kw.release(int(self.cols.kw_off[slot]), int(self.cols.kw_len[slot]))
        self.ids[slot] = None
        self.cols.free(slot)

    @property
    def nbytes(self) -> int:
        return self.cols.nbytes + self.kw.nbytes


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

    def __getstate__(self) -> dict:
        """Without the postings: they are a function of the alive objects, rebuilt on load
        without dead entries or spare room (snapshots stay small)."""
        state = self.__dict__.copy()
        state["store"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)  # the object table is restored first (it is pickled first)
        self.store = P.PostingStore()
        self.count = self.live = 0
        c = self.objs.cols
        for o in np.flatnonzero(c.alive[: c.top]).tolist():
            self.add(o, self.objs.keywords(o))

    def add(self, slot: int, kw_ids) -> None:
        kws = np.asarray(kw_ids, dtype=np.int32)
        self.store.reserve(len(kws), len(kws))
        post_object(*self.store.arrays, slot, self.objs.cols.seq[slot], kws)
        self.count += 1
        self.live += len(kws)

    def added(self, n: int, entries: int) -> None:
        """``n`` objects with ``entries`` keywords were posted by a kernel."""
        self.count += n
        self.live += entries

    def remove(self, slot: int, kw_ids) -> None:
        """The object's ``alive`` flag is already off: its entries are dead."""
        self.count -= 1
        self.live -= len(kw_ids)
        if self.store.entries > 2 * self.live + 65536:
            c = self.objs.cols
            sweep(*self.store.arrays, c.alive, c.seq)

    def posting(self, kw: int) -> np.ndarray:
        """Alive object slots carrying ``kw``, sorted."""
        c = self.objs.cols
        return np.sort(read_posting(*self.store.arrays, np.int64(kw), c.alive, c.seq))


@njit(cache=True)
def post_object(h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta,
                slot, seq, kws):
    entry = (np.int64(slot) << 32) | (seq & 0xFFFFFFFF)
    for w in kws:
        P.append(h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta,
                 np.int64(w), entry)


@njit(cache=True)
def alive_entry(e, o_alive, o_seq):
    o = e >> 32
    return o_alive[o] and (o_seq[o] & 0xFFFFFFFF) == (e & 0xFFFFFFFF)


@njit(cache=True)
def scan_posting(p, h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta,
                 o_alive, o_seq, out):
    """Alive object slots of list ``p`` into ``out``, compacting it in place; returns how many."""
    n = 0
    rb = p_head[p]
    wb = rb
    wi = 0
    dropped = 0
    while rb >= 0:
        cnt = P.B if rb != p_tail[p] else p_fill[p]
        for ri in range(cnt):
            e = blk_data[rb * P.B + ri]
            if not alive_entry(e, o_alive, o_seq):
                dropped += 1
                continue
            wb, wi = P.keep(e, wb, wi, blk_next, blk_data)
            out[n] = e >> 32
            n += 1
        rb = blk_next[rb]
    if dropped:
        P.truncate(p, wb, wi, h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_free, meta,
                   dropped)
    return n


@njit(cache=True)
def read_posting(h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta,
                 key, o_alive, o_seq):
    p = P.lookup(h_keys, h_vals, key)
    if p < 0:
        return np.empty(0, dtype=np.int64)
    out = np.empty(meta[P.M_ENTRIES], dtype=np.int64)
    n = scan_posting(p, h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free,
                     meta, o_alive, o_seq, out)
    return out[:n].copy()


@njit(cache=True)
def sweep(h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta,
          o_alive, o_seq):
    """Drop every dead entry: O(entries)."""
    out = np.empty(meta[P.M_ENTRIES], dtype=np.int64)
    for p in range(meta[P.M_POSTINGS]):
        if p_head[p] >= 0:
            scan_posting(p, h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data,
                         blk_free, meta, o_alive, o_seq, out)
