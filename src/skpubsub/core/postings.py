"""Compiled posting lists: a hash map from int64 keys to block-linked lists of entries.

Entries are ``slot << 32 | epoch``; a store may keep beside each a filter (``filters``: a
float32 box x1, y1, x2, y2, a keyword signature and up to three keywords, ``FILTER``),
which its owner's scan tests before it reads the entry's records (the grid: a range
subscription's rectangle and keywords, an `all` subscription's keyword bits, a kNN or top-k
region's box). Deletion is lazy: an entry is dropped when a
scan finds it invalid (its subscription's epoch moved on, or its region no
longer covers the posting's cell), so deleting or shrinking a subscription costs
nothing at the time. Scans compact the list they read in place.

All arrays live in :class:`PostingStore`; the ``@njit`` functions take them bundled
(:class:`skpubsub.core.layouts.Postings`, ``store.arrays``). Kernels never allocate: Python grows the arrays (``reserve``) before
a call that may append.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .columns import grown, small_pages
from .layouts import Postings, cached
from .prefetch import prefetch, prefetch_read, prefetch_read_at  # noqa: F401 (the kernels' P.prefetch*)

B = 8  # entries per block (small: most lists are short; unused block space is waste)
EMPTY = np.int64(-(2**62))  # an unused hash slot
# meta[] fields; M_LMAX: lmax + 1 of a grid's store whose ``lv`` summary is kept (0: none kept),
# M_DROPS: lists emptied since ``lv`` was last made exact
M_POSTINGS, M_FREE_TOP, M_NEXT_BLOCK, M_KEYS, M_ENTRIES, M_PFREE_TOP, M_LMAX, M_DROPS = 0, 1, 2, 3, 4, 5, 6, 7
ALL_LEVELS = np.int64(-1)  # ``levels_of`` when no summary is kept: every level may hold a list
# An entry's filter (32 bytes): a float32 box, its slot's keyword signature and, when the
# entry may decide its match alone (a range subscription's), the keywords an object must
# carry (``k0``-``k2``, -1 for none); ``k0`` UNDECIDED when the slot's records decide
# (index/NOTES.md, "Entries that decide a range match").
FILTER = np.dtype([("x1", np.float32), ("y1", np.float32), ("x2", np.float32), ("y2", np.float32),
                   ("sig", np.uint32), ("k0", np.int32), ("k1", np.int32), ("k2", np.int32)])
UNDECIDED = -2
NO_FILTER = (np.float32(0), np.float32(0), np.float32(0), np.float32(0), np.uint32(0),
             np.int32(UNDECIDED), np.int32(-1), np.int32(-1))  # ``append``'s, without filters
NO_FILTERS = np.zeros(0, dtype=FILTER)


class PostingStore:
    """All posting lists of one index. ``nbytes`` is its exact array memory."""

    def __init__(self, postings: int = 1024, blocks: int = 4096, filters: bool = False) -> None:
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
        # each entry's filter (``filters``; none kept: empty), moved with its entry
        self.blk_filter = np.zeros(blocks * B if filters else 0, dtype=FILTER)
        self.blk_free = np.zeros(blocks, dtype=np.int32)
        self.meta = np.zeros(8, dtype=np.int64)
        # A grid's store (``track_levels``): per token (hashed, ``lv[token & (len - 1)]``) a bit
        # for each level that may hold one of its lists (bit 0 the global list, bit l + 1 level
        # l), so a probe skips the levels where it has none. A superset: set when a list opens,
        # made exact when the hash table grows or many lists have emptied (``reserve``).
        self.lv = np.zeros(cap, dtype=np.int32)

    def track_levels(self, lmax: int) -> None:
        """Keep the ``lv`` level summary of a grid store whose keys are ``cells.level_key``'s
        (levels 0..``lmax``) and ``-(token + 1)`` (global lists); from the keys already in it."""
        if self.meta[M_LMAX] != lmax + 1:
            self.meta[M_LMAX] = lmax + 1
            self._levels_exact()

    def _levels_exact(self) -> None:
        self.lv[:] = 0
        self.meta[M_DROPS] = 0
        if self.meta[M_LMAX]:
            summarise(self.h_keys, self.lv, self.meta[M_LMAX] - 1)

    def reserve(self, postings: int, entries: int) -> None:
        """Make room for ``postings`` new lists and ``entries`` new entries (worst case)."""
        m = self.meta
        need_p = int(m[M_POSTINGS]) + postings
        if need_p > len(self.p_head):
            cap = max(need_p, 2 * len(self.p_head))
            self.p_head = grown(self.p_head, cap, -1)
            self.p_tail = grown(self.p_tail, cap, -1)
            self.p_fill = grown(self.p_fill, cap, 0)
            self.p_key = grown(self.p_key, cap, 0)
            self.p_free = grown(self.p_free, cap, 0)
        if 2 * (int(m[M_KEYS]) + postings) > len(self.h_keys):
            cap = len(self.h_keys)
            while 2 * (int(m[M_KEYS]) + postings) > cap:
                cap *= 2
            keys = np.full(cap, EMPTY, dtype=np.int64)
            vals = np.full(cap, -1, dtype=np.int32)
            rehash(self.h_keys, self.h_vals, keys, vals)
            self.h_keys, self.h_vals = keys, vals
            self.lv = np.zeros(cap, dtype=np.int32)
            self._levels_exact()
        elif m[M_LMAX] and 4 * int(m[M_DROPS]) > len(self.h_keys):  # stale bits: O(table) per O(table) drops
            self._levels_exact()
        # Each list may need a fresh tail block, plus one block per B entries.
        need_b = postings + entries // B + 1
        free = int(m[M_FREE_TOP]) + len(self.blk_next) - int(m[M_NEXT_BLOCK])
        if need_b > free:
            cap = max(len(self.blk_next) + need_b - free, 2 * len(self.blk_next))
            self.blk_next = grown(self.blk_next, cap, -1)
            self.blk_data = grown(self.blk_data, cap * B, 0)
            if len(self.blk_filter):
                with small_pages():  # 20 bytes an entry, grown by doubling: NOTES.md in index/, "Entry filters"
                    self.blk_filter = grown(self.blk_filter, cap * B, 0)
            self.blk_free = grown(self.blk_free, cap, 0)

    def grow_for(self, entries: int) -> None:
        """``reserve(entries, entries)``: what a kernel that stopped on ``room`` asks before it
        goes on (each short array at least doubles, so growth on demand is amortised O(1))."""
        self.reserve(entries, entries)

    def append_many(self, keys: np.ndarray, ents: np.ndarray, filters: np.ndarray | None = None) -> None:
        """``append(key, entry)`` of each pair in turn, in bulk (``_append_each``): each list
        ends with the same entries in the same order. ``filters`` (one per pair,
        ``FILTER``) beside them when the store keeps filters. Room is made once, for at
        most one new list a pair (counted when that bound would grow the table for nothing).
        (Grouping the pairs by key first, a sort, paid only when a call brings many entries
        a key; a run's batch of range subscriptions brings about one: NOTES.md, bulk appends.)"""
        n = len(keys)
        if not n:
            return
        lists = n if 2 * (int(self.meta[M_KEYS]) + n) <= len(self.h_keys) else len(np.unique(keys))
        self.reserve(lists, n)
        _append_each(self.plain, keys, (ents, filters if len(self.blk_filter) else NO_FILTERS))

    @property
    def arrays(self) -> Postings:
        """The store as the kernels take it (built again after growth replaced arrays)."""
        return self._layouts()[0]

    @property
    def plain(self) -> tuple:
        """``arrays`` as a plain tuple (``layouts.plain``)."""
        return self._layouts()[1]

    def _layouts(self) -> tuple[Postings, tuple]:
        return cached(self, (len(self.h_keys), len(self.p_head), len(self.blk_next)), lambda: Postings(
            self.h_keys, self.h_vals, self.p_head, self.p_tail, self.p_fill, self.p_key, self.p_free, self.blk_next,
            self.blk_data, self.blk_free, self.meta, self.lv, self.blk_filter))

    @property
    def entries(self) -> int:
        return int(self.meta[M_ENTRIES])

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    def _check(self) -> None:
        """Assert the store's invariants (a test helper: plain NumPy over the arrays, O(size)).

        The hash table holds exactly the live lists' keys, each once and findable by
        probing (no EMPTY slot between its home and its slot) and naming its list; an EMPTY
        slot has value -1 and at least half the table is EMPTY (``reserve``'s rule). A list
        id below ``M_POSTINGS`` is either live (a head) or on the free stack, never both; a
        live list's chain of distinct blocks ends at its ``p_tail`` with ``p_fill`` in 1..B
        (an emptied list is freed, never kept empty). A block below ``M_NEXT_BLOCK`` is in
        exactly one chain or on the free stack. ``meta``'s counts (lists, keys, entries,
        free tops) agree with all that."""
        m = self.meta
        n_post, free_top, next_block = int(m[M_POSTINGS]), int(m[M_FREE_TOP]), int(m[M_NEXT_BLOCK])
        n_keys, n_entries, pfree_top = int(m[M_KEYS]), int(m[M_ENTRIES]), int(m[M_PFREE_TOP])
        cap = len(self.h_keys)
        assert cap > 0 and cap & (cap - 1) == 0, ("hash table size not a power of two", cap)
        assert len(self.h_vals) == cap
        npl = len(self.p_head)
        assert all(len(a) == npl for a in (self.p_tail, self.p_fill, self.p_key, self.p_free)), "list arrays"
        nb = len(self.blk_next)
        assert len(self.blk_data) == nb * B and len(self.blk_free) == nb, "block arrays"
        assert len(self.blk_filter) in (0, nb * B), "filters"
        assert 0 <= n_post <= npl and 0 <= pfree_top <= n_post, ("list counters", n_post, pfree_top, npl)
        assert 0 <= next_block <= nb and 0 <= free_top <= next_block, ("block counters", next_block, free_top, nb)
        # the hash table
        empty = self.h_keys == EMPTY
        used = np.flatnonzero(~empty)
        assert np.array_equal(self.h_vals == -1, empty), "an EMPTY hash slot has a value (or a key has none)"
        assert len(used) == n_keys, ("meta keys", n_keys, len(used))
        assert 2 * n_keys <= cap, ("hash table over half full", n_keys, cap)
        keys, vals = self.h_keys[used], self.h_vals[used]
        assert len(np.unique(keys)) == len(keys), "a key in two hash slots"
        assert len(np.unique(vals)) == len(vals), "a list id under two keys"
        assert np.all((vals >= 0) & (vals < n_post)), "a key names a list id out of range"
        assert np.array_equal(self.p_key[vals], keys), "p_key disagrees with the hash table"
        # linear probing from the key's home (slot_of's Fibonacci hash, the low bits of the
        # wrapped product) meets no EMPTY slot before the key's own
        mask = cap - 1
        home = ((keys.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) & np.uint64(mask)).astype(np.int64)
        dist = (used - home) & mask
        far = dist > 0
        if far.any():  # the first EMPTY slot at or after the home (cyclically) lies past the key
            holes = np.flatnonzero(empty)
            j = np.searchsorted(holes, home[far])
            gap = np.where(j < len(holes), holes[np.minimum(j, len(holes) - 1)] - home[far], holes[0] + cap - home[far])
            assert np.all(gap > dist[far]), "a key not reachable by probing from its home"
        if m[M_LMAX]:  # the level summary covers every list: a scan never skips a level that has one
            lmax = int(m[M_LMAX]) - 1
            stride = (4 ** (lmax + 1) - 1) // 3
            tok = np.where(keys < 0, -keys - 1, keys // stride)
            r = keys - tok * stride
            firsts = np.array([(4 ** lv - 1) // 3 for lv in range(lmax + 2)], dtype=np.int64)
            bit = np.where(keys < 0, 0, np.searchsorted(firsts, r, side="right"))  # level + 1
            assert len(self.lv) & (len(self.lv) - 1) == 0, "lv size not a power of two"
            assert np.all((self.lv[tok & (len(self.lv) - 1)] >> bit) & 1), "a list's level missing from lv"
        for i in used[[0, -1]].tolist() if len(used) else ():  # the replica above agrees with the kernels' probe
            assert lookup(self.h_keys, self.h_vals, self.h_keys[i]) == self.h_vals[i], ("lookup", int(self.h_keys[i]))
        # lists: live (a head) or freed, and the live ones exactly the hash table's values
        head = self.p_head[:n_post]
        live = np.flatnonzero(head >= 0)
        assert np.array_equal(np.sort(vals), live), "live lists differ from the lists the hash table names"
        freed = self.p_free[:pfree_top]
        assert len(np.unique(freed)) == len(freed), "a list id freed twice"
        assert np.all((freed >= 0) & (freed < n_post)), "a freed list id out of range"
        assert np.all(head[freed] == -1) and np.all(self.p_tail[freed] == -1) and np.all(self.p_fill[freed] == 0), \
            "a freed list still has blocks"
        assert len(live) + len(freed) == n_post, ("list ids leaked (neither live nor freed)", n_post, len(live),
                                                  len(freed))
        # block chains, walked for every live list at once
        blk, blk_list, blk_pos, last = self._chains(live, next_block)
        assert len(np.unique(blk)) == len(blk), "a block in two chains (or twice in one)"
        assert np.array_equal(last, self.p_tail[live]), "a chain does not end at its p_tail"
        fill = self.p_fill[live]
        assert np.all((fill >= 1) & (fill <= B)), "a tail fill out of 1..B"
        length = np.bincount(blk_list, minlength=len(live)) if len(live) else np.zeros(0, dtype=np.int64)
        assert int(((length - 1) * B + fill).sum()) == n_entries, ("meta entries", n_entries)
        free = self.blk_free[:free_top]
        assert len(np.unique(free)) == len(free), "a block freed twice"
        assert np.all((free >= 0) & (free < next_block)), "a freed block out of range"
        assert not np.isin(free, blk).any(), "a block both in a chain and on the free stack"
        assert len(blk) + free_top == next_block, "blocks leaked (neither in a chain nor free)"

    def _chains(self, lists: np.ndarray, next_block: int) -> tuple[np.ndarray, ...]:
        """The blocks of the chains of ``lists`` (live ids), walked side by side: (block, index
        of its list in ``lists``, position in its chain) in chain order per list, and each
        list's last block. Asserts every block is below ``next_block`` and no chain cycles."""
        cur = self.p_head[lists].astype(np.int64)
        at = np.arange(len(lists))
        last = np.full(len(lists), -1, dtype=np.int64)
        blks, owners, poss = [], [], []
        pos = 0
        while len(at):
            assert pos <= next_block, "a chain cycles"
            b = cur[at]
            assert np.all(b < next_block), "a chain reaches an unallocated block"
            blks.append(b)
            owners.append(at)
            poss.append(np.full(len(at), pos))
            last[at] = b
            cur[at] = self.blk_next[b]
            at = at[cur[at] >= 0]
            pos += 1
        if not blks:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty, last
        blk, owner, position = np.concatenate(blks), np.concatenate(owners), np.concatenate(poss)
        order = np.lexsort((position, owner))
        return blk[order], owner[order], position[order], last

    def _flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(key, entry, position in ``blk_data``) of every entry, list by list in chain order
        (a test helper, O(size))."""
        live = np.flatnonzero(self.p_head[: int(self.meta[M_POSTINGS])] >= 0)
        blk, owner, _, last = self._chains(live, int(self.meta[M_NEXT_BLOCK]))
        count = np.where(blk == last[owner], self.p_fill[live][owner], B)
        slots = (blk[:, None] * B + np.arange(B)[None, :])[np.arange(B)[None, :] < count[:, None]]
        return np.repeat(self.p_key[live][owner], count), self.blk_data[slots], slots

    def contents(self) -> dict[int, np.ndarray]:
        """Every list's entries in order, by key (a test helper)."""
        keys, ents, _ = self._flat()
        if not len(keys):
            return {}
        cut = np.flatnonzero(np.diff(keys)) + 1  # _flat keeps each list's entries together
        return {int(k[0]): e for k, e in zip(np.split(keys, cut), np.split(ents, cut))}


@njit(cache=True)
def slot_of(h_keys, key):
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
    i = slot_of(h_keys, key)
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


@njit(inline="always", cache=True)
def note_level(lv, key, lmax):
    """Set the ``lv`` bit of ``key``'s level under its token (``cells.level_key``'s layout:
    ``token * stride + (4**level - 1) // 3 + cell``; a global list ``-(token + 1)``)."""
    if key < 0:
        tok = -key - 1
        bit = 0
    else:
        stride = (4 ** (lmax + 1) - 1) // 3  # cells on all levels
        tok = key // stride
        r = key - tok * stride
        level = 0
        while (4 ** (level + 1) - 1) // 3 <= r:
            level += 1
        bit = level + 1
    lv[tok & (len(lv) - 1)] |= np.int32(1) << bit


@njit(cache=True)
def summarise(h_keys, lv, lmax):
    """``lv`` from the keys in the table (``note_level`` of each)."""
    for i in range(len(h_keys)):
        if h_keys[i] != EMPTY:
            note_level(lv, h_keys[i], lmax)


@njit(inline="always", cache=True)
def levels_of(st, tok):
    """The ``lv`` bits of ``tok``: the levels where it may have a list (bit 0 global, bit l + 1
    level l), or all of them when the store keeps no summary."""
    if st.meta[M_LMAX] == 0:
        return ALL_LEVELS
    lv = st.lv
    return np.int64(lv[tok & (len(lv) - 1)])


@njit(cache=True)
def rehash(old_keys, old_vals, keys, vals):
    for i in range(len(old_keys)):
        if old_keys[i] != EMPTY:
            j = slot_of(keys, old_keys[i])
            keys[j] = old_keys[i]
            vals[j] = old_vals[i]


@njit(inline="always", cache=True)
def find(h_keys, h_vals, key):
    """``lookup`` inlined where it is called in a loop (a compiled call passing the two
    arrays pays an atomic reference count each way)."""
    mask = len(h_keys) - 1
    i = (key * 0x9E3779B97F4A7C15) & mask  # slot_of's probe
    while True:
        k = h_keys[i]
        if k == key:
            return np.int64(h_vals[i])
        if k == EMPTY:
            return np.int64(-1)
        i = (i + 1) & mask


@njit(cache=True)
def lookup(h_keys, h_vals, key):
    """Posting id of ``key`` or -1: O(1) expected."""
    i = slot_of(h_keys, key)
    if h_keys[i] == EMPTY:
        return -1
    return h_vals[i]


@njit(inline="always", cache=True)
def entry_at(st, key, entry):
    """Where ``entry`` lies in the list of ``key`` in store ``st`` (a ``Postings``), or -1:
    O(list). A slot has one entry a list per epoch, so the first found is the one."""
    p = find(st.h_keys, st.h_vals, key)
    if p < 0:
        return -1
    b = st.p_head[p]
    while b >= 0:
        for at in range(b * B, b * B + (B if b != st.p_tail[p] else st.p_fill[p])):
            if st.blk_data[at] == entry:
                return at
        b = st.blk_next[b]
    return -1


@njit(cache=True)
def room(st, n):
    """Can ``n`` entries be appended to store ``st``, each perhaps opening a new list, without
    growth? ``reserve(n, n)``'s rule, so after ``grow_for(n)`` it holds. Bulk posting checks it
    per subscription and returns to Python to grow (on demand): reserving the worst case up front
    (every entry a new list) sized the hash table and list arrays for 3.1M lists when 1M range
    subscriptions open 0.36M (0.9-1.4 s of ``np.full``, and a hash table 8x too big for the cache)."""
    meta = st.meta
    if 2 * (meta[M_KEYS] + n) > len(st.h_keys) or meta[M_POSTINGS] + n > len(st.p_head):
        return False
    return meta[M_FREE_TOP] + len(st.blk_next) - meta[M_NEXT_BLOCK] >= n + n // B + 1


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


@njit(inline="always", cache=True)
def _list_of(st, key):
    """The list id of ``key`` in store ``st``, opened empty if absent (room reserved)."""
    h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta, lv, blk_filter = st
    i = slot_of(h_keys, key)
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
        if meta[M_LMAX]:
            note_level(lv, key, meta[M_LMAX] - 1)
    else:
        p = h_vals[i]
    return p


@njit(inline="always", cache=True)
def put_filter(f, filt):
    """Write ``filt`` (``FILTER``'s fields, a tuple) into the filter record ``f``."""
    f.x1, f.y1, f.x2, f.y2, f.sig, f.k0, f.k1, f.k2 = filt


@njit(cache=True)
def append(st, key, entry, filt):
    """Append ``entry`` to the list of ``key`` (created if absent) in store ``st`` (a
    ``Postings``, or the same as a plain tuple), with ``filt`` (``FILTER``'s fields, a tuple)
    if the store keeps filters. Capacity reserved by the caller."""
    h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta, lv, blk_filter = st
    p = _list_of(st, key)
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
    at = t * B + p_fill[p]
    blk_data[at] = entry
    if len(blk_filter):
        put_filter(blk_filter[at], filt)
    p_fill[p] += 1
    meta[M_ENTRIES] += 1


FAR, NEAR, SOON = 16, 8, 4  # entries ahead that ``_append_each`` asks for a key's slot, its list, its tail block
RING = 32  # (a power of two above NEAR): the lists found, by entry


@njit(cache=True)
def _append_each(st, keys, payload):
    """``append(keys[j], ents[j])`` for each ``j`` in turn (room reserved; ``payload``: ``ents``
    and their filters), as a pipeline: the hash slot of entry ``j + FAR``'s key is asked
    for, entry ``j + NEAR``'s list is found (or opened) and its tail and fill asked for,
    entry ``j + SOON``'s tail block asked for, and entry ``j`` written. Each step reads what
    an earlier one brought into the cache, so the misses of a dozen entries overlap instead
    of each waiting on the last (NOTES.md, bulk appends). The write reads the tail and fill
    again: an earlier entry of the same list may have moved them since they were asked for."""
    h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta, lv, blk_filter = st
    ents, filters = payload
    n = len(keys)
    mask = len(h_keys) - 1
    ring = np.empty(RING, np.int64)
    for q in range(min(NEAR, n)):
        ring[q] = _list_of(st, keys[q])
    for j in range(n):
        if j + FAR < n:
            h = (keys[j + FAR] * 0x9E3779B97F4A7C15) & mask  # slot_of's home
            prefetch(h_keys, h)
            prefetch(h_vals, h)
        if j + NEAR < n:
            p = _list_of(st, keys[j + NEAR])
            ring[(j + NEAR) & (RING - 1)] = p
            prefetch(p_tail, p)
            prefetch(p_fill, p)
        if j + SOON < n:
            p = ring[(j + SOON) & (RING - 1)]
            t = p_tail[p]
            if t >= 0 and p_fill[p] < B:
                prefetch(blk_data, t * B + p_fill[p])
                if len(blk_filter):
                    prefetch(blk_filter, t * B + p_fill[p])
        p = ring[j & (RING - 1)]
        t, f = p_tail[p], p_fill[p]
        if t < 0 or f == B:
            b = _new_block(blk_next, blk_free, meta)
            if t < 0:
                p_head[p] = b
            else:
                blk_next[t] = b
            t, f = b, 0
        blk_data[t * B + f] = ents[j]
        if len(blk_filter):
            blk_filter[t * B + f] = filters[j]
        p_tail[p] = t
        p_fill[p] = f + 1
    meta[M_ENTRIES] += n


@njit(cache=True)
def _free_chain(b, blk_next, blk_free, meta):
    """Give blocks ``b``, ``blk_next[b]``, ... back to the free stack."""
    while b >= 0:
        nb = blk_next[b]
        blk_free[meta[M_FREE_TOP]] = b
        meta[M_FREE_TOP] += 1
        b = nb


@njit(inline="always", cache=True)
def keep(ri, wb, wi, blk_next, blk_data, blk_filter):
    """Move the entry at ``ri`` (and its filter, if the store keeps filters) to the cursor (block
    ``wb``, index ``wi``) of an in-place compaction; returns the advanced cursor. A scan that
    drops entries ends with ``truncate``."""
    w = wb * B + wi
    if w != ri:
        blk_data[w] = blk_data[ri]
        if len(blk_filter):
            blk_filter[w] = blk_filter[ri]
    wi += 1
    if wi == B:
        return blk_next[wb], 0
    return wb, wi


def entry_id(ent, live, where):
    """The id entry ``ent`` stands for when it is live, else -1. What live means is the
    owner's: each room that keeps lists here overloads this (``numba.extending.overload``)
    for the type of its ``live`` bundle (:class:`~skpubsub.core.layouts.SlotLive`: the
    grid's subscriptions; :class:`~skpubsub.core.layouts.ObjectLive`: the alive objects).
    ``where``: what the owner's test needs of the list (the grid: its level and cell)."""
    raise TypeError("postings.entry_id is compiled only: import the room that overloads it")


@njit(cache=True)  # not inline="always": Numba 0.6x's IR inliner then mixed refill's locals
def read(p, live, where, st, stamp, store, out, n):
    """THE list reader: append to ``out[n:]`` the live ids of list ``p`` (``entry_id``) not
    stamped ``st``, stamping them (``st`` -1: all of them, ``stamp`` untouched), and compact
    the list in place, dropping what is no longer live. Returns the new end of ``out``."""
    blk_next, blk_data, blk_filter = store.blk_next, store.blk_data, store.blk_filter
    rb = store.p_head[p]
    wb = rb
    wi = 0
    dropped = 0
    while rb >= 0:
        cnt = B if rb != store.p_tail[p] else store.p_fill[p]
        for ri in range(cnt):
            ent = blk_data[rb * B + ri]
            i = entry_id(ent, live, where)
            if i < 0:
                dropped += 1
                continue
            wb, wi = keep(rb * B + ri, wb, wi, blk_next, blk_data, blk_filter)
            if st < 0:
                out[n] = i
                n += 1
            elif stamp[i] != st:  # not yet seen under another key
                stamp[i] = st
                out[n] = i
                n += 1
        rb = blk_next[rb]
    if dropped:
        truncate(store, p, wb, wi, dropped)
    return n


@njit(cache=True)
def truncate(st, p, wb, wi, dropped):
    """End list ``p`` of store ``st`` at write cursor (block ``wb``, index ``wi``) after an
    in-place compaction that dropped ``dropped`` entries; an emptied list gives back its
    blocks, its key and its id."""
    h_keys, h_vals, p_head, p_tail, p_fill, p_key = st.h_keys, st.h_vals, st.p_head, st.p_tail, st.p_fill, st.p_key
    p_free, blk_next, blk_free, meta = st.p_free, st.blk_next, st.blk_free, st.meta
    meta[M_ENTRIES] -= dropped
    if wb < 0 or (wi == 0 and wb == p_head[p]):
        _free_chain(p_head[p], blk_next, blk_free, meta)
        p_head[p] = -1
        p_tail[p] = -1
        p_fill[p] = 0
        _delete_key(h_keys, h_vals, p_key[p])
        meta[M_KEYS] -= 1
        meta[M_DROPS] += 1
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
