"""The object table and the alive-object store.

An object occupies a slot while it is alive (count/time windows) or while some
result holds it (``refs``), so results can always name it. Alive objects are
also posted per keyword, which is what re-evaluation reads when a result loses
a member or a kNN/top-k subscription registers under a retaining window.
"""

from __future__ import annotations

import math

import numpy as np

from ..io.events import Pub
from ..pool import Columns, SegmentPool


class ObjectTable:
    """Columnar objects: O(1) add/free, keyword ids in a segment pool."""

    def __init__(self) -> None:
        self.cols = Columns({
            "x": (np.float64, 0.0), "y": (np.float64, 0.0), "seq": (np.int64, -1),
            "expiry": (np.float64, math.inf), "kw_off": (np.int64, 0), "kw_len": (np.int32, 0),
            "wo": (np.float64, 0.0), "refs": (np.int32, 0), "alive": (np.bool_, False),
        })
        self.kw = SegmentPool({"id": np.int32})
        self.ids: list[object] = []

    def add(self, ev: Pub, kw_ids: list[int], expiry: float, alive: bool) -> int:
        c = self.cols
        slot = c.add()
        if slot == len(self.ids):
            self.ids.append(ev.id)
        else:
            self.ids[slot] = ev.id
        c.x[slot], c.y[slot], c.seq[slot], c.expiry[slot] = ev.x, ev.y, ev.seq, expiry
        n = len(kw_ids)
        off = self.kw.alloc(n)
        self.kw.id[off:off + n] = kw_ids
        c.kw_off[slot], c.kw_len[slot] = off, n
        c.wo[slot] = 1.0 / math.sqrt(n)  # scoring.object_weight
        c.alive[slot] = alive
        return slot

    def keywords(self, slot: int) -> np.ndarray:
        off = self.cols.kw_off[slot]
        return self.kw.id[off:off + self.cols.kw_len[slot]]

    def free(self, slot: int) -> None:
        self.kw.release(int(self.cols.kw_off[slot]), int(self.cols.kw_len[slot]))
        self.ids[slot] = None
        self.cols.free(slot)

    @property
    def nbytes(self) -> int:
        return self.cols.nbytes + self.kw.nbytes


class AliveStore:
    """Alive objects posted per keyword id: O(#keywords) insert and remove."""

    def __init__(self) -> None:
        self.postings: dict[int, set[int]] = {}
        self.count = 0

    def add(self, slot: int, kw_ids) -> None:
        for w in kw_ids:
            p = self.postings.get(w)
            if p is None:
                self.postings[w] = {slot}
            else:
                p.add(slot)
        self.count += 1

    def remove(self, slot: int, kw_ids) -> None:
        for w in kw_ids:
            p = self.postings[w]
            p.discard(slot)
            if not p:
                del self.postings[w]
        self.count -= 1

    def posting(self, kw: int) -> np.ndarray:
        """Alive object slots carrying ``kw``, sorted: O(n log n) in the posting size."""
        p = self.postings.get(kw)
        if not p:
            return np.empty(0, dtype=np.int64)
        return np.sort(np.fromiter(p, dtype=np.int64, count=len(p)))

    def having_all(self, kw_ids) -> np.ndarray:
        """Sorted alive object slots carrying every keyword (rarest posting first)."""
        lists = sorted((self.postings.get(w, ()) for w in kw_ids), key=len)
        if not lists[0]:
            return np.empty(0, dtype=np.int64)
        out = np.fromiter(lists[0], dtype=np.int64, count=len(lists[0]))
        for p in lists[1:]:
            out = out[np.fromiter((o in p for o in out.tolist()), dtype=np.bool_, count=len(out))]
        return np.sort(out)
