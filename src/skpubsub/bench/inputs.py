"""The bench's workload in memory (``skpubsub bench``, ``bench partition``): the valid events
of a file or of a generated workload, its phases (the window's fill, the initial
subscriptions' build, the arrivals), the untimed warm-up stream and the baseline's prefix."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.config import Space, Window
from ..io.events import Pub, Rejection, Sub, Unsub
from ..io.lines import stream_lines
from ..io.validate import Gate

WARMUP_EVENTS = 2000  # events in the untimed warm-up run (half build, half arrivals)


def _valid(judged) -> tuple[list, int]:
    """The events among the Gate's verdicts, and how many were rejections."""
    events: list = []
    rejected = 0
    for ev in judged:
        if isinstance(ev, Rejection):
            rejected += 1
        else:
            events.append(ev)
    return events, rejected


def _load(path: str | Path, window: Window, space: Space) -> tuple[list, int]:
    """Valid events of a file, and the number of rejected lines."""
    gate = Gate(window, space)
    with open(path, "rb") as f:
        return _valid(gate.admit_line(raw, n) for n, raw in stream_lines(f))


def load_events(path: str | Path, window: Window, space: Space, max_events: int | None = None) -> list:
    """The valid events of an event file, in stream order (the first ``max_events``)."""
    events, _ = _load(path, window, space)
    return events[:max_events] if max_events else events


def generated_events(config: Any, window: Window, space: Space) -> tuple[list, int]:
    """The events of a :class:`~skpubsub.bench.workload.WorkloadConfig`, validated in memory."""
    from .workload import generate

    gate = Gate(window, space)
    return _valid(gate.admit(rec, seq) for seq, rec in enumerate(generate(config), start=1))


def phases(events: list) -> tuple[int, int]:
    """(fill, build): the objects that open the stream before its first subscription (the
    papers' shape, ``workload --fill-window``: the window filled first; 0 when the stream
    opens with subscriptions), and where the arrivals begin (the first pub after them and the
    subscriptions that follow them)."""
    fill = next((i for i, ev in enumerate(events) if not isinstance(ev, Pub)), len(events))
    if fill == len(events):
        fill = 0  # objects only: no registration to put them before
    build = next((i for i in range(fill, len(events)) if isinstance(events[i], Pub)), len(events))
    return fill, build


@dataclass
class Workload:
    """Validated events held in memory; ``build`` = the events before the arrivals (``phases``)."""

    events: list
    describe: dict[str, Any]  # the workload config (dataset flags) or the events file
    rejected: int = 0
    cut: int | None = None  # events dropped by --max-events
    build: int = field(init=False)

    def __post_init__(self) -> None:
        self.fill, self.build = phases(self.events)

    def counts(self) -> dict[str, int]:
        evs = self.events
        return {
            "events": len(evs),
            "build_events": self.build,
            "fill_objects": self.fill,
            "initial_subscriptions": sum(isinstance(e, Sub) for e in evs[: self.build]),
            "arrival_events": len(evs) - self.build,
            "objects": sum(isinstance(e, Pub) for e in evs),
            "subs_during_arrivals": sum(isinstance(e, Sub) for e in evs[self.build:]),
            "unsubs": sum(isinstance(e, Unsub) for e in evs),
            "rejected": self.rejected,
        }


def warmup_events(events: list, build: int, n: int = WARMUP_EVENTS) -> list:
    """A small valid prefix-like stream: up to ``n/2`` build events, then up to ``n/2``
    arrival events (so the publish kernels run even when the stream opens with many
    subscriptions; the papers' shape: up to ``n/4`` of its fill objects, then up to ``n/4``
    subscriptions); unsubs of subscriptions left out are dropped."""
    half = n // 2
    fill, _ = phases(events[:build])
    if fill:
        head = events[: min(fill, half // 2)] + events[fill: min(build, fill + half // 2)]
    else:
        head = events[: min(build, half)]
    active = {ev.id for ev in head if isinstance(ev, Sub)}
    for ev in head:
        if isinstance(ev, Unsub):
            active.discard(ev.id)
    out = list(head)
    for ev in events[build: build + half]:
        if isinstance(ev, Unsub):
            if ev.id not in active:
                continue
            active.discard(ev.id)
        elif isinstance(ev, Sub):
            active.add(ev.id)
        out.append(ev)
    return out


def warm_end(events: list, build: int, objects: int) -> int:
    """Where the arrivals are timed from: after the first ``objects`` objects past the build
    (the papers' O_init: the cold fill), or at the build's end."""
    if objects <= 0:
        return build
    seen = 0
    for i in range(build, len(events)):
        if isinstance(events[i], Pub):
            seen += 1
            if seen == objects:
                return i + 1
    return len(events)


def baseline_prefix(events: list, build: int, n: int | None) -> list | None:
    """The first ``n`` events for the baseline, or None when they are the whole stream.  The
    prefix keeps every build event, so the index the baseline is compared with is the same."""
    if n is None or n >= len(events):
        return None
    if n <= build:
        raise ValueError(f"--baseline-events {n} leaves the baseline no objects: the first {build} "
                         f"events are the initial subscriptions")
    return events[:n]


def load_workload(events: str | None, workload: Any, window: Window, space: Space,
                  max_events: int | None) -> "Workload":
    """Validated events of a bench run: from a file, or generated from a WorkloadConfig."""
    if events is not None:
        evs, rejected = _load(events, window, space)
        describe: dict[str, Any] = {"events_file": str(events)}
    else:
        print(f"generating {workload.subscriptions:,} subscriptions + {workload.objects:,} objects "
                  f"from {workload.dataset} ...", file=sys.stderr, flush=True)
        evs, rejected = generated_events(workload, window, space)
        describe = workload.to_dict()
    cut = None
    if max_events is not None and len(evs) > max_events:
        cut = len(evs) - max_events
        evs = evs[:max_events]
    return Workload(evs, describe, rejected, cut)
