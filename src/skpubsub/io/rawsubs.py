"""A block of range or kNN subscription lines read from its bytes in one compiled pass
(io/NOTES.md, "Subscription lines read from their bytes").

msgspec decoded each line into a record of fresh Python objects (an id string, a tuple of
four floats, a tuple for the keywords) that the Gate then read back field by field in
column passes, and the engine's process unpickled again. Here :func:`scan` reads the
lines of a block that are all of one plain shape, an object of the keys ``op`` (``"sub"``),
``id`` (a string without escapes), ``t`` (a number), ``kind`` (``"range"`` or ``"knn"``),
``rect`` (four numbers) or ``x``, ``y`` (numbers) and ``k`` (an integer), ``keywords`` (an
array, coded by ``rawwords`` as before) and an optional ``match`` (``"all"``/``"any"``), in
any order with JSON white space between, into arrays: numbers as numbers, the ids as one
UTF-8 buffer, the keyword arrays as spans of the block. Anything else (another key, a key
twice, an escape in an id or a key, an integer id, a syntax error) gives None, and the
block goes the usual way, where the line's own decoder says why.

Numbers are read exactly or not at all: an integer below 2**53 is exact in float64 (up to
18 digits in int64, for ``t`` and ``k``), and a decimal of up to 15 significant digits
whose power of ten is within 10**22 is exact after one correctly rounded multiplication or
division of two exact values (Clinger's fast path); any other is left to msgspec
(``slow``), which decodes its token alone as the record's decoder would have. An integer
written for a float field is the float of that integer, as msgspec makes it (``-0`` is
``0.0``).
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec
import numpy as np
from numba import njit

from .events import Packed

# the int64 columns of a record (``I``), then its float64 ones (``F``)
KW_A, KW_B, T_INT, K, KIND, MATCH, T_FLOAT = range(7)
T, X1, Y1, X2, Y2, X, Y = range(7)
RANGE_CODE, KNN_CODE = 0, 1
MATCH_UNSET, MATCH_ALL, MATCH_ANY = 0, 1, 2
# the keys, as bits of a record's mask
B_OP, B_ID, B_T, B_KIND, B_RECT, B_X, B_Y, B_K, B_KW, B_MATCH = (1 << i for i in range(10))
RANGE_KEYS = B_OP | B_ID | B_T | B_KIND | B_RECT | B_KW  # and perhaps B_MATCH
KNN_KEYS = B_OP | B_ID | B_T | B_KIND | B_X | B_Y | B_K | B_KW

FAST_DIGITS = 15  # below 2**53: exact in float64
POW10 = np.array([10.0 ** i for i in range(23)])  # each exact in float64

_numbers = msgspec.json.Decoder(list[float]).decode  # slow tokens, as the record's decoder reads each


class Scanned(NamedTuple):
    """A block's columns as :func:`scan` read them (``n`` records)."""

    ints: np.ndarray  # (n, 7) int64: the ``I`` columns above
    floats: np.ndarray  # (n, 7) float64: the ``F`` columns above
    ids: Packed  # (pickled as their text: none holds a newline, ``scan`` refuses control bytes in an id)


def scan_block(lines: bytes, n: int) -> Scanned | None:
    """The columns of the ``n`` lines joined by ``\\n`` in ``lines``, or None (above)."""
    buf = np.frombuffer(lines, np.uint8)
    ints = np.zeros((n, 7), np.int64)
    floats = np.zeros((n, 7), np.float64)
    slow = np.empty((5 * n, 3), np.int64)  # (record, F column, token start << 32 | end)
    ids = np.empty(len(buf) + n, np.uint8)  # the ids' bytes, each ended by "\n"
    got, n_slow, n_ids = scan(buf, n, (ints, floats, slow, ids, POW10))
    if got != n:
        return None
    if n_slow:
        r, col, span = slow[:n_slow].T
        if (col == T).any():  # a time the fast path does not read: the usual way
            return None
        a, b = (span >> 32).tolist(), (span & 0xFFFFFFFF).tolist()
        try:  # one call for all, each token as the record's decoder reads it
            floats[r, col] = _numbers(b"[" + b",".join(map(lines.__getitem__, map(slice, a, b))) + b"]")
        except msgspec.DecodeError:
            return None
    try:
        text = ids[:n_ids - 1].tobytes().decode("utf-8")
    except UnicodeDecodeError:
        return None
    return Scanned(ints, floats, Packed.of(text.split("\n"), (str.split, (text, "\n"))))


@njit(inline="always", cache=True)
def _ws(buf, p, e):
    while p < e and (buf[p] == 32 or buf[p] == 9 or buf[p] == 13):
        p += 1
    return p


@njit(inline="always", cache=True)
def _is(buf, p, e, word):
    """Does ``buf[p:e]`` start with the bytes of ``word`` (a tuple of ints)?"""
    if e - p < len(word):
        return False
    for i in range(len(word)):
        if buf[p + i] != word[i]:
            return False
    return True


@njit(inline="always", cache=True)
def _string(buf, p, e):
    """The end of the JSON string whose opening quote is at ``p`` (the index of its closing
    quote), or -1 when it has an escape or a control byte, or does not end by ``e``."""
    p += 1
    while p < e:
        c = buf[p]
        if c == 34:
            return p
        if c == 92 or c < 32:
            return -1
        p += 1
    return -1


@njit(inline="always", cache=True)
def _num(buf, p, e, pow10):
    """The JSON number at ``p``: ``(end, how, int value, float value)``; ``how`` 0 an
    integer of up to 18 digits (exact in int64; the float exact too when up to 15), 1 a
    decimal read exactly, 2 a number to read otherwise (``slow``), -1 not a number."""
    neg = False
    if p < e and buf[p] == 45:  # -
        neg = True
        p += 1
    if p >= e:
        return p, -1, 0, 0.0
    w = 0
    nd = 0  # significant digits in w
    if buf[p] == 48:  # 0: no digit may follow
        p += 1
    elif 49 <= buf[p] <= 57:
        while p < e and 48 <= buf[p] <= 57:
            if nd < 19:
                w = w * 10 + (buf[p] - 48)
            nd += 1
            p += 1
    else:
        return p, -1, 0, 0.0
    whole = True
    scale = 0  # the power of ten of the last digit in w
    if p < e and buf[p] == 46:  # .
        whole = False
        p += 1
        if p >= e or not 48 <= buf[p] <= 57:
            return p, -1, 0, 0.0
        while p < e and 48 <= buf[p] <= 57:
            d = buf[p] - 48
            if nd > 0 or d != 0:
                if nd < 19:
                    w = w * 10 + d
                    scale -= 1
                nd += 1
            else:
                scale -= 1
            p += 1
    if p < e and (buf[p] == 101 or buf[p] == 69):  # e E
        whole = False
        p += 1
        eneg = False
        if p < e and (buf[p] == 43 or buf[p] == 45):
            eneg = buf[p] == 45
            p += 1
        if p >= e or not 48 <= buf[p] <= 57:
            return p, -1, 0, 0.0
        x = 0
        while p < e and 48 <= buf[p] <= 57:
            if x < 100000:
                x = x * 10 + (buf[p] - 48)
            p += 1
        scale += -x if eneg else x
    if whole:
        if nd > 18:
            return p, 2, 0, 0.0
        v = -w if neg else w
        return p, 0, v, float(v)
    if nd > FAST_DIGITS or not -22 <= scale <= 22:
        return p, 2 if w != 0 else 1, 0, -0.0 if neg else 0.0
    f = float(w)
    f = f * pow10[scale] if scale >= 0 else f / pow10[-scale]
    return p, 1, 0, -f if neg else f


@njit(cache=True)
def scan(buf, n, cols):
    """Read the ``n`` lines of ``buf`` (``\\n`` between them) into ``cols`` = ``(I, F, slow,
    ids, pow10)``; returns ``(lines read, slow tokens, id bytes)``: fewer lines than ``n``
    when one is not of the shape (module docstring)."""
    I, F, slow, ids, pow10 = cols
    e_all = len(buf)
    ns = 0
    ni = 0
    a = 0
    e = e_all  # (the line's end is found at its closing brace: no byte is read twice for it)
    for r in range(n):
        if a > e_all:
            return r, ns, ni
        p = _ws(buf, a, e)
        if p >= e or buf[p] != 123:  # {
            return r, ns, ni
        p += 1
        mask = 0
        first = True
        while True:
            p = _ws(buf, p, e)
            if p >= e:
                return r, ns, ni
            if buf[p] == 125 and not first:  # }
                p += 1
                break
            if not first:
                if buf[p] != 44:  # ,
                    return r, ns, ni
                p = _ws(buf, p + 1, e)
            first = False
            if p >= e or buf[p] != 34:
                return r, ns, ni
            q = _string(buf, p, e)
            if q < 0:
                return r, ns, ni
            ka, kl = p + 1, q - p - 1
            p = _ws(buf, q + 1, e)
            if p >= e or buf[p] != 58:  # :
                return r, ns, ni
            p = _ws(buf, p + 1, e)
            if p >= e:
                return r, ns, ni
            k0 = buf[ka]
            bit = 0
            if kl == 2 and k0 == 111 and buf[ka + 1] == 112:  # op
                bit = B_OP
                if not _is(buf, p, e, (34, 115, 117, 98, 34)):  # "sub"
                    return r, ns, ni
                p += 5
            elif kl == 2 and k0 == 105 and buf[ka + 1] == 100:  # id
                bit = B_ID
                if buf[p] != 34:
                    return r, ns, ni
                q = _string(buf, p, e)
                if q < 0:
                    return r, ns, ni
                for j in range(p + 1, q):
                    ids[ni] = buf[j]
                    ni += 1
                ids[ni] = 10
                ni += 1
                p = q + 1
            elif kl == 1 and (k0 == 116 or k0 == 120 or k0 == 121 or k0 == 107):  # t x y k
                q, how, iv, fv = _num(buf, p, e, pow10)
                if how < 0:
                    return r, ns, ni
                if k0 == 107:
                    bit = B_K
                    if how != 0:  # (a decimal k: the usual way says)
                        return r, ns, ni
                    I[r, K] = iv
                else:
                    col = T if k0 == 116 else X if k0 == 120 else Y
                    bit = B_T if k0 == 116 else B_X if k0 == 120 else B_Y
                    if k0 == 116:
                        I[r, T_FLOAT] = how != 0
                        I[r, T_INT] = iv
                    if how == 2 or (how == 0 and k0 != 116 and abs(iv) >= 1 << 53):
                        slow[ns, 0], slow[ns, 1], slow[ns, 2] = r, col, p << 32 | q
                        ns += 1
                    F[r, col] = fv
                p = q
            elif kl == 4 and k0 == 107 and _is(buf, ka, e, (107, 105, 110, 100)):  # kind
                bit = B_KIND
                if _is(buf, p, e, (34, 114, 97, 110, 103, 101, 34)):  # "range"
                    I[r, KIND] = RANGE_CODE
                    p += 7
                elif _is(buf, p, e, (34, 107, 110, 110, 34)):  # "knn"
                    I[r, KIND] = KNN_CODE
                    p += 5
                else:
                    return r, ns, ni
            elif kl == 4 and k0 == 114 and _is(buf, ka, e, (114, 101, 99, 116)):  # rect
                bit = B_RECT
                if buf[p] != 91:  # [
                    return r, ns, ni
                for c in range(4):
                    p = _ws(buf, p + 1, e)
                    q, how, iv, fv = _num(buf, p, e, pow10)
                    if how < 0:
                        return r, ns, ni
                    if how == 2 or (how == 0 and abs(iv) >= 1 << 53):
                        slow[ns, 0], slow[ns, 1], slow[ns, 2] = r, X1 + c, p << 32 | q
                        ns += 1
                    F[r, X1 + c] = fv
                    p = _ws(buf, q, e)
                    if p >= e or buf[p] != (93 if c == 3 else 44):  # ] after the fourth, else ,
                        return r, ns, ni
                p += 1
            elif kl == 8 and k0 == 107 and _is(buf, ka, e, (107, 101, 121, 119, 111, 114, 100, 115)):
                bit = B_KW  # keywords: an array's span, its strings read by rawwords.spell
                if buf[p] != 91:
                    return r, ns, ni
                I[r, KW_A] = p
                p += 1
                while True:
                    p = _ws(buf, p, e)
                    if p >= e:
                        return r, ns, ni
                    c = buf[p]
                    if c == 93:  # ]
                        p += 1
                        break
                    if c == 34:  # a string: escapes allowed (spell reads them)
                        p += 1
                        while p < e and buf[p] != 34:
                            p += 2 if buf[p] == 92 else 1
                        if p >= e:
                            return r, ns, ni
                        p += 1
                    elif c == 44:
                        p += 1
                    else:
                        return r, ns, ni
                I[r, KW_B] = p
            elif kl == 5 and k0 == 109 and _is(buf, ka, e, (109, 97, 116, 99, 104)):  # match
                bit = B_MATCH
                if _is(buf, p, e, (34, 97, 108, 108, 34)):  # "all"
                    I[r, MATCH] = MATCH_ALL
                elif _is(buf, p, e, (34, 97, 110, 121, 34)):  # "any"
                    I[r, MATCH] = MATCH_ANY
                else:
                    return r, ns, ni
                p += 5
            else:
                return r, ns, ni
            if mask & bit:  # a key twice
                return r, ns, ni
            mask |= bit
        p = _ws(buf, p, e)
        if p < e and buf[p] != 10:  # (white space holds no newline: this is the line's end)
            return r, ns, ni
        keys = mask & ~B_MATCH
        if keys != (RANGE_KEYS if I[r, KIND] == RANGE_CODE else KNN_KEYS):
            return r, ns, ni
        a = p + 1
    if a <= e_all:  # more lines than n
        return n - 1, ns, ni
    return n, ns, ni


def warm() -> None:
    """Load the kernels now (``run`` forks its reading process after ``rawwords.warm``)."""
    line = b'{"op":"sub","id":"a","t":0,"kind":"range","rect":[0,0.5,1e0,1],"keywords":["a"]}'
    scan_block(line, 1)
