"""A subscription block's keywords coded from their JSON bytes (io/NOTES.md, "Keywords coded
from their bytes").

The Gate's coded blocks used to take each record's keywords as msgspec's tuple of fresh
strings and look every word up in the lexicon's dict: hashing each new string and
probing the dict cost ~200 ns a word (range_1m: 2.67M words, 70,533 distinct). Here the block
is decoded with each record's ``keywords`` left as its raw JSON (``fastline.decode_raw_lines``:
no string made), the raw arrays are joined (one C call) and a compiled pass reads each
array's strings and finds each one's bytes, as written (escapes and all), in an
open-addressing table of the spellings seen before, each with its lexicon code. A spelling
not seen before is decoded by msgspec alone, in Python, and coded by the lexicon as before;
so two spellings of one word (``"\\u00fc"`` and ``"ü"``) have one code, and a spelling that
does not decode (a bad escape, bytes not UTF-8) sends the block the old way, where the
line's own decoder says why.

A table belongs to its lexicon (``Lexicon._table``), so a new lexicon starts a new table.
"""

from __future__ import annotations

import numpy as np
from numba import njit

FIRST_SLOTS = 1 << 12
H, KEY, VAL = range(3)  # a slot's fields, of 4 (32 bytes); KEY: arena offset << LEN_BITS | length, -1 free
LEN_BITS = 24
EMPTY = -1


class RawTable:
    """Spellings (a JSON string's bytes between its quotes) -> lexicon codes."""

    __slots__ = ("slots", "arena", "used")

    def __init__(self) -> None:
        self.slots = np.full((FIRST_SLOTS, 4), EMPTY, np.int64)
        self.arena = np.zeros(1 << 16, np.uint8)
        self.used = np.zeros(2, np.int64)  # slots filled, arena bytes used

    def codes(self, buf: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, ...] | None:
        """Each record's strings (record ``r`` is ``buf[begins[r]:ends[r]]``, an array of
        one string or more): ``(starts, stops, codes, off)``, a string's bytes and its code
        (-1 when the spelling is new), and where each record's strings begin; None when a
        record is anything else (empty, another value, a control byte in a string)."""
        cap = int((ends - begins).sum()) // 3 + 1  # a string takes 3 bytes at least: quotes, a comma or bracket
        at = np.empty((3, cap), np.int64)
        off = np.empty(len(ends) + 1, np.int64)
        n = spell(buf, (begins, ends), self.slots, self.arena, at, off)
        if n < 0:
            return None
        return at[0, :n], at[1, :n], at[2, :n], off

    def learn(self, buf: np.ndarray, starts: np.ndarray, stops: np.ndarray, codes: np.ndarray) -> None:
        """Keep each spelling ``buf[starts[j]:stops[j]]`` as ``codes[j]``."""
        need = self.used[0] + len(codes)
        if 2 * need > len(self.slots):
            size = len(self.slots)
            while 2 * need > size:
                size *= 2
            slots = np.full((size, 4), EMPTY, np.int64)
            rehash(self.slots, slots)
            self.slots = slots
        room = self.used[1] + int((stops - starts).sum())
        if room > len(self.arena):
            arena = np.zeros(max(room, 2 * len(self.arena)), np.uint8)
            arena[:self.used[1]] = self.arena[:self.used[1]]
            self.arena = arena
        put(buf, starts, stops, codes, self.slots, self.arena, self.used)


@njit(inline="always", cache=True)
def _hash(buf, a, b):
    """FNV-1a, 64 bits, of ``buf[a:b]``, as int64."""
    h = np.uint64(0xCBF29CE484222325)
    for p in range(a, b):
        h = (h ^ np.uint64(buf[p])) * np.uint64(0x100000001B3)
    return np.int64(h)


@njit(inline="always", cache=True)
def _find(slots, arena, buf, a, b, h):
    """The slot holding ``buf[a:b]``, or ``~slot`` of the free slot it would take."""
    mask = len(slots) - 1
    i = h & mask
    ln = b - a
    while True:
        key = slots[i, KEY]
        if key == EMPTY:
            return ~i
        if slots[i, H] == h and key & ((1 << LEN_BITS) - 1) == ln:
            ko = key >> LEN_BITS
            same = True
            for p in range(ln):
                if arena[ko + p] != buf[a + p]:
                    same = False
                    break
            if same:
                return i
        i = (i + 1) & mask


@njit(inline="always", cache=True)
def _space(c):
    return c == 32 or c == 9 or c == 10 or c == 13  # JSON's white space


@njit(cache=True)
def spell(buf, spans, slots, arena, at, off):
    """Read records ``buf[begins[r]:ends[r]]`` (``spans``: the two arrays), each ``[``
    string (``,`` string)* ``]`` with JSON white space between: ``at[0]``/``at[1]`` each
    string's bytes inside its quotes, ``at[2]`` its code (-1: not in the table), ``off``
    where each record's strings begin.
    The number of strings, or -1 when a record is not such an array. An escape is taken
    as written (a backslash and the byte after it); whether it is a valid one is msgspec's
    to say when the spelling is new (a known spelling was once)."""
    begins, ends = spans
    n = 0
    off[0] = 0
    for r in range(len(ends)):
        e = ends[r]
        p = begins[r]
        while p < e and _space(buf[p]):
            p += 1
        if p >= e or buf[p] != 91:  # [
            return -1
        p += 1
        first = True
        while True:
            while p < e and _space(buf[p]):
                p += 1
            if p >= e:
                return -1
            c = buf[p]
            if c == 93 and not first:  # ]
                p += 1
                break
            if not first:
                if c != 44:  # ,
                    return -1
                p += 1
                while p < e and _space(buf[p]):
                    p += 1
                if p >= e:
                    return -1
                c = buf[p]
            if c != 34:  # " (an empty array, a number, ...: the old way)
                return -1
            p += 1
            s = p
            while True:
                if p >= e:
                    return -1
                c = buf[p]
                if c == 34:
                    break
                if c < 32:  # a control byte: not JSON
                    return -1
                p += 2 if c == 92 else 1  # a backslash: the byte after it is the escape's
            at[0, n] = s
            at[1, n] = p
            i = _find(slots, arena, buf, s, p, _hash(buf, s, p))
            at[2, n] = slots[i, VAL] if i >= 0 else -1
            n += 1
            p += 1
            first = False
        while p < e and _space(buf[p]):
            p += 1
        if p != e:
            return -1
        off[r + 1] = n
    return n


@njit(cache=True)
def put(buf, starts, stops, codes, slots, arena, used):
    """Store each spelling with its code (room made by the caller; one already kept stays)."""
    for j in range(len(codes)):
        a, b = starts[j], stops[j]
        h = _hash(buf, a, b)
        i = _find(slots, arena, buf, a, b, h)
        if i >= 0:
            continue
        i = ~i
        ko = used[1]
        for c in range(b - a):  # (no slice assigned an array: engine/NOTES.md, "A cold run's compile")
            arena[ko + c] = buf[a + c]
        slots[i, H] = h
        slots[i, KEY] = ko << LEN_BITS | (b - a)
        slots[i, VAL] = codes[j]
        used[0] += 1
        used[1] += b - a


@njit(cache=True)
def rehash(old, new):
    """Every filled slot of ``old`` into ``new`` (twice as many or more)."""
    mask = len(new) - 1
    for i in range(len(old)):
        if old[i, KEY] != EMPTY:
            j = old[i, H] & mask
            while new[j, KEY] != EMPTY:
                j = (j + 1) & mask
            new[j, 0], new[j, 1], new[j, 2] = old[i, 0], old[i, 1], old[i, 2]


def warm() -> None:
    """Load the kernels (and Numba's target) now: ``run``'s reading process is forked after
    this, so it reads its first block without the 0.1-0.2 s of loading them."""
    t = RawTable()
    buf = np.frombuffer(b'["a"]', np.uint8)
    got = t.codes(buf, np.zeros(1, np.int64), np.array([len(buf)], np.int64))
    t.learn(buf, got[0], got[1], np.zeros(1, np.int64))
