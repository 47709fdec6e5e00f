"""Columnar tables: struct-of-arrays and one-record-per-slot layouts behave the same."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from skpubsub.core.columns import LINE, Columns, grown_records, records

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
