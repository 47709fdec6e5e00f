"""Keywords numbered where they are read: a subscription block's keyword column as integer
codes into an append-only :class:`Lexicon` (io/NOTES.md, "Keywords numbered where they are
read").

``run``'s reading process makes the codes with the Gate (``Gate(coded=True)``) and sends
each block's codes with the words new since the last block; the engine's process keeps a
mirror of the lexicon and its vocabulary translates each code to its own id once
(``Vocabulary.ids_of``). So the words of a block of subscriptions are neither unpickled
nor hashed again in the engine's process: 1M range subscriptions' 2.6M keywords, 0.9 s of
``Vocabulary.ids`` there, become two array passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import msgspec
import numpy as np

from ..core.columns import grown
from .keywords import normalise
from .rawwords import RawTable

decode_word = msgspec.json.Decoder(str).decode  # one JSON string: a keyword's spelling in its quotes
LEX_MAX = 1 << 20  # words a lexicon learns before the reader starts a new one (memory bound)


class _Coder(dict):
    """word -> code, a word not known appended to ``words`` on lookup (``[]``)."""

    __slots__ = ("words",)

    def __init__(self, words: list[str]) -> None:
        super().__init__()
        self.words = words

    def __missing__(self, word: str) -> int:
        c = self[word] = len(self.words)
        self.words.append(word)
        return c


class Lexicon:
    """Codes for words, append-only: a code never changes its word within one lexicon.

    The reader's lexicon codes words (``code``) and hands out the words it learnt since it
    last did (``fresh``); the engine's process keeps a mirror (``Lexicon(gen)``, extended
    by those words) that the blocks' columns read. ``gen`` tells lexicons apart: past
    ``LEX_MAX`` words the reader starts a new one (``Gate``), so an endless vocabulary
    costs bounded memory on both sides."""

    __slots__ = ("words", "gen", "_coder", "_sent", "_judged", "_normal", "_table")

    def __init__(self, gen: int = 0) -> None:
        self.words: list[str] = []
        self.gen = gen
        self._coder: _Coder | None = None  # made on first ``code`` (a mirror never codes)
        self._sent = 0
        # ``judged``'s: the codes flagged so far; per code, whether its word is a keyword as given
        self._judged = 0
        self._normal = np.zeros(0, dtype=np.bool_)
        self._table: RawTable | None = None  # ``raw_judged``'s spellings, made on first use

    def code(self, words: list[str]) -> np.ndarray:
        """The int32 codes of ``words``, new words learnt in order: one C pass."""
        if self._coder is None:
            self._coder = _Coder(self.words)
        return np.fromiter(map(self._coder.__getitem__, words), np.int32, len(words))

    def judged(self, kws: list[tuple[str, ...]]) -> "Words | None":
        """``Words.of(kws)`` when each tuple is its own ``normalise_keywords`` (each word
        normal already and not empty, none twice in a tuple; ``blockcheck.normal_words``),
        else None. Each word is judged once, when it is learnt (a flag a code); a block's
        test is then array passes over its codes (``repeats``)."""
        return self._checked(Words.of(kws, self))

    def raw_judged(self, raws: list) -> "Words | None":
        """``judged`` of the tuples that ``raws`` (each record's keywords as JSON,
        ``fastline.StrictRaw``) decode to, the same codes learnt in the same order, read from
        the bytes (``rawwords``): only a spelling not seen before is decoded and looked up
        by its string. None also when a record is not an array of strings or a new spelling
        does not decode (the caller then goes the old way, which says why)."""
        lens = np.fromiter(map(len, raws), np.int64, len(raws))
        ends = np.cumsum(lens)
        return self.spans_judged(b"".join(raws), ends - lens, ends)

    def spans_judged(self, joined: bytes, begins: np.ndarray, ends: np.ndarray) -> "Words | None":
        """``raw_judged`` of the arrays ``joined[begins[i]:ends[i]]``."""
        if self._table is None:
            self._table = RawTable()
        buf = np.frombuffer(joined, np.uint8)
        got = self._table.codes(buf, begins, ends)
        if got is None:
            return None
        starts, stops, codes, off = got
        new = np.flatnonzero(codes < 0)
        if len(new):
            if self._coder is None:
                self._coder = _Coder(self.words)
            coder, seen = self._coder, {}
            for j, a, b in zip(new.tolist(), starts[new].tolist(), stops[new].tolist()):
                spelling = joined[a:b]
                c = seen.get(spelling)
                if c is None:
                    try:
                        c = seen[spelling] = coder[decode_word(b'"' + spelling + b'"')]
                    except (msgspec.DecodeError, UnicodeError):
                        return None
                codes[j] = c
            self._table.learn(buf, starts[new], stops[new], codes[new])
        return self._checked(Words(codes.astype(np.int32), off, self))

    def _checked(self, words: "Words") -> "Words | None":
        """``words`` when each record's are normal and none twice, else None."""
        a, n = self._judged, len(self.words)
        if n > a:
            if n > len(self._normal):  # room by doubling: a block's new words cost their own copy only
                cap = max(n, 2 * len(self._normal))
                self._normal = grown(self._normal, cap, False)
            self._normal[a:n] = [bool(w) and normalise(w) == w for w in self.words[a:n]]
            self._judged = n
        if not self._normal[words.codes].all() or repeats(words.codes, words.off):
            return None
        return words

    def fresh(self) -> list[str]:
        """The words learnt since the last call."""
        out = self.words[self._sent:]
        self._sent = len(self.words)
        return out

    def __len__(self) -> int:
        return len(self.words)


class Words(Sequence):
    """A keyword column as codes: record ``i``'s keywords are ``lex.words[c]`` for each ``c``
    in ``codes[off[i]:off[i + 1]]``. As a sequence it is the tuples it stands for, made only
    when asked for (``[i]``, iteration); a slice is a view. ``lex`` is None in transit (a
    pickled column carries no lexicon: the receiver attaches its mirror)."""

    __slots__ = ("codes", "off", "lex")

    def __init__(self, codes: np.ndarray, off: np.ndarray, lex: Lexicon | None) -> None:
        self.codes, self.off, self.lex = codes, off, lex

    @classmethod
    def of(cls, kws: list[tuple[str, ...]], lex: Lexicon) -> "Words":
        off = np.zeros(len(kws) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, kws), np.int64, len(kws)), out=off[1:])
        return cls(lex.code(list(chain.from_iterable(kws))), off, lex)

    @classmethod
    def concat(cls, parts: list["Words"]) -> "Words | None":
        """One column of ``parts`` (of one lexicon, else None)."""
        lex = parts[0].lex
        if any(p.lex is not lex for p in parts):
            return None
        off = np.zeros(sum(map(len, parts)) + 1, dtype=np.int64)
        np.cumsum(np.concatenate([p.lens() for p in parts]), out=off[1:])
        return cls(np.concatenate([p.flat() for p in parts]), off, lex)

    def lens(self) -> np.ndarray:
        return np.diff(self.off)

    def flat(self) -> np.ndarray:
        """Every record's codes, one after another."""
        return self.codes[self.off[0]:self.off[-1]]

    def __len__(self) -> int:
        return len(self.off) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            a, b, step = i.indices(len(self))
            if step != 1:
                return [self[j] for j in range(a, b, step)]
            return Words(self.codes, self.off[a:max(a, b) + 1], self.lex)
        n = len(self)
        if not -n <= i < n:
            raise IndexError("keyword column index out of range")
        i %= n
        words = self.lex.words
        return tuple([words[c] for c in self.codes[self.off[i]:self.off[i + 1]].tolist()])

    def __iter__(self):
        words, codes, off = self.lex.words, self.flat().tolist(), (self.off - self.off[0]).tolist()
        for a, b in zip(off, off[1:]):
            yield tuple([words[c] for c in codes[a:b]])

    def __reduce__(self):  # the codes alone, rebased (the receiver attaches its mirror)
        return Words, (self.flat().copy(), self.off - self.off[0], None)


SHIFTS = 16  # keywords in a record up to which ``repeats`` compares neighbours rather than sorting


def repeats(codes: np.ndarray, off: np.ndarray) -> bool:
    """Does a record name a code twice? Record ``i``'s codes are ``codes[off[i]:off[i + 1]]``.
    NumPy only, no compiled kernel: ``run``'s reading process calls nothing else compiled,
    and loading Numba's target there cost 0.11 s before its first block. With at most
    ``SHIFTS`` codes a record, each code is compared with the ones 1..L-1 places on that
    share its record (L the longest record): O(codes x L) in array passes; else the
    (record, code) pairs are sorted and a pair that comes twice is a repeat."""
    lens = np.diff(off)
    longest = int(lens.max()) if len(lens) else 0
    if longest < 2:
        return False
    c = codes[off[0]:off[-1]]
    owner = np.repeat(np.arange(len(lens), dtype=np.int64), lens)
    if longest > SHIFTS:
        key = owner << 32 | c.astype(np.int64)  # codes are int32, not negative
        key.sort()
        return bool((key[1:] == key[:-1]).any())
    for d in range(1, longest):
        if ((c[d:] == c[:-d]) & (owner[d:] == owner[:-d])).any():
            return True
    return False
