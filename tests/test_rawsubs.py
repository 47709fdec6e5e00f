"""Subscription lines read from their bytes (``io.rawsubs``): the coded Gate's blocks that
``scan`` reads give the events and rejections the plain Gate and ``admit_line`` give, and
its numbers are msgspec's, bit for bit."""

from __future__ import annotations

import math
from itertools import product
import pickle
import struct

import msgspec
import numpy as np
from hypothesis import given, settings, strategies as st

from skpubsub.io import rawsubs
from skpubsub.io.events import Rects, SubBlock, events_of
from skpubsub.io.validate import Gate

NUMBER = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64).map(repr),
    st.floats(-200, 200, allow_nan=False).map(lambda v: "%.5f" % v),
    st.integers(-2**63, 2**63).map(str),
    st.from_regex(r"-?(0|[1-9][0-9]{0,19})(\.[0-9]{1,19})?([eE][+-]?[0-9]{1,3})?", fullmatch=True),
    st.sampled_from(["-0", "-0.0", "0e400", "-0e-5", "1e400", "1e-400", "9007199254740993", "1.4245700000000001",
                     "01", "1.", ".5", "+1", "-", "1e", "0x10", "1_0", "NaN"]),
)


def _bits(v: float) -> bytes:
    return struct.pack("<d", v)


@settings(max_examples=400, deadline=None)
@given(st.lists(NUMBER, min_size=4, max_size=4))
def test_numbers_are_msgspecs_bit_for_bit(tokens) -> None:
    """A rectangle's four numbers as ``scan_block`` reads them (the exact fast path or the
    slow token) are the floats msgspec decodes, signs of zero included; a token msgspec
    refuses (not JSON, out of range) leaves the block to the usual way."""
    line = ('{"op":"sub","id":"a","t":0,"kind":"range","rect":[%s],"keywords":["a"]}' % ",".join(tokens)).encode()
    try:
        want = msgspec.json.decode(b"[" + ",".join(tokens).encode() + b"]", type=tuple[float, float, float, float])
    except msgspec.MsgspecError:
        want = None
    got = rawsubs.scan_block(line, 1)
    if want is None:
        assert got is None
        return
    assert got is not None
    assert [_bits(v) for v in got.floats[0, rawsubs.X1:rawsubs.Y2 + 1].tolist()] == [_bits(v) for v in want]


@settings(max_examples=300, deadline=None)
@given(st.lists(NUMBER, min_size=1, max_size=1))
def test_times_keep_their_type(tokens) -> None:
    """``t`` as msgspec's ``int | float`` gives it: an integer stays an int (Python's, exact),
    a decimal is a float; a time the fast path does not read exactly sends the block on."""
    line = ('{"op":"sub","id":"a","t":%s,"kind":"knn","x":0,"y":0,"k":1,"keywords":["a"]}' % tokens[0]).encode()
    got = rawsubs.scan_block(line, 1)
    try:
        want = msgspec.json.decode(tokens[0].encode(), type=int | float)
    except msgspec.MsgspecError:
        assert got is None
        return
    if got is None:  # (a number it does not read: allowed, never a wrong one)
        return
    floated = bool(got.ints[0, rawsubs.T_FLOAT])
    assert floated == isinstance(want, float)
    v = got.floats[0, rawsubs.T] if floated else got.ints[0, rawsubs.T_INT]
    assert (_bits(v) == _bits(want)) if floated else int(v) == want


KEYS_RANGE = ['"op":"sub"', '"id":%(id)s', '"t":%(t)s', '"kind":"range"', '"rect":[%(rect)s]', '"keywords":%(kw)s']
KEYS_KNN = ['"op":"sub"', '"id":%(id)s', '"t":%(t)s', '"kind":"knn"', '"x":%(x)s', '"y":%(y)s', '"k":%(k)s',
            '"keywords":%(kw)s']
ODD_FIELDS = ['"match":"all"', '"match":"any"', '"match":"some"', '"match":null', '"expires":1e9', '"text":"a b"',
              '"x":1', '"alpha":0.5', '"op":"sub"', '"id":"s99"', '"colour":"red"', '"\\u006fp":"sub"',
              '"kind":"topk"', '"keywords":["z"]']


def _values(t: int, i: int) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Line ``i``'s plain value of each field at time ``t``, and the odd ones it may have instead."""
    plain = {"id": '"s%d"' % i, "t": str(t), "rect": "0,-1.5,1,2.5e0", "x": "1.25", "y": "-3", "k": str(1 + i % 9),
             "kw": '["a","w%d"]' % (i % 3)}
    odd = {
        "id": ['"\\u00e9%d"' % i, '"s\\u0031%d"' % i, str(i), '"s\\\"%d"' % i, '"a\\tb%d"' % i, '"\\u00e9\\ud800"',
               '"s%d"' % (i - 1), '""', '"\xe9%d"' % i],
        "t": ["%d.0" % t, "%de0" % t, "1e400", str(t - 1), "%d.000000000000000001" % t, "-0", "%d" % (t + 1)],
        "rect": ["0,0,1,1", "-1.5,2.25,-1.25e0,3", "1.4245700000000001,-0,2,-0.0", "2,0,1,1", "0,1,1,0", "0,0,1",
                 "0,0,1,1,2", '0,0,"1",1', "0, 0 ,1\t,1", "1e400,0,1,1", "-1e400,0,1,1", "0,0,0,0"],
        "x": ["0", "-12.5", "179.99999999999997", "200", "-0.0", "1e2", "-180.0000000000001", "180", "-180"],
        "y": ["45.25", "-90", "91", "90.00000000000001", "90"],
        "k": ["1000", "1001", "0", "2.0", "-3", "99999999999999999999", "1e1"],
        "kw": ['["a"]', '[ "x" , "\\u00fc" ]', '["A"]', '[]', '["a","a"]', '"a"', '["a",1]', '["b c"]',
               '["\\u0061","a"]'],
    }
    return plain, odd


def _mostly(draw, plain: str, odd: list[str], wild: bool | str, field: str) -> str:
    """``plain``; one of ``odd`` instead when ``wild`` is ``field``, or one time in five when
    it is True."""
    return draw(st.sampled_from(odd)) if wild == field or wild is True and not draw(st.integers(0, 4)) else plain


@st.composite
def _line(draw, kind: str, t: int, i: int, wild: bool | str) -> str:
    """A subscription line of ``kind`` at time ``t``, its keys in any order with any JSON
    white space, each value mostly plain and sometimes not (an id with an escape, a number
    id, a decimal or huge ``k``, a point outside the space, a rectangle out of order, a key
    twice, an unknown key, a field missing)."""
    plain, odd = _values(t, i)
    vals = {f: _mostly(draw, plain[f], odd[f], wild, f) for f in plain}
    fields = [f % vals for f in (KEYS_RANGE if kind == "range" else KEYS_KNN)]
    if wild == "extra" or wild is True and draw(st.integers(0, 4)) == 0:
        fields.insert(draw(st.integers(0, len(fields))), draw(st.sampled_from(ODD_FIELDS)))
    if wild == "missing" or wild is True and draw(st.integers(0, 9)) == 0:
        del fields[draw(st.integers(0, len(fields) - 1))]
    fields = draw(st.permutations(fields)) if draw(st.booleans()) else fields
    gap = draw(st.sampled_from(["", "", " ", "\t", " \r "]))
    return "{" + gap + ("," + gap).join(f.replace(":", gap + ":" + gap, 1) for f in fields) + gap + "}" + gap


@st.composite
def _blocks(draw) -> list[list[str]]:
    out, t = [], 0
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["range", "knn"]))
        n = draw(st.integers(1, 12))
        step = draw(st.integers(0, 1))
        wild = draw(st.sampled_from(["none", "one", "all"]))  # lines with odd values: none, one, any
        odd = draw(st.integers(0, n - 1))
        field = draw(st.sampled_from(["id", "t", "rect", "x", "y", "k", "kw", "extra", "missing"]))
        lines = [draw(_line(kind, t + i * step, len(out) * 100 + i,
                            wild == "all" or (wild == "one" and i == odd and field))) for i in range(n)]
        t += n * step
        out.append(lines)
    return out


@settings(max_examples=300, deadline=None)
@given(_blocks())
def test_scanned_blocks_are_the_lines_own(blocks) -> None:
    """The coded Gate (which tries ``rawsubs`` first) gives for each block the events and
    rejections of the plain Gate and of ``admit_line`` a line, and the blocks of plain lines
    are read by the scan."""
    plain, coded, lined = Gate("none"), Gate("none", coded=True), Gate("none")
    first, scanned = 1, 0
    for lines in blocks:
        raws = [line.encode() for line in lines]
        buf = b"\n".join(raws)
        want = [lined.admit_line(raw, first + i) for i, raw in enumerate(raws)]
        a = plain.admit_block(first, buf, len(raws))
        got = coded.admit_block(first, buf, len(raws))
        for out in (a, got):
            assert repr(events_of(out if type(out) is list else [out])) == repr(want)
        assert coded.block_label == plain.block_label
        scanned += type(got) is SubBlock and (got.one_kind != "range" or type(got.rect) is Rects)
        first += len(raws)
    SCANNED.append(scanned)


SCANNED: list[int] = []


def _plain_line(kind: str, vals: dict[str, str], extra: str | None = None, missing: str | None = None) -> bytes:
    fields = [f % vals for f in (KEYS_RANGE if kind == "range" else KEYS_KNN)]
    fields = [f for f in fields if missing is None or not f.startswith('"%s"' % missing)]
    return ("{" + ",".join(fields + ([extra] if extra else [])) + "}").encode()


def test_each_odd_value_alone() -> None:
    """Every odd value of every field (and every odd extra field, and each field left out),
    alone in the first or the middle line of a block of plain ones: the coded Gate's events and
    rejections are the plain Gate's and ``admit_line``'s (the cases the scan must refuse
    or read exactly as msgspec would)."""
    cases = []
    for kind in ("range", "knn"):
        for field, odds in _values(1, 1)[1].items():
            cases += [(kind, {field: v}, None, None) for v in odds]
        cases += [(kind, {}, extra, None) for extra in ODD_FIELDS]
        cases += [(kind, {}, None, f) for f in ("op", "id", "t", "kind", "rect", "x", "y", "k", "keywords")]
    for (kind, change, extra, missing), at in product(cases, (0, 1)):
        plain, coded, lined = Gate("none"), Gate("none", coded=True), Gate("none")
        raws = []
        for i in range(3):
            vals = _values(1, i)[0]
            if i == at:
                vals.update(change)
            raws.append(_plain_line(kind, vals, extra if i == at else None, missing if i == at else None))
        want = [lined.admit_line(raw, 1 + i) for i, raw in enumerate(raws)]
        for gate in (plain, coded):
            out = gate.admit_block(1, b"\n".join(raws), 3)
            assert repr(events_of(out if type(out) is list else [out])) == repr(want), (kind, change, extra, missing)


def test_some_blocks_were_scanned() -> None:
    """(After the test above, in this process:) many of its blocks were read by the scan."""
    if SCANNED:
        assert sum(map(bool, SCANNED)) > len(SCANNED) // 10


def test_lines_other_than_n_or_not_of_the_shape() -> None:
    """``scan_block`` wants exactly ``n`` lines, each one object, and nothing after it."""
    one = b'{"op":"sub","id":"a","t":0,"kind":"range","rect":[0,0,1,1],"keywords":["a"]}'
    assert rawsubs.scan_block(one + b"\n" + one, 2).ids == ["a", "a"]
    for buf, n in ((one, 2), (one + b"\n" + one, 1), (one + b"\n", 1), (one + b" x", 1), (b"", 1),
                   (one[:-1], 1), (one.replace(b'"a"]', b'"a]'), 1), (one + b"\n\n" + one, 2),
                   (one.replace(b'"id":"a"', b'"id":"\xff"'), 1)):
        assert rawsubs.scan_block(buf, n) is None, (buf, n)


def test_rects_are_the_tuples_they_stand_for() -> None:
    """``Rects`` reads as its tuples of Python floats; slices are views; a block joins them
    as an array (with another block's list of tuples, as tuples); it pickles as its array."""
    arr = np.array([[0.0, -1.5, 1.0, 2.5], [3.0, 4.0, 5.0, 6.0], [-0.0, 0.0, 1e-300, 1.4245700000000001]])
    r = Rects(arr)
    assert list(r) == [tuple(row) for row in arr.tolist()] and r[1] == (3.0, 4.0, 5.0, 6.0)
    assert type(r[0][0]) is float and math.copysign(1.0, r[2][0]) == -1.0
    assert list(r[1:]) == list(r)[1:] and r[1:].array.base is arr
    assert pickle.loads(pickle.dumps(r)).array.tobytes() == arr.tobytes()
    gate = Gate("none", coded=True)
    lines = [b'{"op":"sub","id":"s%d","t":0,"kind":"range","rect":[%d,0,%d,1],"keywords":["a"]}' % (i, i, i + 1)
             for i in range(4)]
    b1 = gate.admit_block(1, b"\n".join(lines[:2]), 2)
    b2 = gate.admit_block(3, b"\n".join(lines[2:]), 2)
    assert type(b1.rect) is Rects and type(b2.rect) is Rects
    joined = SubBlock.join([b1, b2])
    assert type(joined.rect) is Rects and list(joined.rect) == [(i, 0.0, i + 1, 1.0) for i in range(4)]
    mixed = SubBlock.join([b1, b2[0]])
    assert list(mixed.rect) == [(0.0, 0.0, 1.0, 1.0), (1.0, 0.0, 2.0, 1.0), (2.0, 0.0, 3.0, 1.0)]


def test_scanned_columns_pickle_as_their_arrays() -> None:
    """A scanned block through the reading process's pipe (pickled and back): the same
    events, its columns plain lists again."""
    for kind, shape in (("range", '"rect":[%d,0.5,%d,1.5]'), ("knn", '"x":%d.5,"y":%d,"k":3,"match":"any"')):
        gate = Gate("none", coded=True)
        lines = [('{"op":"sub","id":"s%d%s","t":%d,"kind":"%s",%s,"keywords":["a"]}'
                  % (i, kind, i // 3, kind, shape % (i % 90, i % 90 + 1))).encode() for i in range(2000)]
        block = gate.admit_block(1, b"\n".join(lines), len(lines))
        assert type(block) is SubBlock and type(block.id) is not list  # (a Packed column)
        back = pickle.loads(pickle.dumps(block))
        assert all(type(getattr(back, f)) is list for f in ("id", "t", "kind", "match_all"))
        block.keywords.lex = back.keywords.lex = gate.lexicon
        assert repr(list(back)) == repr(list(block))
