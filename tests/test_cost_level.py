"""nodecost.cost_level takes every level's box from the finest level's by shifts: the same
levels and boxes as the level-by-level computation (``_cost_level_plain``), on random
regions (inside, across and outside the space, tiny and huge) and object counts."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from skpubsub.index.cells import best_level, box_at
from skpubsub.index.nodecost import (_cost_level_plain, cost_level, count_objects, finest_cells, new_counts, not_finer,
                                     plain_cells)

GEO = np.array([-180.0, -90.0, 360.0, 180.0, 400.0])
_rng = np.random.default_rng(3)
COUNTS = new_counts(14)
count_objects(COUNTS, _rng.normal(10.0, 20.0, 5000), _rng.normal(40.0, 10.0, 5000), GEO)

coord = st.one_of(st.floats(-400.0, 400.0), st.sampled_from([-180.0, 180.0, -90.0, 90.0, 0.0, 1e300, -1e300]))


@settings(max_examples=1000, deadline=None)
@given(coord, coord, st.floats(0.0, 200.0), st.floats(0.0, 200.0), st.sampled_from([1, 4, 9, 16]),
       st.sampled_from([0.0, 1e-6, 1e-4, 1e-2]), st.floats(1e-6, 1.0), st.integers(1, 3), st.sampled_from([0, 1024, 10**9]))
def test_shifted_levels_are_the_plain_ones(x, y, w, h, max_cells, theta, ptext, ln, warm) -> None:
    ext = np.array([x, y, x + w, y + h])
    a, b = np.empty(4, dtype=np.int64), np.empty(4, dtype=np.int64)
    for lmax in (0, 3, 14):
        counts = COUNTS if lmax == 14 else new_counts(lmax)
        la = cost_level(ext, GEO, lmax, max_cells, counts, theta, warm, ptext, ln, a)
        lb = _cost_level_plain(ext, GEO, lmax, max_cells, counts, theta, warm, ptext, ln, b)
        assert la == lb and (a == b).all(), (lmax, la, lb, a, b)


def test_nan_and_infinite_regions_take_the_plain_path() -> None:
    a, b = np.empty(4, dtype=np.int64), np.empty(4, dtype=np.int64)
    for ext in ([np.nan, 0.0, 1.0, 1.0], [-np.inf, -np.inf, np.inf, np.inf]):
        e = np.array(ext)
        assert cost_level(e, GEO, 14, 4, COUNTS, 1e-4, 0, 0.1, 1, a) == \
            _cost_level_plain(e, GEO, 14, 4, COUNTS, 1e-4, 0, 0.1, 1, b) and (a == b).all()


@settings(max_examples=800, deadline=None)
@given(coord, coord, st.floats(0.0, 200.0), st.floats(0.0, 200.0), st.sampled_from([1, 4, 9, 16]),
       st.sampled_from([0.0, 1e-6, 1e-4, 1e-2]), st.floats(1e-6, 1.0), st.integers(1, 3))
def test_not_finer_is_the_plain_bound(x, y, w, h, max_cells, theta, ptext, ln) -> None:
    """kernel._follow tightens a region in place without asking the cost model when
    ``not_finer(cur)``: that must mean neither rule posts it finer than ``cur`` (and, for the
    plain rule, exactly that); the boxes by shifts are ``box_at``'s and ``plain_cells`` is
    ``best_level``."""
    ext = np.array([x, y, x + w, y + h])
    a, b = np.empty(4, dtype=np.int64), np.empty(4, dtype=np.int64)
    for lmax in (0, 3, 14):
        counts = COUNTS if lmax == 14 else new_counts(lmax)
        ok, a0, b0, a1, b1 = finest_cells(ext, GEO, lmax)
        if not ok:
            continue
        plain = best_level(ext, GEO, lmax, max_cells, b)
        assert plain_cells(a0, b0, a1, b1, lmax, max_cells, a) == plain and (a == b).all()
        model = cost_level(ext, GEO, lmax, max_cells, counts, theta, 0, ptext, ln, a)
        for level in range(lmax + 1):
            box_at(level, ext, GEO, b)
            d = lmax - level
            assert [a0 >> d, b0 >> d, a1 >> d, b1 >> d] == list(b)
            nf = not_finer(level, a0, b0, a1, b1, lmax, max_cells)
            assert nf == (plain <= level), (lmax, level, plain)
            if nf:
                assert model <= level
