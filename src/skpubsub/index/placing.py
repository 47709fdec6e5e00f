"""Placing subscriptions in the compiled grid (:mod:`cgrid`): where a slot is posted (its
level and cell box, ``nodecost.slot_level``), under which tokens (``_tokens``), and its
entries written into the posting store.

Two shapes of the same rule: for many slots at once (``regions`` then ``post_many`` or
``entries_of``: bulk registration and re-posting), and for one slot in one compiled call
(``place_one``, ``unplace``, ``region_of``: a subscription registered on its own, where a
call per step cost microseconds of Python each).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ..core import postings as P
from ..core.layouts import Postings
from ..store.subscriptions import K_TOPK
from .cells import extent, level_key
from .nodecost import slot_level
from .prefix import post_tokens, prefix_bounds


@njit(cache=True)
def post_slot(st, s, epoch, level, box, kws, lmax):
    """Entries of slot ``s`` (``epoch``) under each token of ``kws`` in the cells ``box`` of
    ``level`` (-1: the global lists) of store ``st``; returns how many."""
    entry = (np.int64(s) << 32) | epoch
    n = 0
    for w in kws:
        if level < 0:
            P.append(st, -(np.int64(w) + 1), entry)
            n += 1
            continue
        for cx in range(box[0], box[2] + 1):
            for cy in range(box[1], box[3] + 1):
                P.append(st, level_key(w, level, cx, cy, lmax), entry)
                n += 1
    return n


@njit(cache=True)
def _tokens(s, subs, grid, out):
    """What slot ``s`` is posted under, into ``out`` (``_keywords``' rule): its token, else a
    prefix-filtered top-k subscription's classes, else an `all` subscription's least
    frequent keyword, else its keywords. (``grid.prefix`` is on while the index holds
    prefix-filtered top-k slots, so with a top-k slot in hand it says the index filters.)"""
    r = subs.rec[s]
    if grid.slots[s].tok >= 0:
        out[0] = grid.slots[s].tok
        return 1
    off, ln = r.kw_off, r.kw_len
    if grid.prefix and r.kind == K_TOPK:  # its keyword classes at the posted rule (prefix filter)
        return post_tokens(off, ln, subs.kw_id, grid.slots[s].pkth, r.alpha, grid.rb, out)
    if r.match_all and ln > 1:
        best = off
        for j in range(off + 1, off + ln):
            if grid.freq[subs.kw_id[j]] < grid.freq[subs.kw_id[best]]:
                best = j
        out[0] = subs.kw_id[best]
        return 1
    for j in range(ln):
        out[j] = subs.kw_id[off + j]
    return ln


@njit(cache=True)
def regions(slots, subs, grid, ext):
    """``place``'s first half for many slots: each slot's level and box (``slot_level``), a
    new epoch, posted under its ``_tokens``. Returns the entries ``post_many`` will add."""
    sl = grid.slots
    one = np.empty(1, dtype=np.int64)
    total = 0
    for s in slots:
        r = subs.rec[s]
        box = sl[s].box
        pre = grid.prefix and r.kind == K_TOPK
        if pre:  # the prefix order follows the frequencies as they are now
            prefix_bounds(r.kw_off, r.kw_len, subs.kw_id, subs.kw_ws, grid.freq, grid.rb)
            sl[s].pkth = r.kth
        if extent(r, grid.geo[4], ext):
            level = slot_level(s, subs, grid, ext, box)
        else:
            level = -1
            box[:] = -1
        sl[s].level = level
        sl[s].epoch = (sl[s].epoch + 1) & 0xFFFFFFFF
        sl[s].pending = False
        kw0 = -1
        if sl[s].tok >= 0:
            n = 1
        elif pre:
            n = _tokens(s, subs, grid, np.empty(r.kw_len, dtype=np.int64))
        elif r.match_all:  # posted under one keyword: the kernel's kw0 test
            n = _tokens(s, subs, grid, one)
            kw0 = one[0]
        else:
            n = r.kw_len
        sl[s].nkw = n
        sl[s].kw0 = kw0
        cells = 1 if level < 0 else (box[2] - box[0] + 1) * (box[3] - box[1] + 1)
        total += n * cells
    return total


@njit(cache=True)
def post_many(slots, subs, grid, toks):
    """``place``'s second half: post each slot under its tokens while the store has room
    (``postings.room``); returns how many slots it posted (the caller grows the store and
    calls again for the rest)."""
    sl = grid.slots
    st = grid.store
    for i in range(len(slots)):
        s = slots[i]
        n = _tokens(s, subs, grid, toks)
        box = sl[s].box
        cells = 1 if sl[s].level < 0 else (box[2] - box[0] + 1) * (box[3] - box[1] + 1)
        if not P.room(st, n * cells):
            return i
        post_slot(st, s, sl[s].epoch, np.int64(sl[s].level), box, toks[:n], grid.lmax)
    return len(slots)


@njit(cache=True)
def entries_of(slots, subs, grid, toks, keys, ents):
    """``post_many``'s (key, entry) pairs, in its order, into ``keys`` and ``ents``: for
    ``PostingStore.append_many``. Returns how many."""
    sl = grid.slots
    lmax = grid.lmax
    n = 0
    for s in slots:
        m = _tokens(s, subs, grid, toks)
        level = np.int64(sl[s].level)
        box = sl[s].box
        entry = (np.int64(s) << 32) | sl[s].epoch
        for w in toks[:m]:
            if level < 0:
                keys[n] = -(np.int64(w) + 1)
                ents[n] = entry
                n += 1
                continue
            for cx in range(box[0], box[2] + 1):
                for cy in range(box[1], box[3] + 1):
                    keys[n] = level_key(w, level, cx, cy, lmax)
                    ents[n] = entry
                    n += 1
    return n


class _Keywords(NamedTuple):
    """What ``slot_level`` reads of a ``Subs`` layout."""

    rec: np.ndarray
    kw_id: np.ndarray


class _Levels(NamedTuple):
    """What ``slot_level`` reads of a ``Grid`` layout."""

    slots: np.ndarray
    geo: np.ndarray
    lmax: int
    max_cells: int
    counts: np.ndarray
    theta_n: float
    warm_n: int
    freq: np.ndarray


@njit(cache=True)
def region_of(s, rec, kw_id, slots, geo, counts, freq, consts, ext, cell):
    """``region`` called from Python once per slot, given only the arrays it reads (Numba
    unboxes every array of a layout at each call); ``consts``: lmax, max_cells, theta_n, warm_n."""
    if not extent(rec[s], geo[4], ext):
        cell[:] = -1
        return -1
    levels = _Levels(slots, geo, consts[0], consts[1], counts, consts[2], consts[3], freq)
    return slot_level(s, _Keywords(rec, kw_id), levels, ext, cell)


@njit(cache=True)
def unplace(slots, s):
    """``delete``'s writes in one call: a new epoch (the slot's entries die), not posted, not
    pending; returns the live entries it had."""
    sl = slots[s]
    n = sl.nkw * (1 if sl.level < 0 else (sl.box[2] - sl.box[0] + 1) * (sl.box[3] - sl.box[1] + 1))
    sl.epoch = (sl.epoch + 1) & 0xFFFFFFFF
    sl.nkw = 0
    sl.pending = False
    return n


class _Tokens(NamedTuple):
    """What ``_tokens`` reads of a ``Grid`` layout (``place_one``)."""

    slots: np.ndarray
    prefix: bool
    rb: np.ndarray
    freq: np.ndarray


@njit(cache=True)
def place_one(s, rec, kw_id, kw_ws, slots, geo, counts, freq, rb, consts, st, ext, toks):
    """``place`` of one slot in one call, given only the arrays it reads (a run of one
    subscription: a call per layer cost microseconds of Python each); ``consts``: lmax,
    max_cells, theta_n, warm_n, prefix; ``st``: the posting store as a plain tuple. Writes the
    slot's prefix bounds (top-k), level, box, epoch, tokens and ``kw0`` as ``place`` does, then
    posts its entries if the store has room (``postings.room``). Returns (entries its old
    posting had, entries of the new one, posted, entries in the store): when not posted, the
    caller grows the store and posts them (``post_many`` of the slot)."""
    lmax, max_cells, prefix = consts[0], consts[1], consts[4]
    sl = slots[s]
    r = rec[s]
    old = 0
    if sl.nkw:
        old = sl.nkw * (1 if sl.level < 0 else (sl.box[2] - sl.box[0] + 1) * (sl.box[3] - sl.box[1] + 1))
    if prefix and r.kind == K_TOPK:  # the prefix order follows the frequencies as they are now
        prefix_bounds(r.kw_off, r.kw_len, kw_id, kw_ws, freq, rb)
        sl.pkth = r.kth
    box = sl.box
    if extent(r, geo[4], ext):
        levels = _Levels(slots, geo, lmax, max_cells, counts, consts[2], consts[3], freq)
        level = slot_level(s, _Keywords(rec, kw_id), levels, ext, box)
    else:
        level = -1
        box[:] = -1
    sl.epoch = (sl.epoch + 1) & 0xFFFFFFFF
    sl.level = level
    sl.pending = False
    n = _tokens(s, _Keywords(rec, kw_id), _Tokens(slots, prefix, rb, freq), toks)
    sl.nkw = n
    sl.kw0 = toks[0] if r.match_all and n == 1 and sl.tok < 0 else -1  # place's rule (refresh reads it)
    cells = 1 if level < 0 else (box[2] - box[0] + 1) * (box[3] - box[1] + 1)
    store = Postings(*st)
    if not P.room(store, n * cells):
        return old, n * cells, False, store.meta[P.M_ENTRIES]
    post_slot(st, s, sl.epoch, np.int64(level), box, toks[:n], lmax)
    return old, n * cells, True, store.meta[P.M_ENTRIES]


