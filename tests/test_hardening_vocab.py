"""Issue 18, class 5 (SPEC section 6, "Memory"): the vocabulary forgets keywords nobody
holds and recycles their ids, so an endless vocabulary under a window stays bounded.
(The engine's wiring of acquire/release is reported separately; this holds the rules.)"""

from __future__ import annotations

import numpy as np
import pytest

from skpubsub.core.vocab import Vocabulary


def test_old_interface_unchanged() -> None:
    v = Vocabulary()
    assert v.ids(("a", "b", "a")) == [0, 1, 0] and v.id("c") == 2 and len(v) == 3
    v.count([0, 2])
    assert v.freq[:3].tolist() == [1, 0, 1]


def test_endless_vocabulary_under_a_window_stays_bounded() -> None:
    """A count window of 50 objects, 3 new keywords each, 20,000 objects: ids stay within
    what the window holds (plus one quarantine round), words and frequencies are dropped."""
    v = Vocabulary()
    alive: list[list[int]] = []
    for n in range(20_000):
        ids = v.acquire((f"w{n}a", f"w{n}b", "common"))
        v.count(ids)
        alive.append(ids)
        if len(alive) > 50:
            v.release(alive.pop(0))
        if n % 10 == 0:  # an owner drops the keys' postings, then lets the ids go back
            v.released()
            v.recycle()
    v._check()
    assert v.live == 2 * 50 + 1
    assert len(v) <= 2 * 50 + 1 + 2 * 11 + 2, len(v)  # the id space, hence freq/postings rows
    assert v.freq[v.id("common")] == 20_000  # a keyword still held keeps its statistic
    assert sum(w is not None for w in v.words) == v.live


def test_released_ids_wait_for_recycle_and_come_back_clean() -> None:
    v = Vocabulary()
    sub = v.acquire(("x", "y"))
    obj = v.acquire(("y", "z"))
    v.count(obj)
    v.release(obj)  # z forgotten, y still held by the subscription
    assert v.released() == [2] and v.words[2] is None and v.freq[2] == 0
    assert v.id("new") == 3  # quarantined: not reused before recycle
    v.recycle()
    assert v.id("newer") == 2 and v.freq[2] == 0
    assert v.id("y") == sub[1]
    v._check()
    with pytest.raises(ValueError, match="released more often"):
        v.release([2])
    assert np.all(v.refs >= 0)
