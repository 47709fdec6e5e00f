"""Large tables grow in place (``columns._in_span``): the same rows, the same fill, older
views still valid, and engines whose every table grows so equal the reference engine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skpubsub.core import columns
from skpubsub.core.columns import SPAN_FROM, SegmentPool, grown, grown_records
from skpubsub.testing.conformance import compare, engine_factory
from skpubsub.testing.streams import WINDOW_KINDS, random_stream

pytestmark = pytest.mark.skipif(not columns._NORESERVE, reason="spans are made on Linux only")

BIG = SPAN_FROM // 8  # int64 items of an array that grows in a span


def test_grown_keeps_the_rows_and_the_old_view():
    a = grown(np.arange(BIG // 2, dtype=np.int64), BIG, -1)  # past SPAN_FROM: into a span (a copy, once)
    assert a.base is not None and (a[: BIG // 2] == np.arange(BIG // 2)).all() and (a[BIG // 2:] == -1).all()
    b = grown(a, 3 * BIG, -1)  # in place: the same memory, longer
    assert b.ctypes.data == a.ctypes.data and len(b) == 3 * BIG
    assert (b[:BIG // 2] == np.arange(BIG // 2)).all() and (b[BIG // 2:] == -1).all()
    b[7] = 70
    assert a[7] == 70  # the old array is a view of the first rows, still valid
    z = grown(grown(np.ones(BIG, dtype=np.float64), 2 * BIG, 0.0), 4 * BIG, 0.0)
    assert z[:BIG].sum() == BIG and not z[BIG:].any()  # zero fill: the span's fresh pages


def test_a_view_of_part_of_a_table_is_copied():
    """Only the latest whole array of a span grows in place: a table cut short (or an older
    view) is copied, so the rows past it, the table's own, are never overwritten."""
    a = grown(np.arange(BIG, dtype=np.int64), 2 * BIG, 5)
    part = grown(a[:BIG], 2 * BIG, -1)
    assert part.ctypes.data != a.ctypes.data and (a[BIG:] == 5).all() and (part[BIG:] == -1).all()
    b = grown(a, 4 * BIG, 5)  # a is still the latest: in place
    old = grown(a, 8 * BIG, 9)  # a is no longer the latest (b is): a copy
    assert b.ctypes.data == a.ctypes.data != old.ctypes.data
    assert (b[2 * BIG:] == 5).all() and (old[:2 * BIG] == a).all() and (old[2 * BIG:] == 9).all()


def test_grown_records_in_place():
    fields = [("a", np.int64, -1), ("box", "(4,)i4", 7), ("f", np.float64, 0.0)]
    n = SPAN_FROM // 32  # 32-byte records
    r = grown_records(grown_records(None, 4, fields), n, fields)
    r["a"][:4] = [1, 2, 3, 4]
    g = grown_records(r, 2 * n, fields)
    assert g.ctypes.data == r.ctypes.data and g.dtype == r.dtype and g.ctypes.data % columns.LINE == 0
    assert list(g["a"][:5]) == [1, 2, 3, 4, -1] and (g["a"][n:] == -1).all() and (g["box"][n:] == 7).all()
    assert not g["f"].any()


def test_segment_pool_grows_in_a_span():
    pool = SegmentPool({"id": np.int32, "w": np.float64}, capacity=SPAN_FROM // 8)
    offs = pool.alloc_many(np.full(2000, SPAN_FROM // 8 // 1000, dtype=np.int64))  # past capacity: grows
    pool.id[offs] = np.arange(2000)
    before = pool.id.ctypes.data
    pool.alloc_many(np.full(4000, SPAN_FROM // 8 // 1000, dtype=np.int64))
    assert pool.id.ctypes.data == before and (pool.id[offs] == np.arange(2000)).all()


@pytest.mark.parametrize("index", ["auto", "aoiq", "igpt", "gi2"])
@pytest.mark.parametrize("window_kind", WINDOW_KINDS)
def test_engines_with_every_table_in_a_span_match_the_reference(index, window_kind, monkeypatch):
    """Every table that grows does so in place (``SPAN_FROM`` 1 byte): the engine's results
    and notifications are the reference engine's, event by event and in batches."""
    monkeypatch.setattr(columns, "SPAN_FROM", 1)
    made = []
    real = columns._Span

    class Counted(real):
        def __init__(self, *a, **k):
            made.append(1)

    monkeypatch.setattr(columns, "_Span", Counted)
    for seed in range(4):
        s = random_stream(700_000 + seed, windows=(window_kind,))
        compare(s.events, s.window, s.space, engine_factory(index), batch_seed=seed, check_every_event=seed == 0)
    assert made  # the streams did grow tables in spans


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 40), st.sampled_from([0, -1, 7]), st.integers(0, 2**31)),
                      min_size=1, max_size=12),
       records=st.booleans())
def test_growth_in_spans_equals_copies(steps, records):
    """A run of growths (each by 0..40 rows, fill 0, -1 or 7, a row written between them)
    through spans (``SPAN_FROM`` 1) gives the arrays that copies give."""
    old = columns.SPAN_FROM
    try:
        out = []
        for span_from in (1, 1 << 62):
            columns.SPAN_FROM = span_from
            fields = [("a", np.int64, -1), ("b", np.int32, 7), ("c", np.float64, 0.0)]
            a = grown_records(None, 2, fields) if records else np.zeros(2, dtype=np.int64)
            for more, fill, v in steps:
                n = len(a) + more
                a = grown_records(a, n, fields) if records else grown(a, n, fill)
                if n:
                    (a["a"] if records else a)[v % n] = v
            out.append(a.copy())
        assert out[0].dtype == out[1].dtype and np.array_equal(out[0], out[1])
    finally:
        columns.SPAN_FROM = old
