"""Columnar tables: struct-of-arrays and one-record-per-slot layouts behave the same."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skpubsub.core.columns import FEW, LINE, Columns, SegmentPool, grown_records, record_struct, records
from skpubsub.store.subscriptions import REC_SIZE, SubTable

SPEC = {"active": (np.bool_, False), "n": (np.int32, 7), "x": (np.float64, math.inf),
        "box": ("(4,)i4", -1), "seq": (np.int64, -1)}


@pytest.mark.parametrize("record", [False, True])
def test_columns_grow_free_and_pickle(record):
    t = Columns(SPEC, capacity=4, record=record)
    slots = [t.add() for _ in range(11)]  # grows 4 -> 8 -> 16
    assert slots == list(range(11)) and t.capacity == 16
    for s in slots:
        t.x[s] = s / 2
        t.box[s] = [s, s + 1, s + 2, s + 3]
        t.active[s] = True
    t.free(3)
    assert t.x[3] == math.inf and t.n[3] == 7 and not t.active[3] and list(t.box[3]) == [-1] * 4
    assert t.add() == 3  # the free list first
    assert t.x[12] == math.inf and t.seq[15] == -1  # spare room at the fill values
    u = pickle.loads(pickle.dumps(t))
    assert u.capacity == 16 and u.top == 11
    for name in SPEC:
        np.testing.assert_array_equal(getattr(u, name), getattr(t, name))
    assert u.record == record
    if record:  # the columns are views of one record array, which grew in place of the old
        assert t.x.base is not None and t.x.strides == (t._rec.dtype.itemsize,)
        t._rec["x"][5] = -1.0
        assert t.x[5] == -1.0
        assert u._rec.ctypes.data % LINE == 0
        assert t.nbytes == t._rec.nbytes
    u.add()
    assert u.top == 12 and u.n[11] == 7


def test_records_align_to_cache_lines():
    r = records(100, [("a", np.int8), ("b", np.float64), ("c", "(4,)i4")])
    assert r.ctypes.data % LINE == 0 and r.dtype.itemsize == 32  # small: not padded to a line
    r = records(100, [(f"f{i}", np.float64) for i in range(9)])
    assert r.dtype.itemsize == 2 * LINE and r.ctypes.data % LINE == 0
    assert (r["f8"] == 0).all()


def test_grown_records_copy_and_fill():
    fields = [("a", np.int64, -1), ("box", "(4,)i4", 7)]
    r = grown_records(None, 3, fields)
    assert (r["a"] == -1).all() and (r["box"] == 7).all()
    r["a"] = [1, 2, 3]
    g = grown_records(r, 5, fields)
    assert list(g["a"]) == [1, 2, 3, -1, -1] and (g["box"][3:] == 7).all()
    assert g.ctypes.data % LINE == 0 and g.dtype == r.dtype


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.one_of(st.lists(st.integers(1, 4), min_size=1, max_size=12).map(lambda ns: ("alloc", ns)),
                              st.lists(st.integers(1, 4), min_size=FEW + 1,
                                       max_size=FEW + 30).map(lambda ns: ("alloc", ns)),
                              st.lists(st.integers(0, 200), max_size=40).map(lambda picks: ("free", picks))),
                    max_size=25))
def test_segment_pool_runs_equal_one_at_a_time(ops) -> None:
    """``alloc_many`` and ``release_many`` hand out and take back exactly what ``alloc``
    and ``release`` one segment at a time do (freed segments reused in the same order),
    short runs (up to ``FEW``, one by one) and long ones (by arrays) alike."""
    many, one = SegmentPool({"id": np.int32}, capacity=8), SegmentPool({"id": np.int32}, capacity=8)
    held: list[tuple[int, int]] = []
    for op, arg in ops:
        if op == "alloc":
            got = many.alloc_many(np.asarray(arg, dtype=np.int64)).tolist()
            assert got == [one.alloc(n) for n in arg]
            held += zip(got, arg)
        else:
            gone = list(dict.fromkeys(held[p % len(held)] for p in arg)) if held else []
            held = [h for h in held if h not in gone]
            many.release_many(np.array([o for o, _ in gone], dtype=np.int64), np.array([n for _, n in gone], dtype=np.int64))
            for o, n in gone:
                one.release(o, n)
        assert many.top == one.top and many.used == one.used and dict(many._free) == dict(one._free)
        many._check([o for o, _ in held], [n for _, n in held])


def test_records_leave_numpys_huge_page_switch_as_it_was():
    """``columns.records`` allocates under ``small_pages`` (no madvise for huge pages) and
    puts NumPy's process-wide switch back as it found it, on or off, even on an error."""
    from skpubsub.core import columns as C

    was = C._get_madvise_hugepage()
    try:
        for on in (True, False):
            C._set_madvise_hugepage(on)
            rec = C.records(1 << 17, [("a", np.int64), ("b", np.float64)])
            assert len(rec) == 1 << 17 and C._get_madvise_hugepage() == on
            with C.small_pages():
                assert not C._get_madvise_hugepage()
            assert C._get_madvise_hugepage() == on
            try:
                with C.small_pages():
                    raise KeyError
            except KeyError:
                pass
            assert C._get_madvise_hugepage() == on
    finally:
        C._set_madvise_hugepage(was)


_BY_CODE = {"b1": st.booleans(), "i1": st.integers(-128, 127), "i4": st.integers(-2**31, 2**31 - 1),
            "i8": st.integers(-2**63, 2**63 - 1),
            "f8": st.one_of(st.floats(allow_nan=False), st.integers(-2**53, 2**53))}  # ints as JSON gives them
_REC = SubTable(1.0, "kmax").cols._rec.dtype


@settings(max_examples=300, deadline=None)
@given(vals=st.tuples(*[_BY_CODE[_REC.fields[name][0].str[1:]] for name in _REC.names]))
def test_a_packed_record_is_the_record_numpy_writes(vals) -> None:
    """``SubTable.claim`` writes a record as ``record_struct``'s bytes: they must be exactly
    what ``rec[s] = values`` stores, padding included (fails with a field's code or offset
    off by one)."""
    c = SubTable(1.0, "kmax").cols
    rec = c._rec
    assert rec.dtype.itemsize == REC_SIZE
    expect = np.zeros(1, dtype=rec.dtype)
    expect[0] = vals
    c._bytes[REC_SIZE:2 * REC_SIZE] = c._pack(*vals)
    assert rec[1:2].tobytes() == expect.tobytes()
    assert record_struct(np.dtype([("a", np.float32)])) is None  # not a packable field: plain writes
