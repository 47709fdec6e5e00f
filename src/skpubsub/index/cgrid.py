"""The compiled grid inverted file: DkM-SKS's worker index and PS2Stream's GI².

One structure serves both papers (DkM-SKS section 4.3; PS2Stream section IV-D):
grid cells that each hold an inverted file (keyword -> subscriptions).

* ``range``: posted in the cells its rectangle overlaps; an ``all`` subscription
  under its least frequent keyword only, an ``any`` one under each keyword (GI²).
* ``knn`` (and ``topk``): posted in the cells its ball B(s) overlaps — radius
  ``sqrt(kth)``, or for top-k the distance at which an object could still reach
  the k-th score — once its result is full; before that in a per-keyword global
  list (DkM-SKS's unfilled subscriptions). With ``prefix`` (the default) a top-k
  subscription's keywords are posted under object size class tokens and the keywords
  past its prefix not at all (:mod:`skpubsub.index.prefix`, Skype's prefix filter).

The grid is multi-resolution (levels of 1, 2, 4, ... ``grid`` cells per side,
a quadtree flattened into hash keys; geometry in :mod:`cells`): a region is posted
at the finest level where it covers at most ``max_cells`` cells, so a big ball does
not flood a fine grid and a small one is not diluted in a coarse cell, or with
``theta_n`` (aoiq's default) a kNN/top-k region at the level CkQST's cost model
chooses (:mod:`nodecost`). An object probes its cell on every level.

Deletion and shrinking are lazy (:mod:`postings`): a slot's ``epoch``, ``level``
and cell ``box`` decide whether an entry is live, so a shrinking ball is
tightened in place at no cost and stale entries vanish when a scan passes them.
A ball that grows (results refilled after expiry), leaves the global list, or
shrinks a level finer is re-posted under a new epoch. The publish kernel in
:mod:`skpubsub.engine.kernel` scans these postings directly.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.config import Space
from ..core.columns import grown, grown_records, segment_items
from ..store.subscriptions import K_RANGE, K_TOPK, SubTable
from ..core.vocab import Vocabulary
from ..core import postings as P
from ..core.layouts import Directory, Grid, cached, uncached
from .base import SubscriptionIndex
from .cells import box_at, decode_key, filter_holds, level_key
from .nodecost import count_objects, new_counts
from .pairs import Cost, new_book
from .placing import (DONE, FEW, NEED_FIT, NEED_RB, NEED_TOKS, One, entries_of, filters_of, new_one, place_slot,
                      post_many, post_slot, rarest, region_of, regions, register_slot, undecide_slot, unplace)
from .prefix import NC, post_tokens, probe_classes, same_classes
from .probe import NO_WORDS, kw_sig, probe_scratch, scan, sweep

# Per-slot fields, one record a slot (columns.records): a posting entry's liveness test
# (postings.read: epoch, level, box) and the scan's stamp read one cache line.
SLOT_FIELDS = (
    ("epoch", np.int64, 0),
    ("stamp", np.int64, -1),  # last probe that met the slot (scan)
    ("box", "(4,)i4", -1),
    ("pkth", np.float64, math.inf),  # the k-th key it was posted at: its entries' filters, top-k classes
    ("tok", np.int64, -1),  # a posting token other than keywords (aoiq), or -1
    ("nkw", np.int32, 0),  # keywords posted under (0: not posted)
    ("kw0", np.int32, -1),  # the one keyword an `all` subscription is posted under
    ("level", np.int8, -1),  # -1: the global list
    ("pending", np.bool_, False),  # queued for re-posting by the kernel
    ("sig", np.uint32, 0),  # an `all` subscription's keyword signature (probe.kw_sig), else 0: the scan's test
)

_NO_IDS = (-1,) * FEW  # what follows a registered subscription's keyword ids (placing.register_slot)
BULK = 4096  # entries from which place_many groups them by key rather than appending one by one

# What a grid without keyword pairs puts in its ``One`` bundle for aoiq's fields (never read).
_NO_BOOK = new_book()
_NO_COST = Cost(np.zeros(1, dtype=np.int64), np.ones(3), np.zeros(2))
_NO_PAIR_OF = np.zeros(1, dtype=np.int64)

_NO_DIRECTORY = Directory(np.full(1, P.EMPTY, dtype=np.int64), np.full(1, -1, dtype=np.int32),
                          *(np.zeros(0, dtype=np.int64) for _ in range(6)))


class CompiledGrid(SubscriptionIndex):
    """Multi-level grid of inverted files in compiled posting lists; see the module docstring.

    ``grid`` (a power of two) is the finest level's cells per side; ``prefix`` turns on the
    prefix filter for top-k subscriptions; ``theta_n`` > 0 chooses the level of kNN and top-k
    regions by CkQST's memory-based cost model with that θ (:mod:`nodecost`) once ``warm_n``
    objects have been seen.
    """

    name = "dkm"
    compiled = True

    def __init__(self, subs: SubTable, vocab: Vocabulary, space: Space, grid: int = 16384,
                 max_cells: int = 4, refresh_from: int = 1024, prefix: bool = True, theta_n: float = 0.0,
                 warm_n: int = 1024) -> None:
        super().__init__(subs, vocab, space)
        self.prefix = bool(prefix)
        self.lmax = max(0, int(math.ceil(math.log2(max(1, int(grid))))))
        self.theta_n = float(theta_n)
        self.warm_n = int(warm_n)
        # objects seen per cell (the cost model's spatial distribution); empty when it is off
        self.counts = new_counts(self.lmax) if self.theta_n > 0 else np.zeros(0, dtype=np.int64)
        self.max_cells = max(1, int(max_cells))
        self.geo = np.array([space.x1, space.y1, space.x2 - space.x1, space.y2 - space.y1, space.maxdist])
        self.store = P.PostingStore(filters=True)
        self._slots = grown_records(None, 1024, SLOT_FIELDS)
        self._bind()
        self.rb = np.zeros(0, dtype=np.float32)  # prefix.prefix_bounds of top-k keywords, by keyword pool offset
        self.n_topk = 0  # prefix-filtered top-k slots: objects probe class tokens only while there are some
        self.stamp_next = np.zeros(1, dtype=np.int64)  # last stamp used
        self.live_entries = 0
        self._refreshed_at = max(1, int(refresh_from))  # objects seen at the next review of `all` postings
        self.refreshed = 0  # `all` subscriptions re-posted under a newly least frequent keyword
        self._ext = np.zeros(4)
        self._tmp = np.zeros(4, dtype=np.int32)

    # -- pickling (worker snapshots, migrations) -----------------------------------------
    def __getstate__(self) -> dict:
        """Everything but the posting store: the live postings are a function of each
        slot's epoch, level, box and keywords, so the store is rebuilt on load without
        its stale entries and spare capacity (snapshots about 3x smaller)."""
        state = uncached(self.__dict__.copy())
        state["store"] = None
        state["_one"] = state["_one_src"] = None  # a compiled bundle: built again on demand
        for name, _, _ in SLOT_FIELDS:  # views of _slots
            del state[name]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._slots = grown_records(self._slots, len(self._slots), SLOT_FIELDS)  # aligned again
        self._bind()
        self.store = P.PostingStore(filters=True)
        self.live_entries = 0
        active = self.subs.cols.active
        for s in np.nonzero(self.nkw)[0].tolist():  # posted slots (a deleted one has nkw 0)
            if active[s]:  # an `all` subscription may come back under another of its keywords:
                self._post(s, self._keywords(s))  # every matching object carries each of them

    # -- per-slot records follow the subscription table's capacity --------------------
    def fit(self, s: int) -> None:
        """Per-slot records up to slot ``s`` (they follow the subscription table's capacity)."""
        if s < len(self._slots):
            return
        self._slots = grown_records(self._slots, max(s + 1, 2 * len(self._slots)), SLOT_FIELDS)
        self._bind()

    def _bind(self) -> None:
        for name, _, _ in SLOT_FIELDS:  # plain attributes: the kernels take them as arrays
            setattr(self, name, self._slots[name])
        if "_toks" not in self.__dict__:
            self._toks = np.empty(16, dtype=np.int64)
        if "_srt" not in self.__dict__:
            self._srt = np.empty(16, dtype=np.int64)
        self._one = self._one_src = None  # arrays it held were replaced (snapshots restore through _bind too)

    # -- one slot at a time: ``placing.place_slot``/``unplace_slot`` take one bundle ------------
    def _pairs(self) -> tuple:
        """aoiq's part of the bundle: (posts under pairs, kinds, book, cost, pair_of, cost_ok)."""
        return False, 0, _NO_BOOK, _NO_COST, _NO_PAIR_OF, np.zeros(1, dtype=np.bool_)

    def _bundle(self) -> One:
        """The ``One`` bundle of the arrays as they are now (``_one``), and what ``_current``
        compares to tell when an array it holds was replaced by growth elsewhere (the
        subscription table, the vocabulary, the posting store)."""
        subs, st = self.subs, self.store
        pairs, kinds, book, cost, pair_of, cost_ok = self._pairs()
        consts = np.array([self.lmax, self.max_cells, self.theta_n, self.warm_n, self.prefix], dtype=np.float64)
        self._one = new_one((subs.cols._rec, subs.kw.id, subs.kw.ws, self.vocab.refs, self._slots, self.tok, self.geo,
                             self.counts, self.vocab.freq, self.rb, st.arrays, self._ext, self._toks, consts, pairs,
                             kinds, book, cost, pair_of, self._srt, cost_ok, np.empty(1, dtype=np.int64)))
        self._one_src = (subs.cols._rec, subs.kw.id, self.vocab.freq, st.h_keys, st.p_head, st.blk_next)
        return self._one

    def _current(self) -> One:
        """``_one``, built again if some array it holds was replaced (six identity tests:
        the growth outside this class; this class and aoiq drop ``_one`` on their own)."""
        one, src = self._one, self._one_src
        if one is None:
            return self._bundle()
        subs, st = self.subs, self.store
        if (src[0] is not subs.cols._rec or src[1] is not subs.kw.id or src[2] is not self.vocab.freq
                or src[3] is not st.h_keys or src[4] is not st.p_head or src[5] is not st.blk_next):
            return self._bundle()
        return one

    def _need(self, need: int) -> None:
        """Provide what ``place_slot`` asked for (``placing.NEED_*``)."""
        if need == NEED_FIT:
            self.fit(self.subs.cols.capacity - 1)
        elif need == NEED_TOKS:
            self._toks = np.empty(2 * self.subs.max_kw, dtype=np.int64)
            self._srt = np.empty(2 * self.subs.max_kw, dtype=np.int64)
        elif need == NEED_RB:  # class_bounds' growth, for a top-k slot about to be counted
            self.rb = grown(self.rb, self.subs.kw.capacity * NC, 0.0)
        else:
            self._need_pairs(need)
        self._one = None

    def _need_pairs(self, need: int) -> None:
        raise AssertionError(f"place_slot asked for {need} without pairs")

    def _region(self, s: int) -> tuple[int, np.ndarray]:
        """(best level or -1, its cell box) of the slot's current region."""
        level = region_of(s, self.subs.cols.records, self.subs.kw.id, self._slots, self.geo, self.counts,
                          self.vocab.freq, (self.lmax, self.max_cells, self.theta_n, self.warm_n), self._ext, self._tmp)
        return level, self._tmp.copy()

    @property
    def layout(self) -> Grid:
        """The grid as the kernels take it (built again after growth replaced arrays)."""
        return self._layouts()[0]

    def _layouts(self) -> tuple[Grid, tuple]:
        rb, st, on = self.class_bounds(), self.store.arrays, self.n_topk > 0
        return cached(self, (len(self._slots), st.h_keys.size, st.p_head.size, st.blk_next.size,
                             len(self.vocab.freq), len(rb), on),
                      lambda: Grid(self._slots, st, self.geo, self.lmax, self.max_cells, self.counts, self.theta_n,
                                   self.warm_n, self.vocab.freq, self.vocab.refs, rb, on, self.stamp_next))

    def _prefixed(self, s: int) -> bool:
        return self.prefix and self.subs.cols.kind[s] == K_TOPK

    def class_bounds(self) -> np.ndarray:
        """``rb`` with room for every keyword pool offset (the kernel reads it)."""
        if self.n_topk and len(self.rb) < self.subs.kw.capacity * NC:
            self.rb = grown(self.rb, self.subs.kw.capacity * NC, 0.0)
            self._one = None
        return self.rb

    def _same(self, s: int) -> bool:
        """Are a top-k slot's posted classes still right (prefix.same_classes)?"""
        c = self.subs.cols
        return not self._prefixed(s) or bool(same_classes(c.kw_off[s], c.kw_len[s], c.kth[s], self.pkth[s],
                                                          c.alpha[s], self.class_bounds()))

    def _keywords(self, s: int) -> np.ndarray:
        """What slot ``s`` is posted under: a token, keyword ids, or (top-k) class tokens (int64)."""
        if self.tok[s] >= 0:
            return self.tok[s:s + 1].copy()
        if self._prefixed(s):
            c = self.subs.cols
            out = np.empty(int(c.kw_len[s]), dtype=np.int64)
            n = post_tokens(c.kw_off[s], c.kw_len[s], self.subs.kw.id, self.pkth[s], c.alpha[s],
                            self.class_bounds(), out)
            return out[:n]
        c, kw = self.subs.cols, self.subs.kw.id
        if c.match_all[s] and c.kw_len[s] > 1:  # least frequent so far (GI²), of equals the least held
            j = rarest(kw, c.kw_off[s], c.kw_len[s], self.vocab.freq, self.vocab.refs)
            return kw[j:j + 1].astype(np.int64)
        return self.subs.keywords(s).astype(np.int64)

    def _cells(self, s: int) -> int:
        if self.level[s] < 0:
            return 1
        b = self.box[s]
        return int((b[2] - b[0] + 1) * (b[3] - b[1] + 1))

    def place(self, s: int, assign: bool = False) -> bool:
        """Post slot ``s`` afresh under a new epoch (``assign``: a new subscription, given its
        pair first under aoiq): O(cells x keywords), one compiled call (``place_slot``) unless
        an array must grow first. Returns whether ``s`` is a prefix-filtered top-k slot."""
        while True:
            need, old, n, posted, entries, topk = place_slot(s, self._current(), assign)
            if need == DONE:
                break
            self._need(need)
        self._placed(s, old, n, posted, entries)
        return topk

    def _placed(self, s: int, old: int, n: int, posted: bool, entries: int) -> None:
        """``place``'s ending: the live entries counted, the slot posted if the store had no
        room, or the store compacted."""
        self.live_entries += n - old
        if not posted:  # what place's reserve did, then the posting
            self.store.grow_for(n)
            post_many(np.array([s], dtype=np.int64), self.subs.layout, self.layout, self._toks)
            self.maybe_compact()
        elif entries > 2 * self.live_entries + 65536:  # maybe_compact's rule, the count at hand
            self.compact_all()

    def register(self, ev) -> int:
        """``Vocabulary.acquire``, ``SubTable.add`` and ``insert`` of a new subscription (a run
        of one) with one compiled call (``placing.register_slot``: the keyword ids, counts,
        weights, pair and postings). Returns its slot, or -1, having done nothing, for more
        than ``FEW`` keywords or repeated ones (the engine then takes the three steps)."""
        words = ev.keywords
        n = len(words)
        if n > FEW or (n > 1 and len(set(words)) != n):
            return -1
        vocab, subs = self.vocab, self.subs
        ids = vocab.few_ids(words)  # new words learnt, as ``acquire`` learns them
        s, off, ws = subs.claim(ev, n)
        unit = ws is not None
        if unit and ev.weights is not None:  # given weights: written here
            subs.kw.ws[off:off + n] = ws
            unit = False
        need, old, m, posted, entries, topk, woke = register_slot(s, self._current(), ids + _NO_IDS[n:], off, unit)
        if woke:
            vocab.woke(woke)
        while need != DONE:
            self._need(need)
            need, old, m, posted, entries, topk = place_slot(s, self._current(), True)
        if posted and entries <= 2 * (self.live_entries + m - old) + 65536:  # ``_placed``'s usual case
            self.live_entries += m - old
        else:
            self._placed(s, old, m, posted, entries)
        if topk:
            self.n_topk += 1
        return s

    def place_many(self, slots: np.ndarray) -> None:
        """``place`` of each slot in turn, in two compiled passes (regions, then postings);
        prefix-filtered top-k slots must be counted in ``n_topk`` first."""
        self.fit(int(slots.max()))
        fresh = self.nkw[slots] == 0
        self.live_entries -= int(sum(self._cells(s) * int(self.nkw[s]) for s in slots[~fresh].tolist()))
        subs, grid = self.subs.layout, self.layout
        n = regions(slots, subs, grid, np.empty(4))
        toks = np.empty(self.subs.max_kw, dtype=np.int64)
        if n >= BULK:  # grouped by key (PostingStore.append_many)
            keys, ents, filters = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64), np.empty(n, P.FILTER)
            entries_of(slots, subs, grid, toks, keys, ents, filters)
            self.store.append_many(keys, ents, filters)
        else:
            # Blocks for the entries now; keys and lists on demand (postings.room): they number
            # far fewer than the entries (1M range subscriptions: 3.1M entries in 0.36M lists).
            self.store.reserve(0, n)
            done = 0
            while True:
                done += post_many(slots[done:], subs, self.layout, toks)
                if done == len(slots):
                    break
                s = int(slots[done])
                self.store.grow_for(self._cells(s) * int(self.nkw[s]))
        self.live_entries += n
        self.maybe_compact()

    def insert_many(self, slots: np.ndarray) -> None:
        if self.prefix:
            self.n_topk += int(np.count_nonzero(self.subs.cols.kind[slots] == K_TOPK))
        self.place_many(slots)

    def _post(self, s: int, kws: np.ndarray) -> None:
        """Entries for slot ``s`` under its epoch, level and box: O(cells x keywords)."""
        self.nkw[s] = len(kws)
        self.kw0[s] = kws[0] if self.subs.cols.match_all[s] and len(kws) == 1 and self.tok[s] < 0 else -1
        n = len(kws) * self._cells(s)
        self.store.reserve(n, n)
        post_slot(self.store.plain, self.subs.layout, self._slots, s, kws, self.lmax, self.geo[4])
        self.live_entries += n

    def refresh(self, objects: int) -> int:
        """GI² posts an `all` subscription under its least frequent keyword, but most
        register before the frequencies mean anything, and one in the global lists
        (unfilled, or a ball spanning the space) is not re-posted by the kernel. Each
        time the objects seen double, re-post those whose least frequent keyword has
        changed: O(global `all` subscriptions) per review, O(log objects) reviews.
        Returns the number re-posted."""
        if objects < self._refreshed_at:
            return 0
        self._refreshed_at = 2 * objects
        c = self.subs.cols
        n = min(len(self.level), c.top)
        cand = np.flatnonzero((self.level[:n] < 0) & (self.kw0[:n] >= 0) & c.active[:n])
        # each one's keyword by ``placing.rarest``'s order, all at once
        items, owner = segment_items(c.kw_off[cand], c.kw_len[cand])
        kws = self.subs.kw.id[items]
        order = np.lexsort((np.arange(len(kws)), self.vocab.refs[kws], self.vocab.freq[kws], owner))
        first = order[np.flatnonzero(np.r_[True, owner[order][1:] != owner[order][:-1]])] if len(order) else order
        moved = cand[kws[first] != self.kw0[cand]].tolist()
        for s in moved:  # placing one changes no other's keywords or frequencies
            self.place(s)
        self.refreshed += len(moved)
        return len(moved)

    def count(self, xs: np.ndarray, ys: np.ndarray) -> None:
        """Arriving objects at ``xs, ys``: the cost model's cell counts (nothing when it is off)."""
        if len(self.counts):
            count_objects(self.counts, xs, ys, self.geo)

    def maybe_compact(self) -> None:
        """Sweep stale entries once they outnumber live ones (amortised O(1) per entry)."""
        if self.store.entries > 2 * self.live_entries + 65536:
            self.compact_all()

    def compact_all(self) -> None:
        """Drop every stale entry of every list: O(entries) (``probe.sweep``)."""
        self.stamp_next[0] += 1
        sweep(self.layout, self.subs.cols.active, self.stamp_next[0], np.empty(len(self.epoch), dtype=np.int64))

    # -- the SubscriptionIndex protocol --------------------------------------------
    def insert(self, s: int) -> None:
        if self.place(s, True):
            self.n_topk += 1

    def delete(self, s: int) -> None:
        """O(1): the slot's entries die with its epoch (``placing.unplace``: one array to pass,
        cheaper than the bundle's check; aoiq takes the bundle, ``unplace_slot``)."""
        if self.prefix:
            self.n_topk -= self._prefixed(s)
        if s >= len(self._slots):
            self.fit(s)
        if self.nkw[s] and self.subs.cols.kind[s] == K_RANGE:  # its deciding entries first
            undecide_slot(self.store.arrays, self._slots, s, self.subs.cols._rec, self.subs.kw.id, self.lmax)
        self.live_entries -= unplace(self._slots, s)

    def update(self, s: int) -> None:
        """The region changed: tighten in place, or re-post when it grew, left the global
        list, or shrank a level finer (same rule as the kernel's)."""
        level, _ = self._region(s)
        cur = int(self.level[s])
        c = self.subs.cols
        same = self._same(s) and filter_holds(c.kind[s], c.kth[s], self.pkth[s], c.alpha[s], self.geo[4])
        if cur < 0 or level < 0 or level > cur:
            if level != cur or cur >= 0 or not same:
                self.place(s)
            return
        new = np.empty(4, dtype=np.int32)
        box_at(cur, self._ext, self.geo, new)
        old = self.box[s]
        if new[0] < old[0] or new[1] < old[1] or new[2] > old[2] or new[3] > old[3] or not same:
            self.place(s)
            return
        before = self._cells(s)
        self.box[s] = new
        self.live_entries -= (before - self._cells(s)) * int(self.nkw[s])

    def _tokens(self, kw_ids: np.ndarray) -> np.ndarray:
        """What an object with keywords ``kw_ids`` probes: its keywords, and with the prefix
        filter its class tokens (prefix.probe_classes)."""
        if not self.n_topk:
            return kw_ids
        out = np.empty((NC + 1) * len(kw_ids), dtype=np.int64)
        out[: len(kw_ids)] = kw_ids
        return out[: probe_classes(kw_ids, out, len(kw_ids))]

    def candidates(self, x: float, y: float, kw_ids) -> np.ndarray:
        ids = np.asarray(kw_ids, dtype=np.int64)
        return self._scan(x, y, self._tokens(ids), int(kw_sig(ids)))

    def _scan(self, x: float, y: float, tokens: np.ndarray, sig: int = -1) -> np.ndarray:
        """The live slots under ``tokens`` in the cells of (x, y), but those whose keyword
        signature has a bit outside ``sig`` (an object's ``kw_sig``; -1: none left out)."""
        self.fit(self.subs.cols.capacity - 1)
        cands = np.empty(len(self.epoch), dtype=np.int64)
        self.stamp_next[0] += 1
        n = scan(x, y, tokens, self.stamp_next[0], self.subs.cols.active, self.layout, cands, sig, False, NO_WORDS,
                 probe_scratch(len(tokens), self.lmax))
        return np.sort(cands[:n])

    @property
    def kernel_grid(self) -> CompiledGrid:
        return self

    @property
    def directory(self) -> Directory:
        """The arrays ``aoiq.probe_tokens`` reads to turn an object's keywords into posting
        tokens; none here (an object probes its keywords)."""
        return _NO_DIRECTORY

    @property
    def nbytes(self) -> int:
        return self.store.nbytes + self._slots.nbytes + self.rb.nbytes + self.counts.nbytes

    def _check(self, owned: np.ndarray | None = None) -> None:
        """The posting store is well formed (``PostingStore._check``); live entries are each
        posted slot's, once per list, ``cells x tokens`` of them per slot, ``live_entries``
        in all; every active slot's region lies inside its posted cells, and each of them
        holds a live entry for the slot. ``owned``: the slots this grid holds (default: all)."""
        c = self.subs.cols
        st = self.store
        assert st.entries >= 0
        st._check()  # the posting store's own invariants (hash table, chains, free stacks, counters)
        # Live entries (the rule of postings.read: active, current epoch, this level, box covers the
        # cell): a posted slot has one in each of its cells x tokens, none twice in a list,
        # and ``live_entries`` counts them all.
        keys, ents, at = st._flat()
        s = ents >> 32
        assert np.all((s >= 0) & (s < c.capacity) & (s < len(self.epoch))), "an entry of no slot"
        stride = (4 ** (self.lmax + 1) - 1) // 3  # cells.decode_key, for every entry at once
        firsts = np.array([(4 ** lv - 1) // 3 for lv in range(self.lmax + 2)], dtype=np.int64)
        r = np.where(keys < 0, 0, keys % stride)
        level = np.where(keys < 0, -1, np.searchsorted(firsts[1:], r, side="right"))
        r = r - firsts[np.maximum(level, 0)]
        g = np.left_shift(1, np.maximum(level, 0))
        cx, cy = r // g, r % g
        for i in (0, len(keys) - 1) if len(keys) else ():  # the replica agrees with decode_key
            assert decode_key(keys[i], self.lmax) == (level[i], cx[i], cy[i]) or keys[i] < 0, ("decode", int(keys[i]))
        b = self.box[s]
        ok = c.active[s] & (self.epoch[s] == (ents & 0xFFFFFFFF)) & (self.level[s] == level) & (
            (level < 0) | ((b[:, 0] <= cx) & (cx <= b[:, 2]) & (b[:, 1] <= cy) & (cy <= b[:, 3])))
        ls, lk = s[ok], keys[ok]
        # each live entry's filter (placing.entry_filter): its range rectangle, or its kNN/top-k region
        # at the k-th key it was posted at widened by cells.MARGIN, rounded outward, and its slot's
        # keyword signature; and each slot's region now lies inside it (the filter passes its objects)
        fl = st.blk_filter[at[ok]]
        want = np.empty(len(ls), dtype=P.FILTER)
        outside = filters_of(ls, self.subs.layout, self._slots, self.geo[4], want)
        for name in P.FILTER.names:
            assert np.array_equal(fl[name], want[name]), ("a live entry's filter is not its slot's", name)
        assert outside == 0, ("regions grown past their entries' filters", outside)
        order = np.lexsort((ls, lk))
        ls_o, lk_o = ls[order], lk[order]
        assert not np.any((ls_o[1:] == ls_o[:-1]) & (lk_o[1:] == lk_o[:-1])), "a slot's live entry twice in one list"
        assert len(ls) == self.live_entries, ("live_entries drifted", self.live_entries, len(ls))
        per_slot = np.bincount(ls, minlength=c.capacity)
        act = np.flatnonzero(c.active[: c.top])
        act = act[act < len(self.nkw)]  # slots past the per-slot records were never posted
        bx = self.box[act]
        cells = np.where(self.level[act] < 0, 1, (bx[:, 2] - bx[:, 0] + 1) * (bx[:, 3] - bx[:, 1] + 1))
        want = cells * self.nkw[act]  # an unposted slot (nkw 0) has none
        bad = np.flatnonzero(per_slot[act] != want)
        assert not len(bad), ("live entries of a slot", act[bad][:5], per_slot[act][bad][:5], want[bad][:5])
        mine = c.active[: c.top] if owned is None else c.active[: c.top] & owned[: c.top]
        for s in np.flatnonzero(mine).tolist():
            level, _ = self._region(s)
            cur = int(self.level[s])
            if cur >= 0:
                assert level >= 0, ("posted in cells but the region is unbounded", s)
                need = np.empty(4, dtype=np.int32)
                box_at(cur, self._ext, self.geo, need)
                b = self.box[s]
                assert b[0] <= need[0] and b[1] <= need[1] and need[2] <= b[2] and need[3] <= b[3], (s, b, need)
            kws = self.subs.keywords(s)
            if self._prefixed(s):  # under the classes its entry rule gives, each (match all or any)
                assert self._same(s), ("top-k classes out of date", s)
                kws = self._keywords(s)
                assert self.nkw[s] == len(kws), ("top-k classes posted", s)
            assert self._prefixed(s) or self.nkw[s] == (1 if c.match_all[s] and len(kws) > 1 else len(kws)), s
            if self.tok[s] >= 0:
                kws = self.tok[s:s + 1]
            elif self.nkw[s] != len(kws):
                continue  # posted under one keyword chosen by frequency at the time
            entry = (s << 32) | int(self.epoch[s])
            for w in kws.tolist():
                if cur < 0:
                    keys = [-(w + 1)]
                else:
                    keys = [int(level_key(w, cur, cx, cy, self.lmax))
                            for cx in range(self.box[s, 0], self.box[s, 2] + 1)
                            for cy in range(self.box[s, 1], self.box[s, 3] + 1)]
                for key in keys:
                    assert P.entry_at(st.arrays, key, entry) >= 0, ("missing entry", s, key)
