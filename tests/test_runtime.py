"""The multi-worker runtime equals the reference engine: placement never changes results."""

from __future__ import annotations

import zlib

import pytest

from skpubsub.io.events import Rejection
from skpubsub.io.validate import Gate
from skpubsub.partition.common import AssignedPlan
from skpubsub.runtime.local import LocalCluster
from skpubsub.testing.reference import ReferenceEngine
from skpubsub.testing.streams import random_stream


def _crc(x) -> int:
    return zlib.crc32(repr(x).encode())


def hash_plan(m: int) -> AssignedPlan:
    return AssignedPlan(m, "crc", {}, {}, new_rule=lambda sub, p: ((_crc(sub.id) % m,), 1.0))


def replicated_plan(m: int) -> AssignedPlan:
    """Range subscriptions on two workers (as PS2Stream's space split does), others on one."""
    def rule(sub, p):
        w = _crc(sub.id) % m
        return ((w, (w + 1) % m) if sub.kind == "range" and m > 1 else (w,)), 1.0
    return AssignedPlan(m, "replicated", {}, {}, new_rule=rule)


def skewed_plan(m: int) -> AssignedPlan:
    """Everything on the last worker: the others see only Ticks and nothing else."""
    return AssignedPlan(m, "skewed", {}, {}, new_rule=lambda sub, p: ((m - 1,), 1.0))


def _events(seed: int, **kwargs):
    s = random_stream(seed, **kwargs)
    g = Gate(s.window, s.space)
    return s, [ev for i, r in enumerate(s.events, 1) if not isinstance(ev := g.admit(r, i), Rejection)]


def _check(s, events, plan, index: str, batch: int, processes: bool = False) -> list[dict]:
    """Notifications and results equal the reference engine's; returns the workers' stats."""
    ref = ReferenceEngine(s.window, s.space)
    with LocalCluster(plan, s.window, s.space, index=index, processes=processes) as cl:
        for i in range(0, len(events), batch):
            want = ref.apply(events[i:i + batch])
            got = cl.apply(events[i:i + batch])
            assert got == want, (s, i, want, got)
        assert cl.results() == ref.all_results(), s
        return cl.worker_stats()


@pytest.mark.parametrize("make_plan", [hash_plan, replicated_plan, skewed_plan])
@pytest.mark.parametrize("m", [1, 2, 3, 5])
@pytest.mark.parametrize("index", ["dkm", "grid"])
def test_random_streams_equal_the_reference(make_plan, m: int, index: str) -> None:
    for seed in range(25):
        s, events = _events(seed * 7 + m)
        _check(s, events, make_plan(m), index, batch=1 + seed % 9)


def test_dispatcher_counts_messages_and_replicas() -> None:
    s, events = _events(3)
    with LocalCluster(replicated_plan(3), s.window, s.space, processes=False) as cl:
        cl.apply(events)
        m = cl.dispatcher.metrics()
        assert m["messages"] >= m["messages_per_object"] * cl.dispatcher.objects
        assert cl.batches and cl.batches[0]["events"] == len(events)
        assert len(cl.batches[0]["worker_cpu_seconds"]) == 3


@pytest.mark.slow
def test_worker_processes_run_in_parallel_and_stay_exact() -> None:
    s, events = _events(11)
    _check(s, events, hash_plan(3), "dkm", batch=16, processes=True)


def _planned(name: str, events: list, space, m: int):
    from skpubsub.io.events import Pub
    from skpubsub.partition.registry import PLANNERS
    from skpubsub.partition.stats import Statistics
    from skpubsub.runtime.runner import active_subs

    head = events[: len(events) // 3]
    stats = Statistics.from_objects([e for e in head if isinstance(e, Pub)], space)
    return PLANNERS[name](active_subs(head), stats, m)


@pytest.mark.parametrize("name", ["hash", "kop", "sop", "dkm", "location", "keyword", "prefix", "ps2"])
def test_every_planner_stays_exact(name: str) -> None:
    from skpubsub.core.config import Space

    for m in (1, 2, 3, 5):
        for seed in range(8):
            s, events = _events(1000 + 10 * seed + m)
            plan = _planned(name, events, s.space or Space(), m)
            _check(s, events, plan, "dkm", batch=1 + seed % 5)


@pytest.mark.parametrize("make_plan", [hash_plan, skewed_plan])
def test_workers_leave_objects_due_before_subscriptions_in_the_kernel(make_plan) -> None:
    """Under a time window a worker told that objects leave before a subscription, an
    unsubscription or a tick does it in one kernel step (``driver.Publisher.leave``), exact
    against the reference engine."""
    steps = 0
    for seed in range(12):
        s, events = _events(5000 + seed, n_events=(80, 150), windows=("time",))
        steps += sum(w["leave_steps"] for w in _check(s, events, make_plan(3), "dkm", batch=1 + seed % 7))
    assert steps > 50
