"""Output notifications (SPEC section 4): their types, their one JSON line, their columns.

:class:`Match` (a range subscription receives an object) and :class:`Change` (a
kNN/top-k result set changed) are what subscribers receive. :func:`note_line` is
the one definition of a notification's line in ``notifications.jsonl``: the
record's keys in the order of ``MATCH_KEYS`` / ``CHANGE_KEYS``, encoded by
:func:`~skpubsub.io.encode.json_text`. Every writer goes through it (or
:func:`note_lines`, which also takes columns).

The compiled publish path writes one row per result change; a pub's rows for one
subscription net out to one notification (SPEC section 6). ``net_changes`` does
that merge compiled, and :class:`Notes` keeps the outcome as columns of ids: the
engine's work ends there. Making one ``Match``/``Change`` object per notification
costs more than finding it when results change often (about 1.5 µs each), so
``Engine.apply_columnar`` hands the columns on and ``to_list`` builds the objects
for whoever wants them. ``Notes.json_lines`` writes the columns straight to text,
each distinct id encoded once, through templates made from ``note_line``'s own
pieces (the keys and the encoder), so the bytes are the same.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np
from numba import njit

from .encode import json_line, json_text, json_value
from .events import Id, Time

MATCH_KEYS = ("sub", "t", "object")
CHANGE_KEYS = ("sub", "t", "added", "removed")


@dataclass(frozen=True, slots=True)
class Match:
    """A range subscription receives a published object."""

    sub: Id
    t: Time
    object: Id

    def to_json(self) -> dict:
        return dict(zip(MATCH_KEYS, (self.sub, self.t, self.object)))


@dataclass(frozen=True, slots=True)
class Change:
    """A kNN/top-k result set changed: ``added`` in new rank order, ``removed`` in old."""

    sub: Id
    t: Time
    added: tuple[Id, ...]
    removed: tuple[Id, ...]

    def to_json(self) -> dict:
        return dict(zip(CHANGE_KEYS, (self.sub, self.t, list(self.added), list(self.removed))))


Notification = Union[Match, Change]


def note_line(n: Notification) -> str:
    """A notification's line in ``notifications.jsonl`` (with its newline)."""
    return json_line(n.to_json())


# The columnar path's pieces, made by the formatter from placeholders rather than
# written out: a record's line with a %s slot per value, and a list's brackets and
# separator. A placeholder encodes as "\u0000", which no key and no syntax contains.
_SLOT = "\x00"


def _slotted(value) -> str:
    """``json_line`` of ``value`` with each placeholder value a ``%s`` slot."""
    return json_line(value).replace("%", "%%").replace(json_text(_SLOT), "%s")


_MATCH_LINE = _slotted(dict.fromkeys(MATCH_KEYS, _SLOT))
_CHANGE_LINE = _slotted(dict.fromkeys(CHANGE_KEYS, _SLOT))
_LIST_OPEN, _LIST_SEP, _LIST_CLOSE = json_text([_SLOT, _SLOT]).split(json_text(_SLOT))


@njit(cache=True)
def _rank_sort(objs, keys, oseq, lo, hi):
    """Sort ``objs[lo:hi]`` (with ``keys``) in rank order: key, then newest first."""
    for a in range(lo + 1, hi):
        o, k = objs[a], keys[a]
        b = a - 1
        while b >= lo and (keys[b] > k or (keys[b] == k and oseq[objs[b]] < oseq[o])):
            objs[b + 1] = objs[b]
            keys[b + 1] = keys[b]
            b -= 1
        objs[b + 1] = o
        keys[b + 1] = k


@njit(inline="always", cache=True)
def _cancel(objs, keys, koff, lo, hi, o):
    """Drop ``o`` from ``objs[lo:hi]`` (keys at ``keys[koff + i]``) if there; did it?"""
    for q in range(lo, hi):
        if objs[q] == o:
            for r in range(q, hi - 1):
                objs[r] = objs[r + 1]
                keys[koff + r] = keys[koff + r + 1]
            return True
    return False


SMALL = 32  # a pub's rows up to this many are sorted in place (insertion), more by merging runs (``_merge_runs``)
RUNS = 16  # more ascending runs than this in a pub's rows: a plain sort
_TABLE_READ = threading.Lock()  # a subscription table read by slot, or a Notes resolved (``Notes.resolve``)
_LOW = 24  # packed keys: seq << _LOW | the row's place among its pub's rows (unique: stable)


@njit(inline="always", cache=True)
def _merge_runs(a, lo, hi, tmp, starts):
    """Sort ``a[lo:hi]`` by merging its ascending runs pairwise (``tmp``, ``starts``: scratch
    over the same range). A pub's rows come from a few posting lists, each read in slot
    order, so they are a few sorted runs (range_1m: 133 rows in ~5 runs a pub): 2-3 merge
    passes, against a quicksort's ~7 (``group_rows`` 81 -> 48 ms on range_1m's 2.4M rows).
    More than ``RUNS`` runs: a plain sort."""
    m = 1
    starts[0] = lo
    for i in range(lo + 1, hi):
        if a[i] < a[i - 1]:
            starts[m] = i
            m += 1
    if m == 1:
        return
    if m > RUNS:
        a[lo:hi].sort()  # in place
        return
    starts[m] = hi
    src, dst = a, tmp
    in_tmp = False
    while m > 1:
        k = 0
        for r in range(0, m, 2):
            s0, s1 = starts[r], starts[r + 1]
            s2 = starts[r + 2] if r + 1 < m else s1
            p, q = s0, s1
            for o in range(s0, s2):  # (a lone last run is copied: q == s2)
                if q >= s2 or (p < s1 and src[p] <= src[q]):
                    dst[o] = src[p]
                    p += 1
                else:
                    dst[o] = src[q]
                    q += 1
            starts[k] = s0
            k += 1
        starts[k] = hi
        m = k
        src, dst = dst, src
        in_tmp = not in_tmp
    if in_tmp:
        for o in range(lo, hi):
            a[o] = tmp[o]


@njit(cache=True, nogil=True)  # (the GIL is free for ``run``'s writer thread)
def group_rows(rows, n, sseq, by_slot, perm):
    """The order of ``rows[:n]`` (the publish kernel's, pubs in order) by (pub, subscription
    seq ``sseq[slot]``), stable (each pair's rows stay in the order they happened), into
    ``perm[:n]``: what ``net_changes`` reads them by (the rows are not moved: the gather of
    their seven columns was ~3% of range_1m's object phase). The kernel emits a pub's rows
    together and the pubs in order, so only each pub's rows are sorted, by one int64 key
    each: the seq and the row's place packed (distinct keys, so any sort is stable), sorted
    in ``perm`` without reading ``sseq`` again. Returns False if the pubs are out of order.
    ``by_slot``: the live slots ascend with their seqs (``SubTable.in_order``), so the slot
    is the key, and ``sseq``, a random read a row, is not read."""
    I, S = rows.i, rows.s
    for j in range(1, n):
        if I[j] < I[j - 1]:
            return False
    tmp, starts = np.empty(n, dtype=np.int64), np.empty(n + 1, dtype=np.int64)  # (``_merge_runs``' scratch)
    j = 0
    while j < n:
        e = j + 1
        while e < n and I[e] == I[j]:
            e += 1
        packed = e - j < (1 << _LOW)
        for a in range(j, e):
            q = S[a] if by_slot else sseq[S[a]]
            packed = packed and 0 <= q < (1 << (62 - _LOW))
            perm[a] = (q << _LOW) | (a - j)
        if not packed:  # seqs too large to pack (never in practice): a stable sort of the seqs
            keys = np.empty(e - j, dtype=np.int64)
            for a in range(j, e):
                keys[a - j] = S[a] if by_slot else sseq[S[a]]
            order = np.argsort(keys, kind="mergesort")
            for a in range(j, e):
                perm[a] = order[a - j] + j
        else:
            if e - j <= SMALL:
                for a in range(j + 1, e):
                    k = perm[a]
                    b = a - 1
                    while b >= j and perm[b] > k:
                        perm[b + 1] = perm[b]
                        b -= 1
                    perm[b + 1] = k
            else:
                _merge_runs(perm, j, e, tmp, starts)
            for a in range(j, e):
                perm[a] = j + (perm[a] & ((1 << _LOW) - 1))
        j = e
    return True


@njit(cache=True, nogil=True)
def net_changes(rows, order, oseq, out, tmp_key):
    """``rows`` (the publish kernel's, :class:`skpubsub.core.layouts.Rows`) read in ``order``
    (``group_rows``': by pub and subscription, each pair's rows in the order they happened)
    into ``out`` (``NoteCols``): one notification per pair with a net change; returns how
    many. A leaving object ``d`` of -2 marks a range match of ``a``. Added objects come in
    new rank order (``oseq``: object seqs, the newest first on ties), removed in old;
    ``tmp_key``: scratch of twice the rows."""
    I, S, A, D, KA, KD = rows.i, rows.s, rows.a, rows.d, rows.ka, rows.kd
    n_i, n_s, n_match, add_off, add_obj, rem_off, rem_obj = out
    m = len(order)
    n = 0
    na = 0
    nr = 0
    add_off[0] = 0
    rem_off[0] = 0
    j = 0
    while j < m:
        pj = order[j]
        e = j + 1
        while e < m and I[order[e]] == I[pj] and S[order[e]] == S[pj]:
            e += 1
        a0, r0 = na, nr
        match = False
        if e == j + 1:
            if D[pj] == -2:
                match = True
                add_obj[na] = A[pj]
                na += 1
            else:
                if A[pj] >= 0:
                    add_obj[na] = A[pj]
                    na += 1
                if D[pj] >= 0:
                    rem_obj[nr] = D[pj]
                    nr += 1
        else:  # several changes of one pub to one result: their net (an object in and out cancels)
            for x in range(j, e):
                h = order[x]
                if D[h] >= 0:
                    if _cancel(add_obj, tmp_key, 0, a0, na, D[h]):
                        na -= 1
                    else:
                        rem_obj[nr] = D[h]
                        tmp_key[m + nr] = KD[h]
                        nr += 1
                if A[h] >= 0:
                    if _cancel(rem_obj, tmp_key, m, r0, nr, A[h]):
                        nr -= 1
                    else:
                        add_obj[na] = A[h]
                        tmp_key[na] = KA[h]
                        na += 1
            _rank_sort(add_obj, tmp_key, oseq, a0, na)
            _rank_sort(rem_obj[:m], tmp_key[m:], oseq, r0, nr)
        if na > a0 or nr > r0:
            n_i[n] = I[pj]
            n_s[n] = S[pj]
            n_match[n] = match
            n += 1
            add_off[n] = na
            rem_off[n] = nr
        j = e
    return n


class Notes:
    """Notifications as columns: ``pub`` (index of the pub in its run, for tags), ``sub``
    and ``t`` per notification, ``match`` (a range match, ``added`` its one object), and
    the added / removed object ids as CSR lists (``add_off``/``added``, ``rem_off``/``removed``)."""

    __slots__ = ("pub", "_sub", "_t", "times", "match", "add_off", "added", "rem_off", "removed", "codes",
                 "table", "__weakref__")

    def __init__(self, pub, sub, t, match, add_off, added, rem_off, removed, codes=None, times=None,
                 table=None) -> None:
        self.pub, self._sub, self._t, self.match = pub, sub, t, match
        self.add_off, self.added, self.rem_off, self.removed = add_off, added, rem_off, removed
        self.codes = codes  # (sub slots, added object slots, removed object slots): json_block's keys
        # ``t`` None: the times are the run's, ``times[pub]``, boxed only when asked for (the
        # compiled writer encodes each pub's time once, never per notification).
        self.times = times
        # ``sub`` None: the ids are ``table[codes[0]]``, gathered only when asked for (one
        # random read of an id object a notification, a sixth of range_1m's object phase);
        # the table's owner resolves them before it changes a slot they name (``resolve``).
        self.table = table

    @property
    def sub(self):
        if self._sub is None:
            self.resolve()
        return self._sub

    def resolve(self) -> None:
        """Gather the subscription ids from the table now (its slots are about to change)."""
        with _TABLE_READ:
            if self._sub is None:
                self._sub = self.table[self.codes[0]]
            self.table = None

    def ids_at(self, slots: np.ndarray) -> list | None:
        """While unresolved: the subscription ids in ``slots`` of the table, read under the
        lock ``resolve`` takes (``run``'s writer thread asks while the engine, the table's
        owner, may resolve); else None."""
        if self.table is None:
            return None
        with _TABLE_READ:
            table = self.table
            return None if table is None else table[slots].tolist()

    @property
    def t(self):
        if self._t is None:
            boxed = np.empty(len(self.times), dtype=object)
            boxed[:] = self.times  # as given: an int stays an int (SPEC 6 "Times")
            self._t = boxed[self.pub]
        return self._t

    def __len__(self) -> int:
        return len(self.match)

    def to_list(self) -> list[Notification]:
        out: list[Notification] = []
        append = out.append
        ao, ro = self.add_off.tolist(), self.rem_off.tolist()
        added, removed = self.added.tolist(), self.removed.tolist()
        for j, (s, t, m) in enumerate(zip(self.sub.tolist(), self.t.tolist(), self.match.tolist())):
            a0, a1, r0, r1 = ao[j], ao[j + 1], ro[j], ro[j + 1]
            if m:
                append(Match(s, t, added[a0]))
            else:
                append(Change(s, t, tuple(added[a0:a1]), tuple(removed[r0:r1])))
        return out

    def json_block(self) -> str:
        """``"".join(json_lines())``."""
        return self.json_bytes().decode("utf-8")

    def json_bytes(self) -> bytes:
        """``json_block``'s UTF-8, by the compiled writer when the slots are known."""
        if self.codes is not None and len(self):
            from .notewriter import block

            data = block(self)
            if data is not None:
                return data
        return "".join(self.json_lines()).encode("utf-8")

    def json_lines(self) -> list[str]:
        """The notifications as output lines, ``note_line`` of each byte for byte, without
        making their objects (ids and times through ``json_value``)."""
        subs, times, added, removed = ([json_value(v) for v in a.tolist()]
                                       for a in (self.sub, self.t, self.added, self.removed))
        ao, ro = self.add_off.tolist(), self.rem_off.tolist()
        join = _LIST_SEP.join
        lines = []
        append = lines.append
        for j, m in enumerate(self.match.tolist()):
            if m:
                append(_MATCH_LINE % (subs[j], times[j], added[ao[j]]))
            else:
                append(_CHANGE_LINE % (subs[j], times[j], _LIST_OPEN + join(added[ao[j]:ao[j + 1]]) + _LIST_CLOSE,
                                       _LIST_OPEN + join(removed[ro[j]:ro[j + 1]]) + _LIST_CLOSE))
        return lines


class NoteBatch:
    """The notifications of one ``apply``, in stream order: columnar runs from the
    compiled path between lists from the plain one."""

    def __init__(self) -> None:
        self.parts: list[Notes | list[Notification]] = []
        self.count = 0

    def extend(self, notes: list[Notification]) -> None:
        if not notes:
            return
        if self.parts and isinstance(self.parts[-1], list):
            self.parts[-1].extend(notes)
        else:
            self.parts.append(list(notes))
        self.count += len(notes)

    def add(self, notes: Notes) -> None:
        if len(notes):
            self.parts.append(notes)
            self.count += len(notes)

    def __len__(self) -> int:
        return self.count

    def to_list(self) -> list[Notification]:
        out: list[Notification] = []
        for p in self.parts:
            out.extend(p if isinstance(p, list) else p.to_list())
        return out

    def matches(self) -> np.ndarray:
        """Which notifications are range matches, in order (bool)."""
        return np.concatenate([np.zeros(0, dtype=np.bool_)] + [
            p.match.astype(np.bool_) if isinstance(p, Notes) else np.array([type(n) is Match for n in p], np.bool_)
            for p in self.parts])

    def json_block(self) -> str:
        """All the notifications' lines as one string, in order."""
        return self.json_bytes().decode("utf-8")

    def json_bytes(self) -> bytes:
        """``json_block``'s UTF-8 (what ``run`` writes: the compiled writer's bytes as they are)."""
        return b"".join(p.json_bytes() if isinstance(p, Notes) else "".join(map(note_line, p)).encode("utf-8")
                        for p in self.parts)

    def json_lines(self) -> list[str]:
        """The output lines of all the notifications, in order."""
        out: list[str] = []
        for p in self.parts:
            out.extend(note_lines(p))
        return out


class NoteLines:
    """Notifications as their finished lines (``data``: UTF-8, each line ending in a
    newline): what the multi-worker runtime's merge gives (``LocalCluster.apply_columnar``)."""

    def __init__(self, data: bytes, count: int) -> None:
        self.data, self.count = data, count

    def __len__(self) -> int:
        return self.count

    def json_bytes(self) -> bytes:
        return self.data

    def json_block(self) -> str:
        return self.data.decode("utf-8")

    def json_lines(self) -> list[str]:
        return self.json_block().splitlines(True)

    def to_list(self) -> list[Notification]:
        """The objects again, read from the lines (they hold every field, SPEC 4)."""
        out: list[Notification] = []
        for line in self.json_lines():
            r = json.loads(line)
            out.append(Match(r["sub"], r["t"], r["object"]) if "object" in r else
                       Change(r["sub"], r["t"], tuple(r["added"]), tuple(r["removed"])))
        return out


AnyNotes = Union[NoteBatch, Notes, NoteLines, Sequence[Notification]]


def note_lines(notes: AnyNotes) -> list[str]:
    """The output lines of what an engine returns: columns (``Notes``, ``NoteBatch``)
    format themselves, a list of notifications goes through ``note_line``."""
    if isinstance(notes, (Notes, NoteBatch, NoteLines)):
        return notes.json_lines()
    return [note_line(n) for n in notes]
