"""Issue 18, class 7: cost attacks. A top-k subscription with 20,000 keywords registered in
7 s on dkm (60,000: 53 s): ``prefix.prefix_bounds`` was quadratic in the keyword count."""

from __future__ import annotations

import math
import random
import time

import numpy as np
import pytest

from skpubsub.core.scoring import unit_weights
from skpubsub.index.prefix import EXACT_SPAN, NC, SIZES, SLACK, prefix_bounds, prefix_order
from skpubsub.io.validate import Gate
from skpubsub.runtime.engines import make_engine
from skpubsub.testing.conformance import compare, engine_factory


def _exact(ws: list[float], freq: list[int]) -> tuple[list[int], np.ndarray]:
    """The definition, by brute force: the order, then per (keyword, class) the max over t of
    (the t heaviest weights from it on) / sqrt(max(t, SIZES[c]))."""
    order = sorted(range(len(ws)), key=lambda j: (-ws[j], freq[j], j))
    rb = np.zeros(len(ws) * NC)
    for p, j in enumerate(order):
        rest = [ws[q] for q in order[p:]]
        for c in range(NC):
            rb[j * NC + c] = max(sum(rest[:t]) / math.sqrt(max(t, SIZES[c])) for t in range(1, len(rest) + 1))
    return order, rb


def _run(ws: list[float], freq: list[int]) -> tuple[list[int], np.ndarray]:
    n = len(ws)
    kw_id = np.arange(n, dtype=np.int64)
    kw_ws = np.array(ws, dtype=np.float64)
    rb = np.zeros(n * NC, dtype=np.float64)
    prefix_bounds(0, n, kw_id, kw_ws, np.array(freq, dtype=np.int64), rb)
    return prefix_order(0, n, kw_id, kw_ws, np.array(freq, dtype=np.int64)).tolist(), rb


@pytest.mark.parametrize("n", [1, 2, 7, EXACT_SPAN, EXACT_SPAN + 1, 150])
def test_prefix_bounds_are_exact_or_safe(n: int) -> None:
    """Up to EXACT_SPAN keywords: the bounds of the definition (widened by SLACK), as before;
    longer: never below them (a bound may only let more candidates through)."""
    rnd = random.Random(n)
    for trial in range(4):
        raw = [rnd.choice([1.0, 2.0, rnd.random() + 0.01]) for _ in range(n)]
        if trial == 3:
            raw = [1.0] * n  # equal weights: Cauchy-Schwarz is tight
        ws = list(unit_weights(raw, n))
        freq = [rnd.randrange(3) for _ in range(n)]
        order, rb = _run(ws, freq)
        want_order, want = _exact(ws, freq)
        assert order == want_order
        widened = want * (1.0 + SLACK) + SLACK
        if n <= EXACT_SPAN:
            np.testing.assert_allclose(rb, widened, rtol=1e-12, atol=0)
        else:
            assert np.all(rb >= widened * (1 - 1e-12))
            if trial == 3:
                np.testing.assert_allclose(rb, widened, rtol=1e-9)


def _big_sub(n: int, t: int, sid: str = "s") -> dict:
    return {"op": "sub", "t": t, "id": sid, "kind": "topk", "k": 5, "x": 0, "y": 0, "alpha": 0.3,
            "keywords": [f"w{i}" for i in range(n)]}


def test_twenty_thousand_keywords_register_fast_on_dkm() -> None:
    """Registration near-linear in the keywords: 20,000 in well under 2 s (was 7 s); the
    results are the reference's."""
    g = Gate("count:100")
    pubs = [g.admit({"op": "pub", "t": i, "id": f"o{i}", "x": i % 50, "y": i % 30,
                     "keywords": [f"w{i}", f"w{i + 1}", "common"]}) for i in range(200)]
    warm = g.admit(_big_sub(EXACT_SPAN + 10, 300, "warm"))  # compiles every kernel first
    big = g.admit(_big_sub(20_000, 300))
    after = g.admit({"op": "pub", "t": 301, "id": "x", "x": 1, "y": 1, "keywords": ["w3", "zz"]})
    eng, ref = make_engine("dkm", "count:100"), make_engine("reference", "count:100")
    for e in (eng, ref):
        e.apply(pubs)
        e.apply([warm])
    start = time.perf_counter()
    eng.apply([big])
    took = time.perf_counter() - start
    assert took < 2.0, f"registering 20,000 keywords took {took:.2f} s"
    ref.apply([big])
    assert eng.apply([after]) == ref.apply([after])
    assert eng.all_results() == ref.all_results()


@pytest.mark.parametrize("index", ["dkm", "gi2", "aoiq"])
def test_long_subscriptions_match_reference(index: str) -> None:
    """Subscriptions longer than EXACT_SPAN (their bounds take the Cauchy-Schwarz tail),
    with weights, against the reference under every window."""
    rnd = random.Random(7)
    vocab = [f"k{i}" for i in range(120)]
    for window in ("none", "count:6", "time:5"):
        evs: list[dict] = []
        t = 0
        for i in range(60):
            t += rnd.choice([0, 1])
            if i % 12 == 0:
                kws = rnd.sample(vocab, rnd.randrange(EXACT_SPAN + 1, 110))
                w = {k: rnd.choice([1.0, 2.0, 0.5]) for k in kws[: len(kws) // 2]}
                evs.append({"op": "sub", "t": t, "id": f"s{i}", "kind": "topk", "k": rnd.randrange(1, 4),
                            "x": rnd.uniform(-9, 9), "y": rnd.uniform(-9, 9), "alpha": rnd.choice([0.0, 0.2, 0.9]),
                            "keywords": kws, "weights": w})
            else:
                evs.append({"op": "pub", "t": t, "id": f"o{i}", "x": rnd.uniform(-9, 9), "y": rnd.uniform(-9, 9),
                            "keywords": rnd.sample(vocab, rnd.randrange(1, 10))})
        compare(evs, window, None, engine_factory(index))
