"""The protocol every subscription index implements (filter only, never results)."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class SubscriptionIndex(Protocol):
    """Candidates for an object: a superset of the subscriptions it may affect.

    The engine owns the subscription table and the results; an index reads the
    table's columns (kind, keywords, rect or centre, ``kth``) to place a slot,
    and is told when a slot is inserted, deleted, or its ``kth`` changed.
    """

    name: str

    def insert(self, s: int) -> None: ...

    def delete(self, s: int) -> None: ...

    def update(self, s: int) -> None:
        """The k-th result key of ``s`` changed: its search region moved."""

    def candidates(self, x: float, y: float, kw_ids: np.ndarray) -> np.ndarray:
        """Unique subscription slots that may match an object at (x, y) with these keywords."""

    @property
    def nbytes(self) -> int: ...

    def _check(self) -> None:
        """Assert the index's invariants (tests call this after mutations)."""
