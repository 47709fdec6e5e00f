"""The publish kernel's candidate tests (kernel.publish_run): the spatial test (range box,
kNN ball) runs before the keyword test (``match: all``, foreign slots), and both must pass
whichever fails first. Exact against the reference engine on real places, where many
candidates near an object lack one of a subscription's keywords and many carrying them
all are out of its ball."""

from __future__ import annotations

import pytest

from skpubsub.bench.workload import WorkloadConfig, generate
from skpubsub.testing.conformance import compare_counting


class _Fixed:  # compare wants streams; this one is fixed
    def __init__(self, events, window):
        self.events, self.window, self.space = events, window, None


# kind "mix" holds kNN balls, range boxes (and top-k); match "mix" holds `all` and `any`.
@pytest.mark.parametrize("kind,match,index", [("mix", "all", "auto"), ("knn", "mix", "dkm"), ("mix", "mix", "auto")])
def test_candidates_rejected_by_place_or_keywords_as_the_reference(kind, match, index):
    cfg = WorkloadConfig(objects=300, subscriptions=250, kind=kind, match=match, sub_rate=2.0, unsub_rate=0.5,
                         objects_per_step=20, seed=5, limit=3000, sub_keywords=3)
    stats = compare_counting([(_Fixed(list(generate(cfg)), "count:250"), 2)], index, check_every_event=False)
    # rejections happened: over 1800 candidates here are no match, 4000+ are
    assert stats["affected"] > 2000 and stats["candidates"] - stats["affected"] > 1000
