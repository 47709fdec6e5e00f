"""``--index auto``, the default: each subscription in the structure best for its kind and
match, in one grid (measured; see NOTES.md "auto"):

* kNN `all` under CkQST's ordered keyword pairs and blocks (AOIQ-tree);
* range (either match) and kNN `any` in the grid inverted file: GI²'s least frequent
  keyword for an `all`, every keyword for an `any` (DkM-SKS's worker index), kNN regions
  on the level CkQST's memory cost model picks;
* top-k under the prefix filter's keyword classes in the same grid (IGPT, measured
  beside it, was slower on our GeoNames top-k workloads).

So an object scans one grid, with one probe of its keyword pairs.
"""

from __future__ import annotations

from ..core.config import Space
from ..core.vocab import Vocabulary
from ..store.subscriptions import SubTable
from .aoiq import THETA_N, AOIQIndex


class AutoIndex(AOIQIndex):
    """AOIQ with pairs for kNN subscriptions only; the parameters are the grid's and AOIQ's."""

    name = "auto"

    def __init__(self, subs: SubTable, vocab: Vocabulary, space: Space, grid: int = 16384, max_cells: int = 4,
                 refresh_from: int = 1024, theta_u: float = 0.001, theta_n: float = THETA_N,
                 warm_n: int = 1024) -> None:
        super().__init__(subs, vocab, space, grid=grid, max_cells=max_cells, refresh_from=refresh_from,
                         theta_u=theta_u, theta_n=theta_n, warm_n=warm_n, kinds="knn")
