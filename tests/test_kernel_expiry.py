"""Windowed streams inside the publish kernel: held objects leave their buffers there
(holders found through the index), short buffers are refilled there from the compiled
alive-object postings, and the rows of one event merge into one net change. Exact
against the reference engine, and the kernel really does the work (no hand-offs to
the plain path)."""

from __future__ import annotations


import numpy as np
import pytest

from skpubsub.bench.workload import WorkloadConfig, generate
from skpubsub.io.events import Pub
from skpubsub.store.objects import AliveStore, ObjectTable
from skpubsub.testing.conformance import compare_counting
from skpubsub.testing.streams import random_stream
from skpubsub.testing.checks import SCALE  # SKPUBSUB_CONFORMANCE_SCALE: e.g. 4 for a soak run


def _run(streams, **params) -> dict[str, int]:
    return compare_counting(streams, "dkm", **params)


@pytest.mark.parametrize("window", ["count", "time"])
def test_random_windowed_streams_expire_and_refill_in_the_kernel(window: str) -> None:
    stats = _run([(random_stream(seed, windows=(window,)), seed) for seed in range(int(30 * SCALE))])
    # thousands and hundreds here, else this proves nothing
    assert stats["expiry_removals"] > 200 and stats["refills"] > 50
    assert stats["expiry_stops"] == 0 and stats["expiry_misses"] == 0


@pytest.mark.soak
@pytest.mark.parametrize("kind,window", [("topk", "count:150"), ("knn", "time:20")])
def test_geonames_workload_stays_in_the_kernel(kind: str, window: str) -> None:
    """Real places, many subscriptions sharing keywords: one object sits in dozens of
    buffers, so a pub's expiry and arrival hit the same subscriptions (merged rows).
    The windows hold a quarter (count) or a third (time) of the objects: over 1000
    expiry removals and 100 refills each."""
    n = int(600 * SCALE)
    cfg = WorkloadConfig(objects=n, subscriptions=n // 6, kind=kind, match="mix" if kind == "knn" else "any",
                         sub_rate=0.5, unsub_rate=0.5, objects_per_step=10, seed=3, limit=2 * n)
    events = list(generate(cfg))

    class Once:  # compare wants streams; this one is fixed
        pass

    s = Once()
    s.events, s.window, s.space = events, window, None
    stats = _run([(s, 1)], check_every_event=False)
    assert stats["expiry_removals"] > 500 and stats["refills"] > 20
    assert stats["expiry_stops"] == 0 and stats["expiry_misses"] == 0


def test_alive_postings_follow_arrivals_expiries_and_reused_slots() -> None:
    """The lazy store against a set per keyword: objects come and go, slots are re-used
    (with new seqs), and sweeps run."""
    rng = np.random.default_rng(5)
    objs = ObjectTable()
    alive = AliveStore(objs)
    truth: dict[int, set[int]] = {w: set() for w in range(6)}
    live: list[int] = []
    for seq in range(40_000):
        if live and rng.random() < 0.5:
            o = live.pop(int(rng.integers(len(live))))
            kws = objs.keywords(o).tolist()
            objs.cols.alive[o] = False
            alive.remove(o, kws)
            for w in kws:
                truth[w].discard(o)
            objs.free(o)
        else:
            kws = sorted({int(w) for w in rng.integers(0, 6, size=int(rng.integers(1, 4)))})
            o = objs.add(Pub(seq, f"o{seq}", seq, 0.0, 0.0, ()), kws, float("inf"), alive=True)
            alive.add(o, kws)
            live.append(o)
            for w in kws:
                truth[w].add(o)
        if seq % 997 == 0:
            for w, want in truth.items():
                assert alive.posting(w).tolist() == sorted(want)
    assert alive.count == len(live)
    assert alive.store.entries <= 2 * alive.live + 65536  # sweeps keep the dead entries bounded


@pytest.mark.parametrize("index", ["dkm", "aoiq", "auto"])
def test_objects_due_before_subscriptions_leave_in_the_kernel(index: str) -> None:
    """Under a time window, the objects due before a subscription or an unsubscription
    leave in a kernel step of their own (``driver.Publisher.leave``), their notifications before
    the event's own and none for a subscription the event ends; exact against the reference
    engine, event by event and in random batches."""
    streams = [(random_stream(seed, n_events=(60, 150), windows=("time",)), seed) for seed in range(int(25 * SCALE))]
    stats = compare_counting(streams, index)
    assert stats["leave_steps"] > 100 and stats["refills"] > 100  # 456 and 1528 here
    assert stats["expiry_stops"] == 0 and stats["expiry_misses"] == 0
