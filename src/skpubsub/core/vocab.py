"""Keyword ids and object frequencies (the statistic the indexes' cost choices read)."""

from __future__ import annotations

import numpy as np


class Vocabulary:
    """Maps normalised keywords to dense integer ids; counts objects per keyword."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self.words: list[str] = []
        self.freq = np.zeros(1024, dtype=np.int64)

    def id(self, word: str) -> int:
        i = self._ids.get(word)
        if i is None:
            i = len(self.words)
            self._ids[word] = i
            self.words.append(word)
            if i == len(self.freq):
                self.freq = np.concatenate([self.freq, np.zeros_like(self.freq)])
        return i

    def ids(self, words: tuple[str, ...]) -> list[int]:
        return [self.id(w) for w in words]

    def count(self, ids: list[int]) -> None:
        """One more object carries each of ``ids``."""
        self.freq[ids] += 1

    def __len__(self) -> int:
        return len(self.words)
