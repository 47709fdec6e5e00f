"""``serve --workers M``: the local multi-worker runtime behind the engine interface the
service drives (SPEC section 8: "by one engine, or by the local multi-worker runtime").

:class:`~skpubsub.runtime.local.LocalCluster` (dispatcher, M worker processes, merger in
registration order) needs a plan, and a planner wants the stream's head (O_init). A server
has no head to wait for: on a restart the plan is made from the snapshot's records (the live
subscriptions, the objects a result may need); on a fresh directory the workers start at
warm-up with an empty plan, and every subscription is placed by the planner's rule for new
ones. Results do not depend on the plan (the dispatcher routes by where subscriptions are),
so a restart with another plan gives the same state.
"""

from __future__ import annotations

from typing import Any

from ..core.config import Space, Window
from ..io.events import Pub


class WorkerDied(RuntimeError):
    """A worker process is gone (killed, out of memory, a bug: its own error is on stderr)."""


def _guarded(call, *args):
    try:
        return call(*args)
    except (EOFError, OSError) as exc:  # its pipe closed: one line, not the pipe's traceback
        raise WorkerDied(f"a --workers process died ({type(exc).__name__}); every acknowledged event is "
                         f"in the log: start the server again") from None


class ClusterEngine:
    """``apply``/``results``/``all_results`` over M workers; ``query`` for many at once."""

    def __init__(self, window: Window, space: Space, index: str, workers: int, partitioner: str,
                 processes: bool = True, **params: Any) -> None:
        from ..partition.registry import PLANNERS

        if partitioner not in PLANNERS:
            raise ValueError(f"unknown partitioner {partitioner!r}; known: {', '.join(PLANNERS)}")
        if index == "reference":  # its engine has no external expiry (a worker's window is told)
            raise ValueError("--workers needs a compiled or grid index, not 'reference'")
        self.window, self.space, self.index = window, space, index
        self.m, self.partitioner, self.processes, self.params = workers, partitioner, processes, params
        self.cluster: Any = None

    def start(self, head: list) -> None:
        """Plan from ``head`` (active subscriptions, object statistics) and start the workers."""
        from ..partition.registry import PLANNERS
        from ..partition.stats import Statistics
        from ..runtime.local import LocalCluster
        from ..runtime.runner import active_subs

        stats = Statistics.from_objects((ev for ev in head if isinstance(ev, Pub)), self.space)
        plan = PLANNERS[self.partitioner](active_subs(head), stats, self.m)
        self.cluster = LocalCluster(plan, self.window, self.space, index=self.index, processes=self.processes,
                                    rarity=dict(stats.keyword_freq), **self.params)

    def apply(self, events: list) -> list:
        if self.cluster is None:
            self.start(events)
        notes = _guarded(self.cluster.apply, events)
        self.cluster.batches.clear()  # per-batch load metrics: a long-running server keeps none
        return notes

    def query(self, ids: list) -> dict:
        """id -> (result ids, result object seqs) of the active kNN/top-k ones among ``ids``."""
        return _guarded(self.cluster.query, ids) if self.cluster is not None and ids else {}

    def results(self, sub_id: Any) -> list | None:
        got = self.query([sub_id]).get(sub_id)
        return got[0] if got is not None else None

    def all_results(self) -> list:
        return _guarded(self.cluster.results) if self.cluster is not None else []

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None
