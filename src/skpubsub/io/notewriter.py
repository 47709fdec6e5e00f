"""The compiled notification writer: a run's notifications from columns to the bytes of
``notifications.jsonl`` in one kernel pass, each distinct id and time encoded once (and
a run's ``results.jsonl`` likewise: ``results_block``).

Per notification Python does nothing: the columns carry small integer codes (the
subscription's and the objects' table slots, the pub's index in its run), NumPy finds
the distinct ones of the run, Python encodes only those (``encode.json_value``, so the
bytes are ``note_line``'s), and the kernel copies template pieces
and encoded values into one buffer. The pieces are cut from ``note_line``'s own
templates (:mod:`.templates`), never written out here.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ..core.bytecopy import copy16
from .encode import json_value
from .templates import CHANGE_LINE, LIST_CLOSE, LIST_OPEN, LIST_SEP, MATCH_LINE, RESULT_LINE, RESULT_SEP

PAD = 16  # bytes past the end of every pool, piece table and output buffer: ``copy16``'s reach


class Texts(NamedTuple):
    """Encoded values (``pool[off[c]:off[c + 1]]`` is value ``c``'s UTF-8) and the template
    pieces (``pieces[p_off[i]:p_off[i + 1]]``): match line 0-3, change line 4-8, list 9-11,
    result line 12-14 and its separator 15."""

    pool: np.ndarray
    off: np.ndarray
    pieces: np.ndarray
    p_off: np.ndarray


class Results(NamedTuple):
    """Every result of a run's end as columns (``Engine.result_columns``): subscription
    ``sids[i]`` has the ``lens[i]`` objects ``objects[c]`` for the next ``c`` of ``codes``,
    in rank order; the subscriptions in registration order, each object id once."""

    sids: list
    lens: np.ndarray
    codes: np.ndarray
    objects: list

    def pairs(self) -> list[tuple]:
        """(id, result ids) of each subscription, as ``all_results`` gives them."""
        ids = [self.objects[c] for c in self.codes.tolist()]
        ends = np.cumsum(self.lens).tolist()
        return [(sid, ids[e - m:e]) for sid, e, m in zip(self.sids, ends, self.lens.tolist())]


class Coded(NamedTuple):
    """Notifications by codes into ``Texts``: ``sub``, ``t`` and, per ``match``, one object
    (``add[add_off[j]]``) or the added and removed lists (CSR)."""

    sub: np.ndarray
    t: np.ndarray
    match: np.ndarray
    add_off: np.ndarray
    add: np.ndarray
    rem_off: np.ndarray
    rem: np.ndarray


def _pieces() -> tuple[np.ndarray, np.ndarray]:
    parts = [p.replace("%%", "%") for p in MATCH_LINE.split("%s")]
    parts += [p.replace("%%", "%") for p in CHANGE_LINE.split("%s")]
    parts += [LIST_OPEN, LIST_SEP, LIST_CLOSE]
    parts += [p.replace("%%", "%") for p in RESULT_LINE.split("%s")] + [RESULT_SEP]  # 12-14, 15
    assert len(parts) == 16, parts
    data = [p.encode("utf-8") for p in parts]
    off = np.zeros(len(data) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(d) for d in data])
    return np.frombuffer(b"".join(data) + bytes(PAD), dtype=np.uint8).copy(), off


_PIECES: tuple[np.ndarray, np.ndarray] | None = None


def encoded(values: list) -> tuple[bytes, np.ndarray]:
    """The values' ``json_value`` bytes, concatenated, and each one's length.

    A group of plain ASCII strings or of ints (the common ids and times) is encoded in a
    few whole-group calls: such a string's JSON is itself in quotes (``encode_basestring``
    escapes only quotes, backslashes and control characters), an int's is its repr.
    Anything else goes value by value."""
    try:  # all strings, else a TypeError
        pool = '"' + '""'.join(values) + '"'
    except TypeError:
        pool = None
    if pool is not None:
        if pool.isascii() and pool.isprintable() and "\\" not in pool:
            data = pool.encode("ascii")
            quotes = np.flatnonzero(np.frombuffer(data, np.uint8) == 34)  # each value's two, if none holds one
            if len(quotes) == 2 * len(values):
                return data, quotes[1::2] - quotes[::2] + 1
    elif set(map(type, values)) == {int}:
        text = list(map(int.__repr__, values))
        return "".join(text).encode("ascii"), np.fromiter(map(len, text), np.int64, len(text))
    data = [json_value(v).encode("utf-8") for v in values]
    return b"".join(data), np.fromiter(map(len, data), np.int64, len(data))


def texts_of(groups: list[list]) -> tuple[Texts, list[int]]:
    """One pool of the encoded values of each group (subscription ids, times, object ids),
    and each group's first code."""
    global _PIECES
    if _PIECES is None:
        _PIECES = _pieces()
    pools, lens, bases = [], [], []
    n = 0
    for g in groups:
        bases.append(n)
        pool, ln = encoded(g)
        pools.append(pool)
        lens.append(ln)
        n += len(g)
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.concatenate(lens), out=off[1:])
    pools.append(bytes(PAD))
    pool = np.frombuffer(b"".join(pools), dtype=np.uint8)
    return Texts(pool, off, *_PIECES), bases


# The helpers are inlined: a compiled call that passes arrays pays Numba's reference counts
# (an atomic NRT_incref/decref per array and call); called per piece, they made ``write``
# 0.9 us a line on kNN notifications, 0.15 inlined.
@njit(inline="always", cache=True)
def _put(out, n, src, lo, hi):
    """``src[lo:hi]`` to ``out[n:]`` by 16-byte moves (both padded by ``PAD``); the new end."""
    for i in range(lo, hi, PAD):
        copy16(out, n + i - lo, src, i)
    return n + hi - lo


@njit(inline="always", cache=True)
def _value(out, n, tx, c):
    return _put(out, n, tx.pool, tx.off[c], tx.off[c + 1])


@njit(inline="always", cache=True)
def _piece(out, n, tx, i):
    return _put(out, n, tx.pieces, tx.p_off[i], tx.p_off[i + 1])


@njit(inline="always", cache=True)
def _list(out, n, tx, codes, lo, hi):
    n = _piece(out, n, tx, 9)
    for j in range(lo, hi):
        if j > lo:
            n = _piece(out, n, tx, 10)
        n = _value(out, n, tx, codes[j])
    return _piece(out, n, tx, 11)


@njit(cache=True, nogil=True)
def _diff(a):
    """``np.diff(a)`` of a 1-d array: Numba's own assigns a slice an array, which compiles its
    shape-mismatch error (engine/NOTES.md, "A cold run's compile")."""
    out = np.empty(max(len(a) - 1, 0), dtype=a.dtype)
    for i in range(len(out)):
        out[i] = a[i + 1] - a[i]
    return out


@njit(cache=True, nogil=True)
def size(cd, tx):
    """The bytes ``write`` will write."""
    vl, pl = _diff(tx.off), _diff(tx.p_off)
    n = 0
    for j in range(len(cd.sub)):
        n += vl[cd.sub[j]] + vl[cd.t[j]]
        if cd.match[j]:
            n += pl[0] + pl[1] + pl[2] + pl[3] + vl[cd.add[cd.add_off[j]]]
            continue
        n += pl[4] + pl[5] + pl[6] + pl[7] + pl[8] + 2 * (pl[9] + pl[11])
        for lo, hi, codes in ((cd.add_off[j], cd.add_off[j + 1], cd.add), (cd.rem_off[j], cd.rem_off[j + 1], cd.rem)):
            if hi > lo:
                n += (hi - lo - 1) * pl[10]
            for i in range(lo, hi):
                n += vl[codes[i]]
    return n


@njit(cache=True, nogil=True)
def numbered(slots):
    """Each of ``slots`` (integers) numbered by first appearance: (each one's number, where
    each number first appears). One pass and a stamp a value, where ``np.unique`` sorted
    (a tenth of range_1m's writer); the numbering differs, the lines do not."""
    n = len(slots)
    codes, firsts = np.empty(n, np.int64), np.empty(n, np.int64)
    if n == 0:
        return codes, firsts
    lo = slots.min()
    stamp = np.full(slots.max() - lo + 1, -1, np.int64)
    k = 0
    for i in range(n):
        v = slots[i] - lo
        c = stamp[v]
        if c < 0:
            c = stamp[v] = k
            firsts[k] = i
            k += 1
        codes[i] = c
    return codes, firsts[:k]


def _distinct(values: np.ndarray, codes: np.ndarray, firsts: np.ndarray) -> tuple[list, np.ndarray] | None:
    """The distinct values by their slots' numbering (``numbered``: each slot's first value)
    and each one's number; None when a slot names two values (cheap insurance: a slot
    reused within the run)."""
    distinct = values[firsts]
    if not (distinct[codes] == values).all():
        return None
    return distinct.tolist(), codes


def block(notes) -> bytes | None:
    """All lines of ``notes`` (``notifications.Notes`` with slot codes) as their UTF-8, or
    None when a slot named two ids in the run (then the caller formats line by line)."""
    s_slot, a_slot, r_slot = notes.codes
    na = len(a_slot)
    codes, firsts = numbered(s_slot)
    got = notes.ids_at(s_slot[firsts])  # the ids by slot while unresolved (``Notes.sub``): right by construction
    subs = (got, codes) if got is not None else _distinct(notes._sub, codes, firsts)  # resolved: checked
    codes, firsts = numbered(notes.pub)
    if notes.times is not None:  # the run's times by pub index: no check needed
        pubs = ([notes.times[p] for p in notes.pub[firsts].tolist()], codes)
    else:  # times given per notification
        pubs = _distinct(notes.t, codes, firsts)
    objs = _distinct(np.concatenate([notes.added, notes.removed]), *numbered(np.concatenate([a_slot, r_slot])))
    if subs is None or pubs is None or objs is None:
        return None
    groups, codes = zip(subs, pubs, objs)
    tx, bases = texts_of(groups)
    o = codes[2] + bases[2]
    cd = Coded(codes[0] + bases[0], codes[1] + bases[1], notes.match.astype(np.bool_), notes.add_off, o[:na],
               notes.rem_off, o[na:])
    n = size(cd, tx)
    out = np.empty(n + PAD, dtype=np.uint8)
    write(cd, tx, out)
    return out[:n].tobytes()


@njit(cache=True, nogil=True)  # (``run`` writes on a second thread while the engine goes on)
def write(cd, tx, out):
    """The lines of ``cd`` into ``out`` (``size`` bytes and ``PAD``); returns the bytes written."""
    n = 0
    for j in range(len(cd.sub)):
        p = 0 if cd.match[j] else 4  # the line's first template piece
        n = _piece(out, n, tx, p)
        n = _value(out, n, tx, cd.sub[j])
        n = _piece(out, n, tx, p + 1)
        n = _value(out, n, tx, cd.t[j])
        n = _piece(out, n, tx, p + 2)
        if cd.match[j]:
            n = _value(out, n, tx, cd.add[cd.add_off[j]])
            n = _piece(out, n, tx, 3)
        else:
            n = _list(out, n, tx, cd.add, cd.add_off[j], cd.add_off[j + 1])
            n = _piece(out, n, tx, 7)
            n = _list(out, n, tx, cd.rem, cd.rem_off[j], cd.rem_off[j + 1])
            n = _piece(out, n, tx, 8)
    return n


def results_block(res: Results) -> np.ndarray:
    """The bytes of ``results.jsonl`` (``sinks.result_line`` of each subscription), made by
    one compiled pass from the ids encoded once each (``encoded``)."""
    tx, (_, base) = texts_of([res.sids, res.objects])
    n = len(res.sids)
    vl, pl = np.diff(tx.off), np.diff(tx.p_off)
    size = (int(vl[:n].sum()) + n * int(pl[12] + pl[13] + pl[14]) + int(vl[base + res.codes].sum())
            + int(np.maximum(res.lens - 1, 0).sum()) * int(pl[15]))
    out = np.empty(size + PAD, dtype=np.uint8)
    _write_results(res.lens, res.codes, base, tx, out)
    return out[:size]


@njit(cache=True)
def _write_results(lens, codes, base, tx, out):
    n = 0
    j = 0
    for i in range(len(lens)):
        n = _piece(out, n, tx, 12)
        n = _value(out, n, tx, i)
        n = _piece(out, n, tx, 13)
        for e in range(lens[i]):
            if e:
                n = _piece(out, n, tx, 15)
            n = _value(out, n, tx, base + codes[j])
            j += 1
        n = _piece(out, n, tx, 14)
    return n


@njit(cache=True)
def _reorder(text, starts, order, keys, out):
    w = 0
    width = keys.shape[1]
    for i in range(len(order)):
        k = order[i]
        for c in range(width):
            out[w + c] = keys[i, c]
        w += width
        for c in range(starts[k], starts[k + 1]):
            out[w] = text[c]
            w += 1


def reorder(text: bytes, order: np.ndarray, keys: np.ndarray | None = None) -> np.ndarray:
    """The lines of ``text`` (each ending in a newline) taken in ``order`` (some may be left
    out), line ``order[i]`` behind row ``i`` of ``keys`` (bytes, as wide as the caller
    needs; none by default): one compiled copy, no Python step a line."""
    buf = np.frombuffer(text, np.uint8)
    starts = np.concatenate(([0], np.flatnonzero(buf == 10) + 1))  # line i: starts[i] to starts[i + 1]
    order = np.asarray(order, np.int64)
    if keys is None:
        keys = np.empty((len(order), 0), np.uint8)
    out = np.empty(int((starts[1:] - starts[:-1])[order].sum()) + keys.size, np.uint8)
    _reorder(buf, starts, order, keys, out)
    return out
