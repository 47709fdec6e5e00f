"""Runtime messages: what the dispatcher sends a worker engine besides input events.

None of these is ever read from input; the runtime makes them (the dispatcher in
``runtime/dispatcher.py``, migrations in ``runtime/local.py``, the Spark sequencer's
final ``Tick``) and ``Engine.apply_routed`` applies them in stream order between
the events routed to the worker.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..io.events import Id, Pub, Sub, Time


@dataclass(frozen=True, slots=True)
class Tick:
    """Brings a worker to time ``t`` (the expiries due there) when the event at stream
    position ``seq`` was not routed to it."""

    seq: int
    t: Time


@dataclass(frozen=True, slots=True)
class Backfill:
    """An alive object a worker lacked, handed over before a new subscription there
    needs it; joins the worker's window without being matched."""

    pub: Pub


@dataclass(frozen=True, slots=True)
class Drop:
    """Subscription ``id`` leaves this worker (migrated away); silent."""

    id: Id


@dataclass(frozen=True, slots=True)
class Adopt:
    """A migrated subscription joins this worker, silently, with the results it had:
    recomputed from the alive objects under a retaining window (which the dispatcher
    backfilled), else rebuilt from ``held``, the objects of its result. ``now``: the
    stream's time (expiries due by then happen first, as for any event)."""

    sub: Sub
    held: tuple[Pub, ...] = ()
    now: Time | None = None


@dataclass(frozen=True, slots=True)
class Export:
    """The Spark runtime's migration under ``none``: the worker writes the result objects
    of subscriptions ``ids`` (still its own) as data, named by ``tag``, for the worker that
    adopts them in the next micro-batch; the ``Drop``s follow. Never sent to an engine."""

    ids: tuple[Id, ...]
    tag: int
