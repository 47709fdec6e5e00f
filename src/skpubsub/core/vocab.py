"""Keyword ids and object frequencies (the statistic the indexes' cost choices read).

Memory under a window (SPEC section 6): ids are reference-counted by their holders
(alive objects and active subscriptions: ``acquire`` when one arrives, ``release`` when
it leaves). A keyword nobody holds any more is forgotten: its word is dropped, its
frequency reset, and its id is recycled by a later new keyword, so an endless vocabulary
runs in memory bounded by the live keywords. An owner of per-keyword structures that
are not emptied the moment their last holder leaves (lazily deleted postings) must
drop the key before the id is reused: ``released`` hands out the ids freed since the
last call, and they are only reused after ``recycle`` says so.

``id``/``ids``/``count`` keep their old meaning (no counting): code that never
releases never frees anything.

``slack``: with ``None`` a keyword is forgotten the moment its last holder leaves. With a
number, keywords nobody holds stay known ("dormant": a word that comes back is a plain
lookup, and keeps its frequency) until there are more of them than ``slack`` plus the held
ones; then they are all forgotten at once. Memory stays bounded (at most ``slack`` + twice
the held keywords) and a stream that keeps meeting the same unheld words (no window, or a
short one) does not forget and relearn them on every run of objects.
"""

from __future__ import annotations

from itertools import chain, repeat

import numpy as np
from numba import njit

from .columns import grown


class _Known(dict):
    """word -> id, a word it does not know learnt on lookup (``[]``; ``get`` does not):
    ``ids`` reads a run's words in one C pass, stepping into Python only at a new word."""

    __slots__ = ("learn",)

    def __init__(self, known: dict, learn) -> None:
        super().__init__(known)
        self.learn = learn  # Vocabulary._new

    def __missing__(self, word: str) -> int:
        return self.learn(word)

    def __reduce__(self):  # pickled as the plain dict it was (snapshots): ``ids`` makes it again
        return dict, (dict(self),)


class Vocabulary:
    """Maps normalised keywords to dense integer ids; counts objects per keyword."""

    def __init__(self, slack: int | None = None) -> None:
        self.slack = slack
        self._dormant = 0  # known words nobody holds (only counted with a slack)
        self._ids: dict[str, int] = _Known({}, self._new)
        self.words: list[str | None] = []
        self.freq = np.zeros(1024, dtype=np.int64)
        self.refs = np.zeros(1024, dtype=np.int64)  # holders per id (acquire/release)
        self._free: list[int] = []  # ids that may be reused
        self._freed: list[int] = []  # released, not yet handed to ``released``
        self._quarantine: list[int] = []  # handed out, waiting for ``recycle``
        self._placeholders = np.zeros(0, dtype=np.int32)
        self.gen = np.zeros(1024, dtype=np.int64)  # per id: bumped when it is forgotten (``ids_of``)
        self._lex = None  # the lexicon ``ids_of`` last read, its codes' ids and their ids' gen then
        self._c_id = self._c_gen = np.zeros(0, dtype=np.int64)

    def id(self, word: str) -> int:
        """O(1) amortised."""
        i = self._ids.get(word)
        return self._new(word) if i is None else i

    def _new(self, word: str) -> int:
        """The id of a word not known (``id``; ``ids`` through ``_Known``)."""
        if self._free:
            i = self._free.pop()
            self.words[i] = word
        else:
            i = len(self.words)
            self.words.append(word)
            if i == len(self.freq):
                self.freq = np.concatenate([self.freq, np.zeros_like(self.freq)])
                self.refs = np.concatenate([self.refs, np.zeros_like(self.refs)])
                self.gen = np.concatenate([self.gen, np.zeros_like(self.gen)])
        self._ids[word] = i
        self._dormant += 1  # known, not held yet
        return i

    def ids(self, words: tuple[str, ...]) -> list[int]:
        """The ids of ``words``, new ones learnt in order of first use (``id``). One C pass
        (``map`` of the dict's lookup) that calls ``id`` only at a word it does not know:
        on range_1m's 2.57M subscription keywords (70k distinct) 0.37-0.52 s where the old
        two passes (a lookup pass, the distinct new words learnt at once, the pass
        again) took 0.78-0.96 and refilling only the new places 0.58-0.73 (interleaved)."""
        known = self._ids
        if type(known) is not _Known:  # a snapshot's plain dict
            known = self._ids = _Known(known, self._new)
        return list(map(known.__getitem__, words))

    def ids_of(self, words) -> np.ndarray:
        """``ids`` of a coded keyword column (``io.lexicon.Words``), every record's one after
        another, as int64. Each code's id is kept from its first lookup while the id still
        names its word (its ``gen`` unchanged: ``_forget`` bumps it), so a run of known words
        costs one compiled pass (``_kept_ids``) and no hashing; the others are looked up by word, new ones
        learnt in order of first use, as ``ids`` learns them."""
        codes, lex = words.flat(), words.lex
        if lex is not self._lex:  # another lexicon: nothing known of its codes
            self._lex, self._c_id, self._c_gen = lex, np.full(0, -1, np.int64), np.zeros(0, np.int64)
        if len(self._c_id) < len(lex):
            cap = max(len(lex), 2 * len(self._c_id))
            self._c_id, self._c_gen = grown(self._c_id, cap, -1), grown(self._c_gen, cap, 0)
        ids = np.empty(len(codes), np.int64)
        n_stale = _kept_ids(codes, (self._c_id, self._c_gen, self.gen), ids)
        if n_stale:
            miss = codes[ids < 0]
            u, first = np.unique(miss, return_index=True)
            u = u[np.argsort(first)]  # in order of first use
            got = np.asarray(self.ids([lex.words[c] for c in u.tolist()]), dtype=np.int64)
            self._c_id[u], self._c_gen[u] = got, self.gen[got]
            ids = self._c_id[codes]
        return ids

    def known(self, words: list[str]) -> np.ndarray:
        """The int32 ids of ``words``, ``-1`` for a word not known; nothing is learnt. One C
        pass (``map`` of the dict's ``get`` read straight into the array, no list between:
        ~15% of it): what an object's words cost when nobody needs the ones not known
        (``Engine.add_run`` under a window that retains no object)."""
        return np.fromiter(map(self._ids.get, words, repeat(-1)), np.int32, len(words))

    def known_runs(self, words: list[str], off: np.ndarray) -> np.ndarray:
        """The int32 ids of a run of objects' ``words`` (object i's are ``off[i]:off[i+1]``),
        nothing learnt: object i's j-th word that is not known (j counted from 0) takes
        ``placeholders``' j-th id, so each object keeps one distinct id per word.
        O(len(words)): one C pass, then two compiled ones (the ranks by array passes were
        ~20% of the call)."""
        kw = self.known(words)
        most = _unknown_most(kw, off)
        if most:
            _place(kw, off, self.placeholders(most))
        return kw

    def of_run(self, keywords, learn: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A run of objects' keyword tuples as (int32 ids, int64 CSR offsets, lengths), each
        id counted (``count_many``); ``learn``: new words learnt (``ids``), else not
        (``known_runs``: under a window that retains no object nobody holds them)."""
        n = len(keywords)
        words = list(chain.from_iterable(keywords))
        lens = np.fromiter(map(len, keywords), np.int64, n)
        off = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=off[1:])
        if learn:  # one lookup pass for the run, converted once: counted, held, stored
            kw = np.fromiter(self.ids(words), np.int32, len(words))
        else:  # words nobody holds are not learnt (learning was ~20% of a run)
            kw = self.known_runs(words, off)
        self.count_many(kw)  # one array call: a ``count`` per object cost more than its kernel
        return kw, off, lens

    def placeholders(self, n: int) -> np.ndarray:
        """Ids that stand for words not learnt (``known`` gave -1): an object's j-th such word
        takes the j-th, so it keeps an id per word, all distinct (its weight and the indexes
        count them). At least ``n`` (all there are), learnt on demand, each for a reserved
        word no keyword can be (keywords are stripped: none starts with a space), held for
        good; no subscription ever holds one, so nothing is posted under it."""
        ph = self._placeholders
        if len(ph) < n:
            more = [self.acquire((f" {j}",))[0] for j in range(len(ph), n)]
            ph = self._placeholders = np.concatenate([ph, np.asarray(more, dtype=np.int32)])
        return ph

    def count(self, ids: list[int]) -> None:
        """One more object carries each of ``ids``."""
        self.freq[ids] += 1

    def count_many(self, ids: list[int]) -> None:
        """``count`` for a run of objects, their ids one after another (repeats add up)."""
        np.add.at(self.freq, np.asarray(ids, dtype=np.int64), 1)

    # -- forgetting -------------------------------------------------------------------
    def acquire(self, words: tuple[str, ...]) -> list[int]:
        """Ids of ``words`` for a new holder (an object or a subscription): O(len(words))."""
        if len(words) <= 8 and len(set(words)) == len(words):  # a few: plain Python beats array calls
            get, refs, out, woke = self._ids.get, self.refs, [], 0
            for w in words:  # ids in order of first use, as ``ids``
                i = get(w)
                if i is None:
                    i = self.id(w)
                    refs = self.refs  # may have grown
                r = refs[i]
                if not r:
                    woke += 1
                refs[i] = r + 1
                out.append(i)
            self._dormant -= woke
            return out
        out = self.ids(words)
        refs = self.refs
        self._dormant -= int((refs[out] == 0).sum())  # words are distinct (normalisation)
        refs[out] += 1
        return out

    def few_ids(self, words: tuple[str, ...]) -> tuple[int, ...]:
        """``ids`` of a few distinct words as a tuple, new ones learnt one by one as
        ``acquire`` learns them: the ids a compiled
        caller then counts as held (``woke``)."""
        get = self._ids.get
        out = tuple(map(get, words))
        if None in out:
            out = tuple([self.id(w) if i is None else i for w, i in zip(words, out)])
        return out

    def woke(self, n: int) -> None:
        """``n`` known words nobody held were just taken (their holder counts raised by a
        compiled caller, ``placing.register_slot``: ``acquire``'s counting)."""
        self._dormant -= n

    def hold(self, ids) -> None:
        """Several holders took ``ids`` (one after another, repeats counted): O(len(ids))."""
        refs = self.refs
        if len(ids) <= 64:  # a short run: plain Python beats array calls
            woke = 0
            for i in ids:
                r = refs[i]
                woke += r == 0
                refs[i] = r + 1
            self._dormant -= int(woke)
        elif len(ids):
            u, c = np.unique(np.asarray(ids, dtype=np.int64), return_counts=True)  # (ufunc.at is slow)
            self._dormant -= int(np.count_nonzero(refs[u] == 0))
            refs[u] += c

    def release(self, ids) -> None:
        """Holders of ``ids`` left (repeats counted); ids nobody holds are forgotten:
        O(len(ids)), vectorised (a freed run of objects releases at once)."""
        refs = self.refs
        if len(ids) <= 8:  # one subscription or object: plain Python beats array calls
            small = ids.tolist() if type(ids) is np.ndarray else [int(i) for i in ids]
            held = [refs[i] for i in small]
            if len(set(small)) == len(small) and (not held or min(held) > 0):
                gone_l = []
                for i, r in zip(small, held):
                    refs[i] = r - 1
                    if r == 1:
                        gone_l.append(i)
                gone = np.asarray(gone_l, dtype=np.int64) if gone_l else None
            else:  # repeats, or an error to report
                gone = self._release_array(np.asarray(small, dtype=np.int64))
        else:
            gone = self._release_array(np.asarray(ids, dtype=np.int64))
        if gone is None:
            return
        self._dormant += len(gone)
        if self.slack is not None:
            if self._dormant <= self.slack + len(self._ids) - self._dormant:
                return
            n = len(self.words)
            gone = np.flatnonzero(self.refs[:n] == 0)  # every dormant word, at once
            gone = gone[[self.words[i] is not None for i in gone.tolist()]]
        self._forget(gone)

    def _release_array(self, ids: np.ndarray) -> np.ndarray | None:
        """The counting part of ``release``: the ids left unheld (sorted), or None."""
        if not len(ids):
            return None
        u, c = np.unique(ids, return_counts=True)
        refs = self.refs
        left = refs[u] - c
        if (left < 0).any():  # nothing changed
            raise ValueError(f"keyword id {int(u[np.argmax(left < 0)])} released more often than acquired")
        refs[u] = left
        gone = u[left == 0]
        return gone if len(gone) else None

    def _forget(self, gone: np.ndarray) -> None:
        words, known = self.words, self._ids
        for i in gone.tolist():
            del known[words[i]]  # type: ignore[arg-type]
            words[i] = None
            self._freed.append(i)
        self.freq[gone] = 0
        self.gen[gone] += 1  # a code's id kept by ``ids_of`` is stale from now
        self._dormant -= len(gone)

    def released(self) -> list[int]:
        """Ids forgotten since the last call (drop their postings, then ``recycle``)."""
        out, self._freed = self._freed, []
        self._quarantine.extend(out)
        return out

    @property
    def busy(self) -> bool:
        """Are ids waiting for ``released`` or ``recycle`` (else both would do nothing)?"""
        return bool(self._freed or self._quarantine)

    def recycle(self) -> None:
        """Every id handed out by ``released`` may now be given to a new keyword."""
        self._free.extend(self._quarantine)
        self._quarantine = []

    def __len__(self) -> int:
        """One past the largest id ever given (arrays indexed by id need this many rows)."""
        return len(self.words)

    @property
    def live(self) -> int:
        """Keywords known now (forgotten ones excluded)."""
        return len(self._ids)

    def _check(self) -> None:
        assert all(self.words[i] == w for w, i in self._ids.items()), "ids and words disagree"
        held = {i for i in range(len(self.words)) if self.refs[i] > 0}
        assert held <= set(self._ids.values()), "a held id without a word"
        gone = set(self._free) | set(self._freed) | set(self._quarantine)
        assert not gone & set(self._ids.values()), "a live id on a free list"
        assert all(self.words[i] is None and self.freq[i] == 0 for i in gone), "a forgotten id kept data"
        dormant = sum(1 for i in self._ids.values() if self.refs[i] == 0)
        assert dormant == self._dormant, ("dormant words miscounted", dormant, self._dormant)


@njit(cache=True)
def _kept_ids(codes, kept, ids):
    """``ids_of``'s first pass, one loop for its four array passes: each code's kept id where
    it still names its word (``kept``: ``(c_id, c_gen, gen)``), else -1; how many are -1."""
    c_id, c_gen, gen = kept
    stale = 0
    for j in range(len(codes)):
        c = codes[j]
        i = c_id[c]
        if i < 0 or gen[i] != c_gen[c]:
            i = -1
            stale += 1
        ids[j] = i
    return stale


@njit(cache=True)
def _unknown_most(kw, off):
    """The most words not known (``-1``) in one object of ``kw`` (object i's: ``off[i]:off[i + 1]``)."""
    most = 0
    for i in range(len(off) - 1):
        n = 0
        for p in range(off[i], off[i + 1]):
            n += kw[p] < 0
        most = max(most, n)
    return most


@njit(cache=True)
def _place(kw, off, ph):
    """Each object's j-th word not known takes ``ph[j]`` (``known_runs``)."""
    for i in range(len(off) - 1):
        j = 0
        for p in range(off[i], off[i + 1]):
            if kw[p] < 0:
                kw[p] = ph[j]
                j += 1
