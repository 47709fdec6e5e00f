"""Skype's prefix filter for top-k at posting time (index.prefix; cgrid ``prefix``).

Exactness on random streams is the conformance suite's (``dkm`` and ``aoiq`` run with the
filter on by default, ``dkm`` also with it off); here: the bounds are what the lemma
needs, tokens and classes line up between posting and probing, and on a real top-k
workload the filter examines fewer candidates with identical results.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skpubsub.bench.workload import WorkloadConfig, generate
from skpubsub.engine.engine import Engine
from skpubsub.index.prefix import (NC, SIZES, class_token, post_tokens, prefix_bounds, probe_classes, size_class,
                                   top_class)
from skpubsub.core.scoring import object_weight, text_sim, unit_weights
from skpubsub.testing.conformance import compare_counting, validate
from skpubsub.testing.streams import Stream
from skpubsub.testing.checks import SCALE  # SKPUBSUB_CONFORMANCE_SCALE: e.g. 4 for a soak run


def _bounds(weights, freq) -> np.ndarray:
    """rb as (keyword, class) for keyword ids 0..n-1 with these weights and frequencies."""
    n = len(weights)
    rb = np.zeros(n * NC)
    prefix_bounds(0, n, np.arange(n, dtype=np.int32), np.array(unit_weights(weights, n)),
                  np.array(freq, dtype=np.int64), rb)
    return rb.reshape(n, NC)


def test_classes_are_object_sizes() -> None:
    assert [size_class(n) for n in range(1, 11)] == [0, 1, 2, 2, 3, 3, 3, 4, 4, 4]
    assert list(SIZES) == [1, 2, 3, 5, 8]


def test_equal_weights_put_the_rare_keyword_first_and_big_objects_lower() -> None:
    rb = _bounds([1.0, 1.0, 1.0], [50, 2, 9])  # order: keyword 1 (rarest), 2, 0
    # class 0, first keyword: an object of exactly the three keywords reaches 1
    assert math.isclose(rb[1, 0], 1.0, rel_tol=1e-5)
    assert math.isclose(rb[2, 0], math.sqrt(2 / 3), rel_tol=1e-5)  # shares keywords 2 and 0 at most
    assert math.isclose(rb[0, 0], math.sqrt(1 / 3), rel_tol=1e-5)  # only the frequent one
    # objects of 5+ keywords weigh 1/sqrt(5) or less: (3 keywords/sqrt 3)/sqrt 5 for the first
    assert math.isclose(rb[1, 3], math.sqrt(3 / 5), rel_tol=1e-5)
    assert math.isclose(rb[0, 4], 1 / math.sqrt(3 * 8), rel_tol=1e-5)
    assert (np.diff(rb, axis=1) <= 0).all()  # never grows with the class


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0.01, 10.0), min_size=1, max_size=6), st.data())
def test_an_object_never_beats_its_bound(weights, data) -> None:
    """Lemma 3 / Theorem 1 in our terms: TSim <= the bound of the object's class and of its
    first shared keyword in the prefix order (the largest bound among those it shares)."""
    n = len(weights)
    freq = data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    rb = _bounds(weights, freq)
    ws = unit_weights(weights, n)
    shared = data.draw(st.sets(st.integers(0, n - 1), min_size=1))
    extra = data.draw(st.integers(0, 9))
    okw = {f"k{j}" for j in shared} | {f"x{j}" for j in range(extra)}
    tsim = text_sim([f"k{j}" for j in range(n)], ws, okw, object_weight(len(okw)))
    c = size_class(len(okw))
    assert tsim <= max(rb[j, c] for j in shared)
    if extra == 0 and len(shared) == n and len(set(weights)) == 1:  # tight for the whole keyword set
        assert tsim >= max(rb[j, c] for j in shared) * (1 - 1e-5)


def test_posting_and_probing_meet_exactly_where_the_score_is_reachable() -> None:
    """Posted under (w, top class); an object probes (w, c') for c' from its class up, so it
    meets the subscription iff its class may reach the score."""
    rb = _bounds([1.0, 1.0, 1.0], [50, 2, 9]).reshape(-1)
    kw_id = np.array([10, 11, 12], dtype=np.int32)
    alpha, kth = 0.5, -0.8  # the k-th score 0.8: text similarity >= 0.6 needed even at distance 0
    out = np.empty(3, dtype=np.int64)
    n = post_tokens(0, 3, kw_id, kth, alpha, rb, out)
    tops = [top_class(kth, alpha, rb, j * NC) for j in range(3)]
    assert tops[0] == -1 and n == 2  # the frequent keyword (bound 0.58) is past the prefix
    assert list(out[:n]) == [class_token(11, tops[1]), class_token(12, tops[2])]
    for size in range(1, 10):  # an object of `size` keywords, one of them 12
        okw = np.array([12] + list(range(100, 99 + size)), dtype=np.int64)
        probe = np.empty(NC * size, dtype=np.int64)
        m = probe_classes(okw, probe, 0)
        met = class_token(12, tops[2]) in set(probe[:m].tolist())
        assert met == (size_class(size) <= tops[2]), size


def _topk_stream(seed: int) -> Stream:
    n = int(500 * SCALE)
    cfg = WorkloadConfig(objects=n, subscriptions=n // 5, kind="topk", sub_rate=0.5, unsub_rate=0.5,
                         objects_per_step=10, seed=seed, limit=2 * n)
    events = list(generate(cfg))
    return Stream("count:300", None, events, [False] * len(events))


@pytest.mark.soak
def test_geonames_topk_workload_is_exact_and_examines_fewer_candidates() -> None:
    """Real places and keywords, churn, expiry: results equal the reference on every event,
    with fewer candidates than the same index without the filter (a quarter fewer here;
    over half on the larger workloads of the closing notes)."""
    s = _topk_stream(5)
    on = compare_counting([(s, 1)], "dkm", False, buffer="cskyband")  # structural checks at the end
    off = compare_counting([(s, 1)], "dkm", False, buffer="cskyband", prefix=False)
    assert on["affected"] == off["affected"] > 0
    assert on["candidates"] < 0.8 * off["candidates"]
    events, _ = validate(s.events, s.window, s.space)
    eng = Engine(s.window, index="dkm", buffer="cskyband")
    eng.apply(events)
    eng._check()
