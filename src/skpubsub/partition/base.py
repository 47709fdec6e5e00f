"""What a planner produces: a :class:`Plan` assigning subscriptions to workers.

A planner is a function ``plan(subs, stats, m, **params) -> Plan`` registered in
:data:`skpubsub.partition.PLANNERS` by name (``--partitioner``). The plan says
which workers hold each subscription (one, or several for replicated range
subscriptions) and places new subscriptions arriving after planning by the
planner's own rule. Which workers receive an object is derived by the runtime's
dispatcher from where the subscriptions actually are (so results are exact for
every planner); a planner only decides placement and reports its estimated
costs for the load metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..io.events import Sub
from .stats import Statistics


class Plan(Protocol):
    m: int

    def assign(self, sub: Sub) -> tuple[int, ...]:
        """Workers that will hold ``sub`` (initial or new); updates the plan's load bookkeeping."""

    def remove(self, sub_id: Any) -> None:
        """``sub_id`` ended: forget its load."""

    def move(self, sub_id: Any, workers: tuple[int, ...]) -> None:
        """``sub_id`` migrated to ``workers`` (dynamic load adjustment)."""

    def loads(self) -> list[float]:
        """Estimated cost per worker under the planner's own cost model."""

    def describe(self) -> dict:
        """Plain-data description (regions, keyword groups) for plots and metrics.json."""


class Planner(Protocol):
    def __call__(self, subs: Sequence[Sub], stats: Statistics, m: int, **params: Any) -> Plan: ...
