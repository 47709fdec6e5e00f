"""Placing subscriptions in the compiled grid (:mod:`cgrid`): where a slot is posted (its
level and cell box, ``nodecost.slot_level``), under which tokens (``_tokens``), and its
entries written into the posting store.

Two shapes of the same rule: for many slots at once (``regions`` then ``post_many`` or
``entries_of``: bulk registration and re-posting), and for one slot in one compiled call
(``place_slot``, ``unplace_slot``, ``region_of``: a subscription registered or ended on its
own, where a call per step cost microseconds of Python each; the first two take one
bundle, ``One``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit
from numba.core import types
from numba.experimental import structref

from ..core import postings as P
from ..store.subscriptions import K_RANGE, K_TOPK
from .cells import best_level, extent, filter_box, level_key
from .nodecost import finest_cells, plain_cells, slot_level
from .pairs import assign_many
from .prefix import NC, post_tokens, prefix_bounds
from .probe import kw_sig


@njit(cache=True)
def post_slot(st, subs, slots, s, kws, lmax, maxdist):
    """Entries of slot ``s`` under each token of ``kws`` in store ``st``, where its record in
    ``slots`` places it (its epoch, and the cells of its box on its level; level -1: the
    global lists), each with its filter (``entry_filter`` of ``subs.rec[s]`` and the slot);
    returns how many."""
    g = slots[s]
    entry = (np.int64(s) << 32) | g.epoch
    level = np.int64(g.level)
    box = g.box
    fb = entry_filter(subs.rec[s], g, subs.kw_id, maxdist, kws[0] if len(kws) == 1 else -1)
    n = 0
    for w in kws:
        if level < 0:
            P.append(st, -(np.int64(w) + 1), entry, fb)
            n += 1
            continue
        for cx in range(box[0], box[2] + 1):
            for cy in range(box[1], box[3] + 1):
                P.append(st, level_key(w, level, cx, cy, lmax), entry, fb)
                n += 1
    return n


@njit(cache=True)
def _tokens(s, subs, grid, out):
    """What slot ``s`` is posted under, into ``out`` (``_keywords``' rule): its token, else a
    prefix-filtered top-k subscription's classes, else an `all` subscription's least
    frequent keyword, else its keywords. (``grid.prefix`` is on while the index holds
    prefix-filtered top-k slots, so with a top-k slot in hand it says the index filters.)"""
    r = subs.rec[s]
    tok = grid.slots[s].tok
    if tok < 0 and grid.prefix and r.kind == K_TOPK:  # its keyword classes at the posted rule (prefix filter)
        return post_tokens(r.kw_off, np.int64(r.kw_len), subs.kw_id, grid.slots[s].pkth, r.alpha, grid.rb, out)
    return _plain_tokens(r, tok, subs.kw_id, grid.freq, grid.refs, out)


@njit(inline="always", cache=True)
def rarest(kw_id, off, ln, freq, refs):
    """Where in ``kw_id[off:off+ln]`` the keyword an `all` subscription is posted under is:
    GI²'s least frequent in the objects seen (``freq``), and among equals the one fewest
    hold (``refs``: subscriptions, and the objects a window keeps), then the first. Before
    any object is seen every keyword ties on ``freq``: by ``freq`` alone a subscription went
    under its first keyword, on GeoNames its country code, which every object of that
    country probes (range_1m: 1,623 entries read an object, 72% failing the signature;
    index/NOTES.md, "The keyword a subscription is posted under")."""
    best = off
    for j in range(off + 1, off + ln):
        a, b = kw_id[j], kw_id[best]
        if freq[a] < freq[b] or (freq[a] == freq[b] and refs[a] < refs[b]):
            best = j
    return best


@njit(inline="always", cache=True)
def _plain_tokens(r, tok, kw_id, freq, refs, out):
    """``_tokens`` of a slot that is not a prefix-filtered top-k one (record ``r``, token
    ``tok``), inlined where it is called per slot: a compiled call taking the ``Subs`` and
    ``Grid`` bundles pays a reference count on each of their twenty-odd arrays each way."""
    if tok >= 0:
        out[0] = tok
        return 1
    off, ln = r.kw_off, r.kw_len
    if r.match_all and ln > 1:
        out[0] = kw_id[rarest(kw_id, off, ln, freq, refs)]
        return 1
    for j in range(ln):
        out[j] = kw_id[off + j]
    return ln


@njit(inline="always", cache=True)
def _sig(r, kw_id):
    """The scan's keyword signature of record ``r``'s slot (``probe.scan``): its keywords'
    when it must match them all (the kernel's keyword test then applies), else 0."""
    if r.match_all and r.kw_len > 1:
        return kw_sig(kw_id[r.kw_off:r.kw_off + r.kw_len])
    return np.int64(0)


@njit(inline="always", cache=True)
def entry_filter(r, g, kw_id, maxdist, posted):
    """The filter posted beside each entry of record ``r``'s slot ``g`` (``postings.FILTER``,
    what ``probe._read_list`` tests before the slot's records), set where the slot is placed:
    ``cells.filter_box`` at the slot's ``pkth``, its signature (``_sig``) and, for a range
    subscription that must match all of its keywords, those an object that finds the entry
    must still be checked for: all but ``posted``, the one keyword its entries go under (-1:
    several tokens, or one that is no keyword), which every object that reads the entry
    carries. Three at most (else the records decide, ``UNDECIDED``), so that the entry may
    decide the kernel's test alone (``probe.decided``): range_1m's subscriptions of four
    keywords decide too. They hold while its entries live: a range rectangle and the keywords
    never change, and a kNN or top-k region that grows past its filter is posted again
    (``cells.filter_holds``)."""
    x1, y1, x2, y2 = filter_box(r, g.pkth, maxdist)
    k0 = k1 = k2 = np.int32(-1)
    if r.kind != K_RANGE or not r.match_all and r.kw_len > 1:  # not a range one, or posted under each
        k0 = np.int32(P.UNDECIDED)
    elif r.match_all:  # (any of one: found under it, the kernel's test passes)
        n = 0
        for j in range(r.kw_off, r.kw_off + r.kw_len):
            w = np.int32(kw_id[j])
            if w == posted:
                continue
            if n == 0:
                k0 = w
            elif n == 1:
                k1 = w
            elif n == 2:
                k2 = w
            else:  # four or more to test: the records
                k0, k1, k2 = np.int32(P.UNDECIDED), np.int32(-1), np.int32(-1)
                break
            n += 1
    return x1, y1, x2, y2, np.uint32(g.sig), k0, k1, k2


@njit(cache=True)
def filters_of(slots, subs, sl, maxdist, out):
    """``entry_filter`` of each of ``slots`` into ``out`` (``postings.FILTER``): what their
    live entries must carry (``CompiledGrid._check``); returns how many of the slots' regions
    now reach outside that filter (none may: the filter must pass every object they take)."""
    ext = np.empty(4)
    bad = 0
    for i in range(len(slots)):
        s = slots[i]
        f = out[i]
        P.put_filter(f, entry_filter(subs.rec[s], sl[s], subs.kw_id, maxdist, sl[s].kw0))
        if extent(subs.rec[s], maxdist, ext):
            bad += not (f.x1 <= ext[0] and f.y1 <= ext[1] and ext[2] <= f.x2 and ext[3] <= f.y2)
        else:
            bad += not (f.x1 == -np.inf and f.y1 == -np.inf and f.x2 == np.inf and f.y2 == np.inf)
    return bad


@njit(cache=True)
def regions(slots, subs, grid, ext):
    """``place``'s first half for many slots: each slot's level and box (``slot_level``), a
    new epoch, posted under its ``_tokens``. Returns the entries ``post_many`` will add."""
    sl = grid.slots
    one = np.empty(1, dtype=np.int64)
    total = 0
    for s in slots:
        r = subs.rec[s]
        undecide(grid.store, sl, s, subs.rec, subs.kw_id, grid.lmax)
        box = sl[s].box[:]  # an array, as the kernel's box: one specialisation of the level rules
        pre = grid.prefix and r.kind == K_TOPK
        if pre:  # the prefix order follows the frequencies as they are now
            prefix_bounds(r.kw_off, np.int64(r.kw_len), subs.kw_id, subs.kw_ws, grid.freq, grid.rb)
        sl[s].pkth = r.kth  # the k-th key posted at: the entry filter's, and top-k classes'
        if not extent(r, grid.geo[4], ext):
            level = -1
            box[:] = -1
        elif r.kind == K_RANGE or grid.theta_n <= 0.0 or len(grid.counts) == 0:  # slot_level's plain rule
            level = finest_level(ext, grid.geo, grid.lmax, grid.max_cells, box)
        else:
            level = slot_level(s, subs, grid, ext, box)
        sl[s].level = level
        sl[s].epoch = (sl[s].epoch + 1) & 0xFFFFFFFF
        sl[s].pending = False
        kw0 = -1
        if sl[s].tok >= 0:
            n = 1
        elif pre:
            n = _tokens(s, subs, grid, np.empty(r.kw_len, dtype=np.int64))
        elif r.match_all:  # posted under one keyword: the kernel's kw0 test
            n = _plain_tokens(r, np.int64(-1), subs.kw_id, grid.freq, grid.refs, one)
            kw0 = one[0]
        else:
            n = r.kw_len
        sl[s].nkw = n
        sl[s].kw0 = kw0
        sl[s].sig = _sig(r, subs.kw_id)
        cells = 1 if level < 0 else (box[2] - box[0] + 1) * (box[3] - box[1] + 1)
        total += n * cells
    return total


@njit(cache=True)  # called, not inlined: compile time (index/NOTES.md, "inline")
def finest_level(ext, geo, lmax, max_cells, out):
    """``cells.best_level`` (the finest level where ``ext`` covers at most ``max_cells`` cells,
    its box into ``out``) from one box, the finest level's (``nodecost.finest_cells``): a cell
    index one level up is the index below halved (``cell_of``'s ``(v - lo) * g / width``
    scales exactly by powers of two, and floor(x / 2) = floor(floor(x) / 2); the clamp to the
    grid commutes with the halving), so each coarser level is four shifts, not four divisions
    and floors (``nodecost.plain_cells``). Indices too large for that (|x| >= 2**62, or NaN)
    take ``best_level`` itself."""
    ok, a0, b0, a1, b1 = finest_cells(ext, geo, lmax)
    if not ok:
        return best_level(ext, geo, lmax, max_cells, out)
    return plain_cells(a0, b0, a1, b1, lmax, max_cells, out)


@njit(cache=True)
def _finest_level(ext, geo, lmax, max_cells, out):
    """``finest_level`` callable from Python (its test against ``cells.best_level``)."""
    return finest_level(ext, geo, lmax, max_cells, out)


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
        post_slot(st, Keywords(subs.rec, subs.kw_id), sl, s, toks[:n], grid.lmax, grid.geo[4])  # (one signature)
    return len(slots)


@njit(cache=True)
def entries_of(slots, subs, grid, toks, keys, ents, filters):
    """``post_many``'s (key, entry, filter) triples, in its order, into ``keys``, ``ents``
    and ``filters``: for ``PostingStore.append_many``. Returns how many. (``cells.level_key``
    with its level's terms taken out of the loop over the cells.)"""
    sl = grid.slots
    lmax = grid.lmax
    stride = np.int64((4 ** (lmax + 1) - 1) // 3)  # level_key's: cells on all levels
    kw_id, freq, refs = subs.kw_id, grid.freq, grid.refs
    n = 0
    for s in slots:
        r = subs.rec[s]
        tok = sl[s].tok
        if tok < 0 and grid.prefix and r.kind == K_TOPK:
            m = _tokens(s, subs, grid, toks)
        else:
            m = _plain_tokens(r, tok, kw_id, freq, refs, toks)
        level = np.int64(sl[s].level)
        box = sl[s].box
        entry = (np.int64(s) << 32) | sl[s].epoch
        fb = entry_filter(r, sl[s], kw_id, grid.geo[4], toks[0] if m == 1 else -1)
        if level < 0:
            for w in toks[:m]:
                n = _entry(keys, ents, filters, n, -(np.int64(w) + 1), entry, fb)
            continue
        first = (np.int64(4) ** level - 1) // 3
        g = np.int64(1) << level
        x0, y0, x1, y1 = np.int64(box[0]), np.int64(box[1]), np.int64(box[2]), np.int64(box[3])
        for w in toks[:m]:
            base = np.int64(w) * stride + first
            for cx in range(x0, x1 + 1):
                for cy in range(y0, y1 + 1):
                    n = _entry(keys, ents, filters, n, base + cx * g + cy, entry, fb)
    return n


@njit(inline="always", cache=True)
def _entry(keys, ents, filters, n, key, entry, fb):
    """``entries_of``'s triple ``n``; returns ``n + 1``."""
    keys[n] = key
    ents[n] = entry
    P.put_filter(filters[n], fb)
    return n + 1


class Keywords(NamedTuple):
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
    return slot_level(s, Keywords(rec, kw_id), levels, ext, cell)


@njit(inline="always", cache=True)
def undecide(st, slots, s, rec, kw_id, lmax):
    """Before slot ``s``'s entries die (``delete``, or its next placement), the ones that
    decide a range match alone (``entry_filter``'s keywords; ``probe.decided``) are made
    undecided, so that a scan tests them against the slot's records, finds them dead and
    drops them: a deciding entry is live, and the scan reads nothing of its slot (index/NOTES.md,
    "Entries that decide a range match"). The lists walked are those of each of its keywords
    and its token in the cells of its box: a superset of those it is posted in."""
    g = slots[s]
    r = rec[s]
    if g.nkw == 0 or r.kind != K_RANGE:  # (first: a fresh slot costs these two reads only)
        return
    if len(st.blk_filter) == 0:
        return
    entry = (np.int64(s) << 32) | g.epoch
    level = np.int64(g.level)
    for j in range(-1, r.kw_len):
        w = np.int64(g.tok) if j < 0 else np.int64(kw_id[r.kw_off + j])
        if w < 0:
            continue
        if level < 0:
            _undecide_at(st, P.entry_at(st, -(w + 1), entry))
            continue
        for cx in range(g.box[0], g.box[2] + 1):
            for cy in range(g.box[1], g.box[3] + 1):
                _undecide_at(st, P.entry_at(st, level_key(w, level, cx, cy, lmax), entry))


@njit(inline="always", cache=True)
def _undecide_at(st, at):
    if at >= 0:
        st.blk_filter[at].k0 = P.UNDECIDED


@njit(cache=True)
def undecide_slot(st, slots, s, rec, kw_id, lmax):
    """``undecide`` in a call of its own (``CompiledGrid.delete``)."""
    undecide(st, slots, s, rec, kw_id, lmax)


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
    """What ``_tokens`` reads of a ``Grid`` layout (``place_slot``)."""

    slots: np.ndarray
    prefix: bool
    rb: np.ndarray
    freq: np.ndarray
    refs: np.ndarray


# -- one slot at a time: the arrays bundled once, in a structref -----------------------------
# A compiled call unboxes each array it is given (~0.07 us each: the former ``place_one`` and
# aoiq's ``assign_one`` took 30 between them, 4.8 us a subscription, a third of registering one).
# A structref holds them natively: it is unboxed as one pointer however many arrays it
# holds, so the owner builds it once and again only when an array it holds is replaced
# (growth). A plain tuple would not do: Numba unboxes a tuple's arrays one by one.
@structref.register
class OneType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class One(structref.StructRefProxy):
    """What registering or ending one slot reads and writes (``CompiledGrid._bundle``): the
    subscription table's records and keyword pool; the vocabulary's holder counts; the grid's slot records (``tok``: their
    token field), geometry, cost model counts, keyword frequencies, prefix bounds and posting
    store; scratch (``ext``, ``toks``, ``srt``, ``one``); ``consts`` = (lmax, max_cells,
    theta_n, warm_n, prefix) as floats; aoiq's pairs (``pairs``: the index posts `all`
    subscriptions under pairs of ``kinds``; ``book``, ``cost``, ``pair_of``; ``cost_ok[0]``:
    ``cost`` is current, else the call asks for it)."""


ONE_FIELDS = ("rec", "kw_id", "kw_ws", "refs", "slots", "tok", "geo", "counts", "freq", "rb", "store", "ext", "toks", "consts",
              "pairs", "kinds", "book", "cost", "pair_of", "srt", "cost_ok", "one")
structref.define_proxy(One, OneType, list(ONE_FIELDS))


@njit(cache=True)
def new_one(fields):
    """``One(*fields)`` (``ONE_FIELDS`` in order, one tuple) through a cached compiled call:
    the proxy's own constructor is compiled afresh in every process (numba's
    ``StructRefProxy.__new__``, not cached: ~0.65 s before the first subscription
    registered one by one)."""
    return One(*fields)

# What ``place_slot`` asks for before it writes anything (its first result), else DONE.
DONE, NEED_FIT, NEED_TOKS, NEED_RB, NEED_COST, NEED_BOOK = range(6)


@njit(cache=True)
def place_slot(s, one, assign):
    """``place`` of slot ``s`` in one call (``assign``: aoiq's Algorithm 1 first, as a new
    subscription's ``insert``): the slot's pair and token (``pairs.assign_many``), its prefix
    bounds (top-k), level, box, epoch, tokens and ``kw0`` as ``regions`` writes them, then its
    entries if the store has room (``postings.room``). Returns (need, entries its old posting
    had, entries of the new one, posted, entries in the store): ``need`` is DONE, or what the
    caller must provide before calling again (nothing written then); when not posted, the
    caller grows the store and posts the slot (``post_many``); last, whether the slot is a
    prefix-filtered top-k one."""
    slots, rec, kw_id = one.slots, one.rec, one.kw_id
    if s >= len(slots):
        return NEED_FIT, 0, 0, False, 0, False
    r = rec[s]
    if len(one.toks) < r.kw_len or len(one.srt) < r.kw_len:
        return NEED_TOKS, 0, 0, False, 0, False
    consts = one.consts
    lmax, max_cells, prefix = np.int64(consts[0]), np.int64(consts[1]), consts[4] != 0
    topk = prefix and r.kind == K_TOPK
    if topk and len(one.rb) < len(kw_id) * NC:
        return NEED_RB, 0, 0, False, 0, False
    undecide(one.store, slots, s, rec, kw_id, lmax)  # (before its token may change)
    if assign and one.pairs:
        if r.match_all and r.kw_len > 1 and (one.kinds >> r.kind) & 1 and not one.cost_ok[0]:
            return NEED_COST, 0, 0, False, 0, False
        one.one[0] = s
        if assign_many(one.one, Keywords(rec, kw_id), one.kinds, one.book, one.cost, one.tok, one.pair_of,
                       one.srt) == 0:
            return NEED_BOOK, 0, 0, False, 0, False
    sl = slots[s]
    old = 0
    if sl.nkw:
        old = sl.nkw * (1 if sl.level < 0 else (sl.box[2] - sl.box[0] + 1) * (sl.box[3] - sl.box[1] + 1))
    freq = one.freq
    if topk:  # the prefix order follows the frequencies as they are now
        prefix_bounds(r.kw_off, np.int64(r.kw_len), kw_id, one.kw_ws, freq, one.rb)
    sl.pkth = r.kth  # the k-th key posted at (``regions``)
    box = sl.box[:]  # an array, as the kernel's box: one specialisation of the level rules
    ext = one.ext
    if extent(r, one.geo[4], ext):
        levels = _Levels(slots, one.geo, lmax, max_cells, one.counts, consts[2], np.int64(consts[3]), freq)
        level = slot_level(s, Keywords(rec, kw_id), levels, ext, box)
    else:
        level = -1
        box[:] = -1
    sl.epoch = (sl.epoch + 1) & 0xFFFFFFFF
    sl.level = level
    sl.pending = False
    toks = one.toks
    n = _tokens(s, Keywords(rec, kw_id), _Tokens(slots, prefix, one.rb, freq, one.refs), toks)
    sl.nkw = n
    sl.kw0 = toks[0] if r.match_all and n == 1 and sl.tok < 0 else -1  # place's rule (refresh reads it)
    sl.sig = _sig(r, kw_id)
    cells = 1 if level < 0 else (box[2] - box[0] + 1) * (box[3] - box[1] + 1)
    st = one.store
    if not P.room(st, n * cells):
        return DONE, old, n * cells, False, st.meta[P.M_ENTRIES], topk
    post_slot(st, Keywords(rec, kw_id), slots, s, toks[:n], lmax, one.geo[4])
    return DONE, old, n * cells, True, st.meta[P.M_ENTRIES], topk


@njit(cache=True)
def unplace_slot(s, one):
    """``delete`` of slot ``s`` in one call: ``unplace``, then (aoiq) one member fewer in its
    pair's block (as aoiq's former ``unassign``). Returns the live entries it had, or -1 when the per-slot
    records must grow first."""
    if s >= len(one.slots) or (one.pairs and s >= len(one.pair_of)):
        return -1
    undecide(one.store, one.slots, s, one.rec, one.kw_id, np.int64(one.consts[0]))
    n = unplace(one.slots, s)
    if one.pairs:
        b = one.book
        p, tok = one.pair_of[s], one.tok
        if p >= 0 and tok[s] != b.p_b0[p]:
            for j in range(b.p_start[p], b.p_start[p] + b.p_count[p]):
                if b.d_tok[j] == tok[s]:
                    b.d_cnt[j] -= 1
                    break
        one.pair_of[s] = -1
        tok[s] = -1
    return n


FEW = 8  # keywords a subscription registered by ``register_slot`` may have


@njit(cache=True)
def register_slot(s, one, kw, off, unit):
    """A new subscription's slot ``s`` in one call, its record already written
    (``SubTable.claim``): its keyword ids ``kw`` (a tuple of ``FEW``, -1 after the last:
    one specialisation for every count, engine/NOTES.md "A cold run's compile") into the pool at ``off`` and
    their holder counts up (``Vocabulary.acquire``'s counting), with ``unit`` its unit
    weights (``scoring.unit_weights(None, n)``: each 0.5 / sqrt(n * 0.25), the same floats
    in the same order), then ``place_slot`` with ``assign``. Returns ``place_slot``'s
    result and the ids nobody held before (the vocabulary's dormant words woken). The
    writes are done whatever ``place_slot`` asks for: the caller then calls it alone."""
    kw_id, refs = one.kw_id, one.refs
    n = 0
    while n < len(kw) and kw[n] >= 0:
        n += 1
    woke = 0
    for j in range(n):
        i = kw[j]
        kw_id[off + j] = i
        if refs[i] == 0:
            woke += 1
        refs[i] += 1
    if unit:
        acc = 0.0
        for j in range(n):
            acc += 0.25
        w = 0.5 / math.sqrt(acc)
        for j in range(n):
            one.kw_ws[off + j] = w
    # a bool, not a Literal[bool]: the specialisation Python's calls compile
    need, old, m, posted, entries, topk = place_slot(s, one, np.bool_(True))
    return need, old, m, posted, entries, topk, woke
