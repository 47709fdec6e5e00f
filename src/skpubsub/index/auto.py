"""``--index auto``, the default: each subscription in the structure best for its kind and
match, in one engine (measured; see NOTES.md "auto"):

* top-k in Skype's IGPT (its cells and α-partition groups);
* kNN `all` under CkQST's ordered keyword pairs and blocks (AOIQ-tree);
* range (either match) and kNN `any` in the compiled grid inverted file: GI²'s least
  frequent keyword for an `all`, every keyword for an `any` (DkM-SKS's worker index).

The last two are one AOIQ grid whose pairs hold kNN subscriptions only, so an object
scans one grid; IGPT adds its top-k candidates beside it (``precompute``).
"""

from __future__ import annotations

import numpy as np

from ..core.config import Space
from ..core.vocab import Vocabulary
from ..store.subscriptions import K_TOPK, SubTable
from .aoiq import AOIQIndex
from .igpt.index import IGPTIndex


class AutoIndex(IGPTIndex):
    """``grid``, ``group``, ``tighten``: IGPT's (top-k); ``theta_u``: AOIQ's (kNN `all`)."""

    name = "auto"

    def __init__(self, subs: SubTable, vocab: Vocabulary, space: Space, grid: int = 32, group: int = 32,
                 tighten: float = 0.25, theta_u: float = 0.001) -> None:
        super().__init__(subs, vocab, space, grid=grid, group=group, tighten=tighten)
        self.grid_index = AOIQIndex(subs, vocab, space, prefix=False, theta_u=theta_u, kinds="knn")

    def insert_many(self, slots: np.ndarray) -> None:
        topk = self.subs.cols.kind[slots] == K_TOPK
        if not topk.any():
            self.grid_index.insert_many(slots)
            return
        super().insert_many(slots[topk])  # one by one: IGPT links each into its cell
        if not topk.all():
            self.grid_index.insert_many(slots[~topk])
