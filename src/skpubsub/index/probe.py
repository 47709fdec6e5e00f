"""The probe of the compiled grid (:mod:`cgrid`): an object's scan of the posting lists of
its cells on every level, which keeps the live entries, drops the stale ones (lazy
deletion) and stamps each slot it meets once. The publish kernel's probe too.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

from ..core import postings as P
from ..core.layouts import SlotLive
from .cells import cell_of, decode_key, level_key

NO_WORDS = np.zeros(0, dtype=np.int32)  # ``scan``'s words when no candidate is decided by its entry


@njit(inline="always", cache=True)
def kw_bit(w):
    """The bit of keyword id ``w`` in a 32-bit keyword signature (Fibonacci hashing: ids
    close together land on different bits)."""
    return np.int64(1) << ((np.int64(w) * np.int64(0x9E3779B1) & 0xFFFFFFFF) >> 27)


@njit(inline="always", cache=True)
def kw_sig(kws):
    """The signature of keyword ids ``kws``: the OR of their bits."""
    sig = np.int64(0)
    for w in kws:
        sig |= kw_bit(w)
    return sig


@njit(cache=True)
def scan(x, y, okw, st, active, grid, cands, osig, once, words, probe):
    """Live slots posted under tokens ``okw`` in the cells of (x, y) on every level or
    globally, each once (``slots.stamp = st``, a stamp not used before), into ``cands``;
    compacts the lists it reads. Returns how many. The publish kernel's probe too.

    ``once``: no other source adds candidates after this scan (the publish kernel with
    nothing precomputed), so a slot posted under one token is taken unstamped (``_read_list``).

    ``words``: the object's keyword ids, when the caller takes a range subscription's match
    decided by its entry (``decided``: such a candidate comes as ``~slot``, and one that the
    entry rules out not at all); empty, every candidate comes as its slot.

    ``osig``: the object's keyword signature (``kw_sig``; -1 takes every live slot). A slot
    whose own signature (``slots.sig``: an ``all`` subscription's keywords, else 0; posted
    beside each of its entries, ``placing.entry_filter``) has a bit outside it lacks a
    keyword the object would need, so it is not a candidate: the keyword test's certain
    failures rejected before the slot's records are read (index/NOTES.md, "Keyword
    signatures", "Entry filters").

    ``probe``: scratch of at least ``3 * len(okw) * (lmax + 2)`` (``probe_scratch``). The
    lists are looked up in stages, each asking for the next stage's cache lines of every
    list before reading any (the level summaries, the hash slots, the list heads, the first
    blocks): one after another, each list's lookup was a chain of four misses
    (index/NOTES.md, "The scan's lookups in stages"). The lists are read in the order of
    before: tokens as given, levels ascending.

    ``postings.read`` with the grid's ``entry_id`` written out in the loop, over arrays bound
    once here: passed to a compiled call per list (or per entry), the store's and the
    records' arrays cost an atomic reference count each way (index/NOTES.md, "scan")."""
    geo, lmax, store = grid.geo, grid.lmax, grid.store
    h_keys, h_vals, lv, p_head, blk_filter = store.h_keys, store.h_vals, store.lv, store.p_head, store.blk_filter
    lists = _lists(store, active, grid.slots)
    x0, y0, width, height = geo[0], geo[1], geo[2], geo[3]
    every = (np.int64(1) << (lmax + 2)) - 1
    m = len(probe) // 3
    keys, levels, cells = probe[:m], probe[m:2 * m], probe[2 * m:3 * m]
    for w in okw:
        P.prefetch_read(lv, np.int64(w) & (len(lv) - 1))  # (levels_of's; a hint: no summary kept does no harm)
    # Every (token, level) key where the token may have a list (bit 0 the global list, bit
    # l + 1 level l): the other levels are not probed (a hash lookup each, mostly a miss).
    nk = 0
    mask = len(h_keys) - 1
    for w in okw:
        bits = P.levels_of(store, w) & every
        level = -2
        while bits:
            level += 1
            here = bits & 1
            bits >>= 1
            if not here:
                continue
            if level < 0:
                key = -(np.int64(w) + 1)
                cx = cy = 0
            else:
                cx = cell_of(x, x0, width, 1 << level)
                cy = cell_of(y, y0, height, 1 << level)
                key = level_key(w, level, cx, cy, lmax)
            keys[nk] = key
            levels[nk] = level
            cells[nk] = (np.int64(cx) << 32) | cy
            nk += 1
            i = (key * 0x9E3779B97F4A7C15) & mask  # find's first slot
            P.prefetch_read(h_keys, i)
            P.prefetch_read(h_vals, i)
    n = 0  # the lists found, in place of their keys
    for j in range(nk):
        p = P.find(h_keys, h_vals, keys[j])
        if p < 0:
            continue
        keys[n] = p
        levels[n] = levels[j]
        cells[n] = cells[j]
        n += 1
        P.prefetch_read(p_head, p)
        P.prefetch_read(store.p_tail, p)
        P.prefetch_read(store.p_fill, p)
    B = P.B
    for j in range(n):
        rb = np.int64(p_head[keys[j]])
        if rb >= 0:
            P.prefetch_read(store.blk_next, rb)
            P.prefetch_read(store.blk_data, rb * B)
            for q in range(0, B, 2):  # the block's four lines of filters (32 bytes each)
                P.prefetch_read(blk_filter, rb * B + q)
    nc = 0
    for j in range(n):
        c = cells[j]
        nc = _read_list(keys[j], (levels[j], c >> 32, c & 0xFFFFFFFF, x, y, words), lists, st, cands, nc, ~osig,
                        once)
    return nc


def probe_scratch(n_tokens: int, lmax: int) -> np.ndarray:
    """``scan``'s ``probe`` scratch for up to ``n_tokens`` tokens on a grid of ``lmax``."""
    return np.empty(3 * max(1, n_tokens) * (lmax + 2), dtype=np.int64)


@njit(inline="always", cache=True)
def decided(f, x, y, words):
    """Does filter ``f``, whose box holds (x, y), decide its entry's match alone for an object
    there with keyword ids ``words``? 1: a match, -1: none, 0: the slot's records decide
    (``UNDECIDED``: not a range subscription's entry; or (x, y) within two float32 steps of
    the box's edge). The box is the rectangle rounded outward to float32 (``cells.filter_box``):
    a point a step inside it lies in the rectangle, as the kernel tests it. The keywords:
    the kernel's test (``carries_all``) is that each of ``k0``-``k2`` is one of ``words``."""
    if f.k0 == P.UNDECIDED:
        return 0
    if not (_inside(f.x1, f.x2, x) and _inside(f.y1, f.y2, y)):
        return 0
    for k in (f.k0, f.k1, f.k2):
        if k >= 0:
            found = False
            for w in words:
                if w == k:
                    found = True
                    break
            if not found:
                return -1
    return 1


@njit(inline="always", cache=True)
def _inside(lo, hi, v):
    """Is ``v`` at least a float32 step inside [``lo``, ``hi``] (float32 values)? Tested in
    float64 against a margin of ``|bound| 2**-22 + 2**-126``: at least two steps of the
    bound (a step is at most ``|bound| 2**-23``, or ``2**-149`` below the normal range), so
    the rounding of the sum cannot matter; a point within the margin goes to the records.
    (``np.nextafter`` on float32 was a libm call, four a decided candidate: ~4% of range_1m's
    object phase.) An infinite bound makes a NaN margin: never inside."""
    a, b = np.float64(lo), np.float64(hi)
    return a + (abs(a) * 2.0 ** -22 + 2.0 ** -126) <= v <= b - (abs(b) * 2.0 ** -22 + 2.0 ** -126)


@njit(inline="always", cache=True)
def _lists(store, active, slots):
    """The arrays a list read touches, bound once per scan or sweep (a plain tuple: the
    reader is inlined, so they are not counted again per list)."""
    return (store, active, slots.epoch, slots.level, slots.box, slots.stamp, store.p_head, store.p_tail,
            store.p_fill, store.blk_next, store.blk_data, slots.nkw, store.blk_filter)


@njit(inline="always", cache=True)
def _read_list(p, at, lists, st, cands, nc, miss, once):
    """``postings.read`` of list ``p`` for an object at (x, y) in cell (cx, cy) of ``level``
    (``at``), with the grid's ``entry_id`` written out. An entry whose filter (the store's
    ``blk_filter``, ``placing.entry_filter``) fails is not a candidate, and is passed over
    without reading its slot's records, live or not: its signature has a bit in ``miss``
    (the bits the object lacks: a keyword the slot needs), or its box (a range
    subscription's rectangle) does not hold (x, y). Most entries fail so,
    and their records, read at random, were the scan's cost (index/NOTES.md, "Entry
    filters"). Of the others, each live entry (active, current epoch, this level, its box
    covers the cell) is kept and appended to ``cands[nc:]``: with ``once``, at once when the
    slot is posted under one token (``nkw``: its one live entry a cell, the object in one
    cell a level, the object's tokens distinct, so it meets the object once), else unless
    stamped ``st`` already (then stamped), as ``~slot`` when its entry decides a match
    (``words`` given: ``decided``), not at all when it rules one out; the rest are dropped.
    Such an entry is live: a slot's deciding entries are made undecided before they die
    (``placing.undecide``, at ``delete`` and at the next placement), and its slot is posted
    under one token, so it meets the object once: nothing of its slot is read (index/NOTES.md,
    "Entries that decide a range match"). Kept entries move only once an entry
    before them was dropped (``postings.keep``'s compaction written out; ``truncate``
    ends it): a scan that wrote every entry back dirtied ~500 cache lines an object on
    range_1m (index/NOTES.md, "The scan writes only what changed"). Returns the new end of
    ``cands``. (x, y) NaN and ``miss`` 0: every filter passes (``sweep``)."""
    store, active, epoch, slevel, box, stamp, p_head, p_tail, p_fill, blk_next, blk_data, nkw, filt = lists
    level, cx, cy, x, y, words = at
    B = P.B
    rb = p_head[p]
    tail = p_tail[p]
    wb = rb
    wi = 0
    dropped = 0
    while rb >= 0:
        # The next block's lines asked for before this one is read: a list's blocks lie apart,
        # and each waited for its own miss (index/NOTES.md, "Prefetching the next block").
        nb = blk_next[rb]
        if nb >= 0:
            P.prefetch_read(blk_data, nb * B)
            for j in range(0, B, 2):  # each of a block's four lines of filters (32 bytes each)
                P.prefetch_read(filt, nb * B + j)
        cnt = B if rb != tail else p_fill[p]
        for ri in range(rb * B, rb * B + cnt):
            f = filt[ri]
            if f.sig & miss or x < f.x1 or x > f.x2 or y < f.y1 or y > f.y2:
                s = -1  # not a candidate: kept unread (a later object it passes, or a sweep, tests it)
                verdict = 0
            else:
                ent = blk_data[ri]
                s = ent >> 32
                verdict = decided(f, x, y, words) if len(words) else 0  # (a deciding entry is live: docstring)
                if verdict == 0 and (not active[s] or epoch[s] != (ent & 0xFFFFFFFF) or slevel[s] != level or (
                        level >= 0 and not (box[s, 0] <= cx <= box[s, 2] and box[s, 1] <= cy <= box[s, 3]))):
                    dropped += 1
                    continue
            # ``postings.keep`` written out, moving only once an entry before was dropped (else the
            # entry is where it was). Calling ``keep`` with that flag measured ~25% slower on
            # range_1m's object phase (8.3k against 11.1k objects/s, 2 pairs; cause not found).
            if dropped:
                w = wb * B + wi
                blk_data[w] = blk_data[ri]
                filt[w] = f
            wi += 1
            if wi == B:
                wb, wi = blk_next[wb], 0
            if s < 0:
                continue
            if verdict < 0:
                continue  # lacks one of its keywords: no candidate
            if verdict > 0:  # posted under one token: its one entry that meets this object
                cands[nc] = ~s
                nc += 1
            elif once and nkw[s] == 1:  # posted under one token: one live entry at most meets this object
                cands[nc] = s
                nc += 1
            elif stamp[s] != st:  # not yet seen under another key
                stamp[s] = st
                cands[nc] = s
                nc += 1
        rb = nb
    if dropped:
        P.truncate(store, p, wb, wi, dropped)
    return nc


@njit(cache=True)
def sweep(grid, active, st, cands):
    """Drop every stale entry of every list (lazy deletion's clean-up, O(entries)): each
    list read as ``scan`` reads one, under stamp ``st`` (one not used before)."""
    store = grid.store
    lists = _lists(store, active, grid.slots)
    p_head, p_key = store.p_head, store.p_key
    for p in range(store.meta[P.M_POSTINGS]):
        if p_head[p] >= 0:
            level, cx, cy = decode_key(p_key[p], grid.lmax)
            _read_list(p, (level, cx, cy, np.nan, np.nan, NO_WORDS), lists, st, cands, 0, np.int64(0), False)


@njit(inline="always", cache=True)
def live_of(active, slots):
    """The grid's ``SlotLive`` bundle: views of the records, taken once per scan."""
    return SlotLive(active, slots.epoch, slots.level, slots.box)


@overload(P.entry_id)
def _slot_entry(ent, live, where):
    """``postings.entry_id`` for the grid: ``where`` is the list's (level, cx, cy)."""
    if not (isinstance(live, types.BaseNamedTuple) and live.instance_class is SlotLive):
        return None

    def impl(ent, live, where):
        s = ent >> 32
        level, cx, cy = where
        box = live.box
        # live: active, current epoch, this level, and its box covers this cell
        if not live.active[s] or live.epoch[s] != (ent & 0xFFFFFFFF) or live.level[s] != level or (
                level >= 0 and not (box[s, 0] <= cx <= box[s, 2] and box[s, 1] <= cy <= box[s, 3])):
            return np.int64(-1)
        return s
    return impl
