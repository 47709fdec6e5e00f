"""Compiled posting lists: a hash map from int64 keys to block-linked lists of entries.

Entries are ``slot << 32 | epoch``. Deletion is lazy: an entry is dropped when a
scan finds it invalid (its subscription's epoch moved on, or its region no
longer covers the posting's cell), so deleting or shrinking a subscription costs
nothing at the time. Scans compact the list they read in place.

All arrays live in :class:`PostingStore`; the ``@njit`` functions take them as
arguments. Kernels never allocate: Python grows the arrays (``reserve``) before
a call that may append.
"""

from __future__ import annotations

import numpy as np
from numba import njit

B = 8  # entries per block (small: most lists are short; unused block space is waste)
EMPTY = np.int64(-(2**62))  # an unused hash slot
# meta[] fields
M_POSTINGS, M_FREE_TOP, M_NEXT_BLOCK, M_KEYS, M_ENTRIES, M_PFREE_TOP = 0, 1, 2, 3, 4, 5


class PostingStore:
    """All posting lists of one index. ``nbytes`` is its exact array memory."""

    def __init__(self, postings: int = 1024, blocks: int = 4096) -> None:
        cap = 1
        while cap < 2 * postings:
            cap *= 2
        self.h_keys = np.full(cap, EMPTY, dtype=np.int64)
        self.h_vals = np.full(cap, -1, dtype=np.int32)
        self.p_head = np.full(postings, -1, dtype=np.int32)
        self.p_tail = np.full(postings, -1, dtype=np.int32)
        self.p_fill = np.zeros(postings, dtype=np.int32)  # entries in the tail block
        self.p_key = np.zeros(postings, dtype=np.int64)
        self.p_free = np.zeros(postings, dtype=np.int32)  # ids of emptied lists, for reuse
        self.blk_next = np.full(blocks, -1, dtype=np.int32)
        self.blk_data = np.zeros(blocks * B, dtype=np.int64)
        self.blk_free = np.zeros(blocks, dtype=np.int32)
        self.meta = np.zeros(8, dtype=np.int64)

    def reserve(self, postings: int, entries: int) -> None:
        """Make room for ``postings`` new lists and ``entries`` new entries (worst case)."""
        m = self.meta
        need_p = int(m[M_POSTINGS]) + postings
        if need_p > len(self.p_head):
            cap = max(need_p, 2 * len(self.p_head))
            self.p_head = _grown(self.p_head, cap, -1)
            self.p_tail = _grown(self.p_tail, cap, -1)
            self.p_fill = _grown(self.p_fill, cap, 0)
            self.p_key = _grown(self.p_key, cap, 0)
            self.p_free = _grown(self.p_free, cap, 0)
        if 2 * (int(m[M_KEYS]) + postings) > len(self.h_keys):
            cap = len(self.h_keys)
            while 2 * (int(m[M_KEYS]) + postings) > cap:
                cap *= 2
            keys = np.full(cap, EMPTY, dtype=np.int64)
            vals = np.full(cap, -1, dtype=np.int32)
            _rehash(self.h_keys, self.h_vals, keys, vals)
            self.h_keys, self.h_vals = keys, vals
        # Each list may need a fresh tail block, plus one block per B entries.
        need_b = postings + entries // B + 1
        free = int(m[M_FREE_TOP]) + len(self.blk_next) - int(m[M_NEXT_BLOCK])
        if need_b > free:
            cap = max(len(self.blk_next) + need_b - free, 2 * len(self.blk_next))
            self.blk_next = _grown(self.blk_next, cap, -1)
            self.blk_data = _grown(self.blk_data, cap * B, 0)
            self.blk_free = _grown(self.blk_free, cap, 0)

    @property
    def arrays(self) -> tuple:
        return (self.h_keys, self.h_vals, self.p_head, self.p_tail, self.p_fill, self.p_key, self.p_free,
                self.blk_next, self.blk_data, self.blk_free, self.meta)

    @property
    def entries(self) -> int:
        return int(self.meta[M_ENTRIES])

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)


def _grown(a: np.ndarray, cap: int, fill) -> np.ndarray:
    out = np.full(cap, fill, dtype=a.dtype)
    out[: len(a)] = a
    return out


@njit(cache=True)
def _slot_of(h_keys, key):
    mask = len(h_keys) - 1
    i = (key * 0x9E3779B97F4A7C15) & mask  # Fibonacci hashing (wraps in int64)
    while True:
        k = h_keys[i]
        if k == key or k == EMPTY:
            return i
        i = (i + 1) & mask


@njit(cache=True)
def _delete_key(h_keys, h_vals, key):
    """Remove ``key`` (present) by backward-shift deletion, keeping probe chains intact."""
    mask = len(h_keys) - 1
    i = _slot_of(h_keys, key)
    j = i
    while True:
        j = (j + 1) & mask
        kj = h_keys[j]
        if kj == EMPTY:
            break
        home = (kj * 0x9E3779B97F4A7C15) & mask
        # The entry at j may move to the hole at i unless its home lies cyclically in (i, j].
        if (i < j and i < home <= j) or (i > j and (home > i or home <= j)):
            continue
        h_keys[i] = kj
        h_vals[i] = h_vals[j]
        i = j
    h_keys[i] = EMPTY
    h_vals[i] = -1


@njit(cache=True)
def _rehash(old_keys, old_vals, keys, vals):
    for i in range(len(old_keys)):
        if old_keys[i] != EMPTY:
            j = _slot_of(keys, old_keys[i])
            keys[j] = old_keys[i]
            vals[j] = old_vals[i]


@njit(cache=True)
def lookup(h_keys, h_vals, key):
    """Posting id of ``key`` or -1: O(1) expected."""
    i = _slot_of(h_keys, key)
    if h_keys[i] == EMPTY:
        return -1
    return h_vals[i]


@njit(cache=True)
def _new_block(blk_next, blk_free, meta):
    if meta[M_FREE_TOP] > 0:
        meta[M_FREE_TOP] -= 1
        b = blk_free[meta[M_FREE_TOP]]
    else:
        b = meta[M_NEXT_BLOCK]
        meta[M_NEXT_BLOCK] += 1
    blk_next[b] = -1
    return b


@njit(cache=True)
def append(h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta, key, entry):
    """Append ``entry`` to the list of ``key`` (created if absent). Capacity reserved by the caller."""
    i = _slot_of(h_keys, key)
    if h_keys[i] == EMPTY:
        if meta[M_PFREE_TOP] > 0:
            meta[M_PFREE_TOP] -= 1
            p = p_free[meta[M_PFREE_TOP]]
        else:
            p = meta[M_POSTINGS]
            meta[M_POSTINGS] += 1
        meta[M_KEYS] += 1
        h_keys[i] = key
        h_vals[i] = p
        p_head[p] = -1
        p_tail[p] = -1
        p_fill[p] = 0
        p_key[p] = key
    else:
        p = h_vals[i]
    t = p_tail[p]
    if t < 0:
        b = _new_block(blk_next, blk_free, meta)
        p_head[p] = b
        p_tail[p] = b
        p_fill[p] = 0
        t = b
    elif p_fill[p] == B:
        b = _new_block(blk_next, blk_free, meta)
        blk_next[t] = b
        p_tail[p] = b
        p_fill[p] = 0
        t = b
    blk_data[t * B + p_fill[p]] = entry
    p_fill[p] += 1
    meta[M_ENTRIES] += 1


@njit(cache=True)
def _free_chain(b, blk_next, blk_free, meta):
    """Give blocks ``b``, ``blk_next[b]``, ... back to the free stack."""
    while b >= 0:
        nb = blk_next[b]
        blk_free[meta[M_FREE_TOP]] = b
        meta[M_FREE_TOP] += 1
        b = nb


@njit(inline="always", cache=True)
def keep(e, wb, wi, blk_next, blk_data):
    """Write entry ``e`` at the cursor (block ``wb``, index ``wi``) of an in-place
    compaction; returns the advanced cursor. A scan that drops entries ends with ``truncate``."""
    blk_data[wb * B + wi] = e
    wi += 1
    if wi == B:
        return blk_next[wb], 0
    return wb, wi


@njit(cache=True)
def truncate(p, wb, wi, h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_free, meta,
             dropped):
    """End list ``p`` at write cursor (block ``wb``, index ``wi``) after an in-place compaction;
    an emptied list gives back its blocks, its key and its id."""
    meta[M_ENTRIES] -= dropped
    if wb < 0 or (wi == 0 and wb == p_head[p]):
        _free_chain(p_head[p], blk_next, blk_free, meta)
        p_head[p] = -1
        p_tail[p] = -1
        p_fill[p] = 0
        _delete_key(h_keys, h_vals, p_key[p])
        meta[M_KEYS] -= 1
        p_free[meta[M_PFREE_TOP]] = p
        meta[M_PFREE_TOP] += 1
        return
    if wi == 0:  # the cursor sits at the start of a block we no longer need: end at the previous one
        prev = p_head[p]
        while blk_next[prev] != wb:
            prev = blk_next[prev]
        b = wb
        wb = prev
        wi = B
    else:
        b = blk_next[wb]
    _free_chain(b, blk_next, blk_free, meta)
    blk_next[wb] = -1
    p_tail[p] = wb
    p_fill[p] = wi
