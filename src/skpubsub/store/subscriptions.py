"""The subscription table: one slot per active subscription, columns not objects."""

from __future__ import annotations

import math
import weakref
from itertools import chain, repeat
from operator import is_not

import numpy as np

from ..io.events import KNN, RANGE, TOPK, Rects, Sub, SubBlock
from ..io.lexicon import Words
from ..core.layouts import Laid, Subs, cached
from ..core.columns import NO_IDS, Columns, SegmentPool, as_index, grow_ids, put_ids, segment_items
from ..core.scoring import unit_weights

KIND_CODE = {RANGE: 0, KNN: 1, TOPK: 2}
K_RANGE, K_KNN, K_TOPK = 0, 1, 2
# Result buffer policies under a window (how a buffer is refilled and pruned).
BUFFERS = ("kmax", "skyband", "cskyband", "ckskyband")
B_KMAX, B_SKYBAND, B_CSKYBAND, B_CKSKYBAND = range(4)


_RECORD = ("active", "kind", "match_all", "complete", "kw_len", "kw_off", "x", "y", "rx1", "ry1", "rx2", "ry2",
           "kth", "alpha", "res_off", "res_n", "k", "kb", "seq", "expires")  # SubTable.add's tuples
REC_SIZE = 128  # bytes a record (two cache lines)
_UNIT: dict[int, tuple[float, ...]] = {}  # n -> unit_weights(None, n): most subscriptions give no weights


def any_given(values) -> bool:
    """Is any of ``values`` not None (a C loop)?"""
    return any(map(is_not, values, repeat(None)))


def _unit(weights, n: int) -> tuple[float, ...]:
    if weights is not None:
        return unit_weights(weights, n)
    u = _UNIT.get(n)
    if u is None:
        u = _UNIT[n] = unit_weights(None, n)
    return u


def _put(col: np.ndarray, off: int, values) -> None:
    """``col[off:off + len(values)] = values``, item by item for a few (a slice from a list
    costs more below five)."""
    n = len(values)
    if n <= 4:
        for j in range(n):
            col[off + j] = values[j]
    else:
        col[off:off + n] = values


class SubTable(Laid):
    """Columnar subscriptions; keyword ids + unit weights in one pool, k-best buffers in another.

    A kNN/top-k subscription keeps a buffer ``B`` of up to ``kb >= k`` objects in rank
    order (key, then newest first); the result is its first ``k``. The invariant: ``B``
    holds exactly the alive qualifying objects that rank no later than the entry rule
    ``kth`` and — under a k-skyband policy — have fewer than k dominators (``dom``: the
    objects ranked before it that leave no earlier; such an object can never be in the
    result again). An arriving object enters iff its key is ``<= kth`` (it is the newest,
    so it ranks before equal keys). ``kth`` is ``inf`` while ``B`` is ``complete`` (it
    holds all that qualify); a full buffer sets it to its last key; a refill sets it to
    the threshold it chose. An object leaving the window just leaves ``B``, which stays
    exact; only when fewer than ``k`` remain and ``B`` is not complete is it refilled
    (:mod:`skpubsub.results.refill`, which also picks the policy's threshold):

    - ``kmax`` (CkQST's baseline, after Yi et al.): ``kb = ceil(kmax*k)``, the best ``kb``;
    - ``skyband`` (Mouratidis et al., Skype's baseline): the k-skyband of the objects
      scoring at least 0.95 of the k-th score;
    - ``cskyband`` (Skype Section 6.2): the k-skyband above a threshold chosen per
      subscription by the cost model of Eqs. 9-13;
    - ``ckskyband`` (CkQST Section 3.6): the same, the threshold chosen by CkQST's cost
      model (Eqs. 13-17).

    Without a window ``kb = k`` and nothing is pruned.
    """

    def __init__(self, kmax: float = 1.0, buffer: str = "kmax") -> None:
        if buffer not in BUFFERS:
            raise ValueError(f"unknown buffer policy {buffer!r}; known: {', '.join(BUFFERS)}")
        self.kmax = kmax
        self.policy = BUFFERS.index(buffer)
        self.prune = self.policy != B_KMAX
        # One record per slot: what verifying a candidate reads fills its first cache line
        # (a range candidate's rectangle too: 3-5% of range_1m's object phase; a kNN one's
        # ``kth`` opens the second line, which the adjacent-line prefetch mostly brings).
        self.cols = Columns({
            "active": (np.bool_, False), "kind": (np.int8, 0), "match_all": (np.bool_, False),
            "complete": (np.bool_, True), "kw_len": (np.int32, 0), "kw_off": (np.int64, 0),
            "x": (np.float64, 0.0), "y": (np.float64, 0.0),
            "rx1": (np.float64, 0.0), "ry1": (np.float64, 0.0), "rx2": (np.float64, 0.0), "ry2": (np.float64, 0.0),
            "kth": (np.float64, math.inf),
            "alpha": (np.float64, 0.0), "res_off": (np.int64, 0), "res_n": (np.int32, 0), "k": (np.int32, 0),
            "kb": (np.int32, 0),
            "seq": (np.int64, -1), "expires": (np.float64, math.inf),
        }, record=True)
        assert tuple(self.cols._spec) == _RECORD, "add writes records in this order"
        assert self.cols._rec.dtype.itemsize == REC_SIZE
        self.kw = SegmentPool({"id": np.int32, "ws": np.float64})
        self.res = SegmentPool({"obj": np.int64, "key": np.float64, "dom": np.int32})
        self.ids = NO_IDS  # slot -> id (an object array: the columnar notifications index it)
        self._slot_of: dict[object, int] = {}  # live id -> slot (``slot_of``), but for:
        self._pending: list[tuple[list, object]] = []  # (ids, slots) of the blocks added since it was last read
        # High-water marks of k, kb and keyword counts (the kernels' scratch is sized by them
        # per run; a max over every slot each run cost more than the run on small runs).
        self.max_k = self.max_kb = self.max_kw = 1
        # Active kNN and top-k subscriptions: while there are none, no object can be held
        # (under window none the engine then keeps no object: ``driver.Transient``).
        self.holders = 0
        self._kb: dict[int, int] = {}  # k -> kb (``claim``)
        self._lent: list[weakref.ref] = []  # notifications naming slots by code (``lend``)
        # Every slot taken so far above the ones before, with a seq above theirs: the live
        # slots then ascend with their seqs, and notifications are ordered by slot
        # (``group_rows``). A reused slot or a migrated older subscription ends it for good.
        self.in_order = True
        self._last = (-1, -1)  # (slot, seq) of the last subscription taken while in order

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_lent"] = []  # a copy lends nothing yet
        return state

    def __setstate__(self, state: dict) -> None:
        state.setdefault("_lent", [])  # (a state pickled before these: not known to be in order)
        state.setdefault("in_order", False)
        state.setdefault("_last", (-1, -1))
        self.__dict__.update(state)
        if "holders" not in state:  # (a state pickled before the count)
            c = self.cols
            self.holders = int(np.count_nonzero(c.active[: c.top] & (c.kind[: c.top] != K_RANGE)))

    def lend(self, notes) -> None:
        """``notes`` name their subscriptions by slot (``Notes.table`` is ``ids``): ``remove``
        resolves them, if still alive, before it clears a slot one of them may name. The
        dead references are dropped as the list doubles."""
        lent = self._lent
        if len(lent) >= 64 and (len(lent) & (len(lent) - 1)) == 0:
            lent[:] = [r for r in lent if r() is not None]
        lent.append(weakref.ref(notes))

    def _recall(self) -> None:
        for r in self._lent:
            notes = r()
            if notes is not None:
                notes.resolve()
        self._lent.clear()

    @property
    def slot_of(self) -> dict[object, int]:
        """Live id -> slot. The ids of the blocks ``add_many`` registered are entered here
        when it is next read, not as they come: a run that never looks an id up (no
        unsub, no export) never builds this second map of a million ids beside the Gate's
        (the dict's inserts were ~5% of ``skpubsub run`` on range_1m); one that does pays
        the same inserts, later. A live id is in one slot only (the Gate's duplicate rule),
        so ``claim`` enters its own id at once, whatever is pending."""
        if self._pending:
            d = self._slot_of
            for ids, slots in self._pending:
                d.update(zip(ids, slots))
            self._pending = []
        return self._slot_of

    def add(self, ev: Sub, kw_ids: list[int]) -> int:
        """One subscription's slot: ``claim``, then its few keyword ids and weights item by
        item (a slice from a list costs more below five). O(keywords)."""
        s, off, ws = self.claim(ev, len(kw_ids))
        kw = self.kw
        _put(kw.id, off, kw_ids)
        if ws is not None:
            _put(kw.ws, off, ws)
        return s

    def claim(self, ev: Sub, n: int) -> tuple[int, int, tuple[float, ...] | None]:
        """``add`` but the keyword segment's values: the slot and its record written whole (one
        tuple: a field at a time cost ~0.1 us each), a segment of ``n`` keywords allocated.
        Returns (slot, segment offset, unit weights to write there, or None for a range
        subscription: it has none). The caller writes the ids and weights (``add``; a lone
        registration's kernel, ``placing.register_slot``)."""
        c = self.cols
        s = c.add()
        if self.in_order:
            self._taken(s, s, ev.seq, ev.seq)
        if s >= len(self.ids):
            self.ids = grow_ids(self.ids, s)
        self.ids[s] = ev.id
        self._slot_of[ev.id] = s
        off = self.kw.alloc(n)
        if n > self.max_kw:
            self.max_kw = n
        expires = math.inf if ev.expires is None else ev.expires
        kind = ev.kind
        # the record in ``_RECORD`` order; the fields not set stay at their fill values
        at = s * REC_SIZE  # the record written whole as bytes (``Columns.reserve``)
        if kind == RANGE:
            x1, y1, x2, y2 = ev.rect  # type: ignore[misc]
            c._bytes[at:at + REC_SIZE] = c._pack(True, K_RANGE, ev.match_all, True, n, off, 0.0, 0.0, x1, y1, x2, y2,
                                                 math.inf, 0.0, 0, 0, 0, 0, ev.seq, expires)
            return s, off, None
        k = ev.k
        self.holders += 1
        try:
            kb = self._kb[k]
        except (KeyError, AttributeError):  # (a snapshot from before ``_kb``)
            kb = self._kb_of(k)
        if k > self.max_k:
            self.max_k = k
        if kb > self.max_kb:
            self.max_kb = kb
        c._bytes[at:at + REC_SIZE] = c._pack(True, KIND_CODE[kind], ev.match_all, True, n, off, ev.x, ev.y,
                                             0.0, 0.0, 0.0, 0.0, math.inf, ev.alpha, self.res.alloc(kb), 0, k, kb,
                                             ev.seq, expires)
        return s, off, _unit(ev.weights, n)  # cached when no weights are given

    def _taken(self, s0: int, s1: int, q0: int, q1: int, ascending: bool = True) -> None:
        """Slots ``s0..s1`` taken by seqs ``q0..q1`` (``ascending``: both rise within the
        block): ``in_order`` holds on if they come above the last slot and seq taken."""
        slot, seq = self._last
        if ascending and s0 > slot and q0 > seq:
            self._last = (s1, q1)
        else:
            self.in_order = False

    def _kb_of(self, k: int) -> int:
        """``buffer_size(k)`` in plain Python (NumPy on one int cost 10 us a subscription),
        remembered in ``_kb``."""
        kb = self.__dict__.setdefault("_kb", {})[k] = min(4 * k, max(k, math.ceil(self.kmax * k)))
        return kb

    def add_many(self, evs: SubBlock | list[Sub], kw_ids) -> np.ndarray:
        """``add`` of each subscription in turn, the columns written for all at once;
        returns the slots. ``evs``: a :class:`SubBlock` (the Gate's columns), or ``Sub``
        events, whose columns are read off first (``SubBlock.of``: one path); ``kw_ids``:
        their keyword ids one after another (a list or an int array). Column by column,
        each converted by one C call and written to the record field through a slice when
        the slots are fresh: O(n) with a dozen C passes, no Python step a subscription."""
        b = evs if type(evs) is SubBlock else SubBlock.of(evs)
        c = self.cols
        n = len(b)
        slots = c.add_many(n)
        at = as_index(slots)
        ids = b.id
        self.ids = put_ids(self.ids, slots, ids)
        self._pending.append((ids, range(at.start, at.stop) if isinstance(at, slice) else slots.tolist()))
        c.active[at] = True
        one = b.one_kind
        if one is not None:  # the Gate's blocks: one kind
            code = KIND_CODE[one]
            c.kind[at] = code
            kind = np.full(n, code, dtype=np.int8)
        else:
            kind = np.fromiter(map(KIND_CODE.__getitem__, b.kind), np.int8, n)
            c.kind[at] = kind
        c.match_all[at] = np.fromiter(b.match_all, np.bool_, n)
        seq = b.seq
        seqs = np.arange(seq.start, seq.stop, seq.step) if type(seq) is range else np.fromiter(seq, np.int64, n)
        c.seq[at] = seqs
        if self.in_order:
            rising = type(seq) is range and seq.step > 0 or bool((np.diff(seqs) > 0).all())
            ascending = isinstance(at, slice) and rising  # fresh slots, one after another
            self._taken(int(slots[0]), int(slots[-1]), int(seqs[0]), int(seqs[-1]), ascending)
        if b.expires is not None and any_given(b.expires):
            c.expires[at] = np.fromiter((math.inf if e is None else e for e in b.expires), np.float64, n)
        else:
            c.expires[at] = math.inf
        kws = b.keywords
        lens = kws.lens() if type(kws) is Words else np.fromiter(map(len, kws), np.int64, n)
        offs = self.kw.put_many("id", lens, kw_ids)
        c.kw_off[at], c.kw_len[at] = offs, lens
        self.max_kw = max(self.max_kw, int(lens.max()))
        rng = kind == K_RANGE
        nrng = n if one == RANGE else 0 if one is not None else int(np.count_nonzero(rng))
        if nrng:
            if type(b.rect) is Rects:
                rect = b.rect.array if nrng == n else b.rect.array[rng]
            else:
                rects = b.rect if nrng == n else [r for r, g in zip(b.rect, rng.tolist()) if g]
                rect = np.fromiter(chain.from_iterable(rects), np.float64, 4 * nrng).reshape(nrng, 4)
            rs = at if nrng == n else slots[rng]
            c.rx1[rs], c.ry1[rs], c.rx2[rs], c.ry2[rs] = rect.T
        self.holders += n - nrng
        if nrng < n:  # kNN and top-k: their unit weights and result segments
            nr = None if not nrng else np.flatnonzero(~rng)
            pick = (lambda col: col) if nr is None else (lambda col: [col[i] for i in nr.tolist()])
            rs = at if nr is None else slots[nr]
            m = n - nrng
            c.x[rs] = np.fromiter(pick(b.x), np.float64, m)
            c.y[rs] = np.fromiter(pick(b.y), np.float64, m)
            c.alpha[rs] = 0.0 if b.alpha is None else np.fromiter(pick(b.alpha), np.float64, m)
            k = np.fromiter(pick(b.k), np.int64, m)
            kb = self.buffer_size(k)
            c.k[rs], c.kb[rs] = k, kb
            self.max_k, self.max_kb = max(self.max_k, int(k.max())), max(self.max_kb, int(kb.max()))
            c.res_off[rs] = self.res.alloc_many(kb)
            weights = None if b.weights is None else pick(b.weights)
            self._unit_weights_many(weights, offs if nr is None else offs[nr], lens if nr is None else lens[nr])
        return slots

    def _unit_weights_many(self, weights: list | None, offs: np.ndarray, lens: np.ndarray) -> None:
        """The unit weight vectors of the ranked subscriptions of ``weights`` (their given
        weights, None for none; or None for no weights given at all; keyword segments at
        ``offs``, ``lens``):
        ``_unit``'s values, those of subscriptions without weights looked up in a table by
        (length, position) for all at once, the others one by one."""
        idx, owner = segment_items(offs, lens)
        top = int(lens.max())
        table = np.zeros((top + 1, top), dtype=np.float64)
        for ln in np.unique(lens).tolist():
            table[ln, :ln] = _unit(None, ln)
        within = idx - np.repeat(offs, lens)
        self.kw.ws[idx] = table[lens[owner], within]
        if weights is not None and any_given(weights):
            for i, w in enumerate(weights):
                if w is not None:
                    off, ln = int(offs[i]), int(lens[i])
                    self.kw.ws[off:off + ln] = _unit(w, ln)

    def buffer_size(self, k):
        """``kb`` of a kNN/top-k subscription of ``k`` (an int or an array): ``kmax*k``
        rounded up, at least k and at most 4k."""
        return np.minimum(4 * k, np.maximum(k, np.ceil(self.kmax * k).astype(np.int64)))

    def remove(self, s: int) -> None:
        c = self.cols
        self.kw.release(int(c.kw_off[s]), int(c.kw_len[s]))
        if c.kind[s] != K_RANGE:
            self.res.release(int(c.res_off[s]), int(c.kb[s]))
            self.holders -= 1
        del self.slot_of[self.ids[s]]
        if self._lent:
            self._recall()
        self.ids[s] = None
        c.free(s)

    def keywords(self, s: int) -> np.ndarray:
        off = self.cols.kw_off[s]
        return self.kw.id[off:off + self.cols.kw_len[s]]

    def result(self, s: int) -> np.ndarray:
        """Object slots of the result (the buffer's first k), rank order (a view)."""
        off = self.cols.res_off[s]
        return self.res.obj[off:off + min(self.cols.res_n[s], self.cols.k[s])]

    def buffer(self, s: int) -> np.ndarray:
        """Object slots of the whole buffer, rank order (a view)."""
        off = self.cols.res_off[s]
        return self.res.obj[off:off + self.cols.res_n[s]]

    def _layouts(self) -> tuple[Subs, tuple]:
        key = (self.cols.capacity, self.kw.capacity, self.res.capacity)
        return cached(self, key, lambda: Subs(self.cols.records, self.kw.id, self.kw.ws, self.res.obj, self.res.key,
                                              self.res.dom, self.policy))

    @property
    def nbytes(self) -> int:
        return self.cols.nbytes + self.kw.nbytes + self.res.nbytes

    def _check(self) -> None:
        """Assert the table's invariants (a test helper, O(slots + pool sizes)): the slots in
        use are exactly the active ones, ``ids`` and ``slot_of`` name each other for them
        and nothing for the others, free slots are cleared (inactive); each active slot's
        keyword segment holds distinct ids, and a kNN/top-k one's unit weight vector and a
        result segment of ``kb >= k`` entries with ``res_n <= kb``; a range slot has no
        result segment (``kb`` and ``res_n`` 0); the segments in use lie inside their pools,
        never overlap each other or a free segment, and with the free ones tile the pools."""
        c = self.cols
        c._check()  # free slots at their fill values: inactive, no segment
        top = c.top
        act = np.flatnonzero(c.active[:top])
        in_use = np.ones(top, dtype=np.bool_)
        in_use[np.asarray(c._free, dtype=np.int64)] = False
        assert np.array_equal(act, np.flatnonzero(in_use)), "active slots differ from the slots in use"
        assert len(self.slot_of) == len(act) == c.count, ("slot_of size", len(self.slot_of), len(act), c.count)
        assert self.holders == np.count_nonzero(c.kind[act] != K_RANGE), ("holders", self.holders)
        if len(act):
            assert (self.max_k >= c.k[act].max() and self.max_kb >= c.kb[act].max()
                    and self.max_kw >= c.kw_len[act].max()), "a high-water mark below a slot's value"
        assert not len(act) or act[-1] < len(self.ids), "an active slot past ids"
        for s, ident in zip(act.tolist(), self.ids[act].tolist()):
            assert ident is not None and self.slot_of.get(ident) == s, ("slot_of disagrees with ids", s, ident)
        free = np.flatnonzero(~in_use)
        assert np.all(np.equal(self.ids[free[free < len(self.ids)]], None)), "a free slot keeps an id"
        assert np.all(np.equal(self.ids[top:], None)), "an id past top"
        assert not self.in_order or bool((np.diff(c.seq[act]) > 0).all()), "in order, but seqs do not ascend"
        kind = c.kind[act]
        assert np.all((kind == K_RANGE) | (kind == K_KNN) | (kind == K_TOPK)), "unknown kind"
        kw_off, kw_len = c.kw_off[act], c.kw_len[act]
        assert np.all(kw_len >= 1), "a subscription without keywords"
        idx, owner = segment_items(kw_off, kw_len)
        kw = self.kw.id[idx].astype(np.int64)
        assert np.all(kw >= 0) and len(np.unique((owner << 32) | kw)) == len(kw), "keyword ids not distinct"
        rk = kind[owner] != K_RANGE
        ws = self.kw.ws[idx][rk]
        norm = np.bincount(owner[rk], weights=ws * ws, minlength=len(act))[kind != K_RANGE]
        assert np.all(ws > 0) and np.all(np.abs(norm - 1.0) <= 1e-9), "weights not a unit vector"
        ranked, rng = act[kind != K_RANGE], act[kind == K_RANGE]
        k, kb, res_n = c.k[ranked], c.kb[ranked], c.res_n[ranked]
        assert np.all((k >= 1) & (k <= kb)), "kb below k (or k < 1)"
        assert np.all((res_n >= 0) & (res_n <= kb)), "res_n outside 0..kb"
        assert np.all(c.kb[rng] == 0) and np.all(c.res_n[rng] == 0), "a range slot with a result segment"
        self.kw._check(kw_off, kw_len)
        self.res._check(c.res_off[ranked], kb)
