"""Skype's IGPT (Section 5): top-k subscriptions in the leaf cell of their location,
an inverted file per cell, α-partition groups, and pruning by groups and by cells.

Unlike the region indexes (:mod:`..cgrid`), a subscription is stored once per keyword in
the cell that holds its *location* (Section 5.3), whatever its k-th score; an object
visits the cells that hold a list of one of its keywords (a directory of every cell's
lists by keyword, then cell) and prunes (:mod:`.probe`):

* **cell pruning** (Lemma 6, Eq. 8): skip cell ``c`` when every subscription in it
  needs more spatial similarity than ``SSimUB_out(m, c)`` (Definition 7) even with a
  perfect text match;
* **group pruning** (Theorem 3): in the list of keyword ``w``, subscriptions are
  grouped by ``α* = α/(1-α)`` (α-partition, Section 5.2.1, :mod:`.build`); a group is
  skipped when ``maxwt · wtsum(m.w) < kScore*(G) - G.α* · SSimUB_out``;
* **early termination** (Theorem 4, Eqs. 6-7): a group is sorted by
  ``kScore* = kScore/(1-α)``; with suffix maxima of ``maxwt`` and ``α*`` the first
  position from which Theorem 4's inequality holds is found by binary search and the
  rest of the group is not read;
* **individual pruning** (Lemma 1 with Theorem 2): met under keyword ``w``, a
  subscription's text similarity is ``w``'s exact share plus at most Eq. 5's
  ``min(wtsum·maxwt(m), wtsum(m)·maxwt)`` over the keywords after ``w``; with the exact
  spatial similarity a subscription that cannot reach ``kScore`` is skipped;
* **summed shares** (ours): one that passes keeps adding its exact share from the
  cell's later lists and must reach ``kScore`` after the cell (NOTES.md).

Keywords are in one global order (ids), so the list an object meets a subscription in
first is its first shared keyword, where these bounds cover the whole text similarity:
a subscription rejected there is marked seen for the rest of the object (Algorithm 1's
``R[s] = -inf``). Our object vectors weigh each keyword ``wo = 1/sqrt(|o|)``, so
``maxwt(m.w) = wo`` and ``wtsum(m.w) = wo`` times the keywords from ``w`` on.

Statistics are snapshots of ``kScore = -kth`` taken when a cell is built, rebuilt
before the next object when they may no longer bound the scores (:mod:`.index`,
NOTES.md). Only ``topk`` subscriptions live here; ``range`` and ``knn`` ones go to a
compiled grid, and candidates are the union. The publish kernel
(:mod:`skpubsub.engine.kernel`) runs it with top-k candidates from ``precompute``.

Modules: :mod:`.layout` (the named tuples the kernels take), :mod:`.build` (a cell's
inverted file), :mod:`.probe` (the directory and the probe), :mod:`.index`
(:class:`IGPTIndex`).
"""

from . import build, layout, probe
from .index import IGPTIndex
from .layout import N_BUILT, N_CELL, N_ET, N_GROUP, N_INDIV, N_READ

__all__ = ["N_BUILT", "N_CELL", "N_ET", "N_GROUP", "N_INDIV", "N_READ", "IGPTIndex", "build", "layout", "probe"]
