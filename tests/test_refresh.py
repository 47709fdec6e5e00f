"""GI²'s least-frequent-keyword posting of `all` subscriptions, reviewed as the
keyword frequencies change (CompiledGrid.refresh): exact, and it does re-post."""

from __future__ import annotations

from skpubsub.testing.conformance import compare, engine_factory
from skpubsub.testing.streams import random_stream
from skpubsub.testing.checks import SCALE  # SKPUBSUB_CONFORMANCE_SCALE: e.g. 4 for a soak run


def test_reviewed_all_postings_stay_exact_and_do_move() -> None:
    moved = 0
    for seed in range(int(60 * SCALE)):
        s = random_stream(seed, n_events=(40, 160))
        made = []

        def make(window, space):
            e = engine_factory("dkm", refresh_from=1)(window, space)
            made.append(e)
            return e

        compare(s.events, s.window, s.space, make, batches=seed % 2 == 0, batch_seed=seed)
        moved += sum(e.index.refreshed for e in made)
    assert moved > 8  # 18 here: the review really re-posts (else this test proves nothing)
