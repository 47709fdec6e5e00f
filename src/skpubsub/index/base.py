"""The base class every subscription index subclasses (filter only, never results)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..core.config import Space
    from ..core.layouts import Probes
    from ..core.vocab import Vocabulary
    from ..store.subscriptions import SubTable
    from .cgrid import CompiledGrid


class SubscriptionIndex:
    """Candidates for an object: a superset of the subscriptions it may affect.

    The engine owns the subscription table and the results; an index reads the table's
    columns (kind, keywords, rect or centre, ``kth``) to place a slot, and is told when a
    slot is inserted, deleted, or its ``kth`` changed. Subclasses take ``(subs, vocab,
    space, **params)`` and register by name (:mod:`.registry`).

    Optional capabilities are declared here as class attributes, never probed:

    * ``compiled``: the engine runs its publications in the publish kernel
      (:mod:`skpubsub.engine.kernel`), which scans ``kernel_grid``;
    * ``scans`` (compiled): the kernel scans ``kernel_grid`` per object; if not, every
      candidate comes from ``precompute``;
    * ``precomputes`` (compiled): ``precompute`` finds (some) candidates of a run of objects
      before the kernel runs;
    * ``tracks_scores``: ``touched`` is told which slots' results changed in a run.
    """

    name = ""
    compiled = False
    scans = True
    precomputes = False
    tracks_scores = False

    def __init__(self, subs: SubTable, vocab: Vocabulary, space: Space) -> None:
        self.subs, self.vocab, self.space = subs, vocab, space

    def insert(self, s: int) -> None:
        raise NotImplementedError

    def insert_many(self, slots: np.ndarray) -> None:
        """``insert`` of each slot in turn (an index may do it at once)."""
        for s in slots.tolist():
            self.insert(s)

    def delete(self, s: int) -> None:
        raise NotImplementedError

    def update(self, s: int) -> None:
        """The k-th result key of ``s`` changed: its search region moved."""
        raise NotImplementedError

    def candidates(self, x: float, y: float, kw_ids: np.ndarray) -> np.ndarray:
        """Unique subscription slots that may match an object at (x, y) with these keywords."""
        raise NotImplementedError

    def refresh(self, objects: int) -> int:
        """``objects`` publications seen so far (keyword frequencies moved): re-post what
        should move; returns how many moved."""
        return 0

    @property
    def nbytes(self) -> int:
        raise NotImplementedError

    def _check(self) -> None:
        """Assert the index's invariants (tests call this after mutations)."""
        raise NotImplementedError

    # -- optional capabilities (see the class docstring) ---------------------------------
    @property
    def kernel_grid(self) -> CompiledGrid:
        """The compiled grid the publish kernel scans (``compiled``)."""
        raise NotImplementedError(f"{self.name} does not run in the publish kernel")

    def precompute(self, objects: Probes, expiring: Probes) -> tuple[Any, ...]:
        """(foreign slot bits, CSR offsets and candidates of ``objects``, of ``expiring``)
        under the index as it is now (``precomputes``); see ``kernel.publish_run``."""
        raise NotImplementedError(f"{self.name} does not precompute candidates")

    def touched(self, slots: np.ndarray) -> None:
        """Slots whose results changed in a run (``tracks_scores``)."""
