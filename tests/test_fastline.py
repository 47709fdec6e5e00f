"""The line-rate path (io/fastline) accepts exactly what the full validator accepts, as
the same events, and the Gate gives the same events and rejections with it as without."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skpubsub.core.config import Space, Window
from skpubsub.io import fastline
from skpubsub.io.validate import Gate, Invalid, parse_line, validate_record
from skpubsub.testing.streams import random_stream, streams


def _slow(raw: bytes, window: Window, space: Space):
    try:
        return validate_record(parse_line(raw), 1, window, space)
    except Invalid:
        return None


def _fast(raw: bytes, window: Window, space: Space):
    try:
        return fastline.event(fastline.decode(raw), 1, window, space)
    except (msgspec.MsgspecError, ValueError, OverflowError):  # as Gate.admit_line
        return None


def _agree(raw: bytes, window: Window, space: Space) -> bool:
    """The fast path never accepts what the slow one rejects, nor makes another event of
    it (``repr``: ``1`` and ``1.0`` are different times in the outputs). True if it accepted."""
    fast = _fast(raw, window, space)
    if fast is not None:
        assert repr(fast) == repr(_slow(raw, window, space)), raw
    return fast is not None


def test_the_fast_path_takes_the_valid_lines_of_random_streams_as_the_same_events():
    taken = valid = 0
    for seed in range(150):
        s = random_stream(seed)
        window, space = Window.parse(s.window), s.space_or_default
        for rec in s.events:
            raw = json.dumps(rec).encode()
            taken += _agree(raw, window, space)
            valid += _slow(raw, window, space) is not None
    # It takes nearly all valid lines (else it would be no fast path); stateful rejections
    # (time, ids) are the Gate's, judged the same on both paths (next test).
    assert taken >= 0.95 * valid, (taken, valid)


# Values that break a field in the ways SPEC 5 names, and some that only look odd.
ODD = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.just(10**400), st.just(5.0), st.just(-0.0), st.just(1e308),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4), st.lists(st.integers(0, 3), max_size=5),
    st.lists(st.floats(-200, 200), min_size=4, max_size=4), st.lists(st.text(max_size=3), max_size=3),
    st.dictionaries(st.text(max_size=2), st.one_of(st.floats(-2, 2), st.booleans(), st.none()), max_size=3),
    st.sampled_from(["sub", "pub", "unsub", "range", "knn", "topk", "all", "any", "ALL", "\ud800"]),
)
FIELDS = ["op", "id", "t", "kind", "x", "y", "rect", "k", "alpha", "keywords", "text", "match", "weights", "expires"]


@settings(max_examples=400, deadline=None)
@given(streams(max_events=12), st.lists(st.tuples(st.integers(0, 11), st.sampled_from(FIELDS),
                                                  st.one_of(ODD, st.just(KeyError))), max_size=4))
def test_a_mutated_field_is_never_taken_unless_the_validator_takes_it(stream, edits):
    window, space = Window.parse(stream.window), stream.space_or_default
    for rec in stream.events:
        _agree(json.dumps(rec).encode(), window, space)
    for i, field, value in edits:
        if not stream.events or not isinstance(stream.events[i % len(stream.events)], dict):
            continue
        rec = dict(stream.events[i % len(stream.events)])
        if value is KeyError:
            rec.pop(field, None)
        else:
            rec[field] = value
        _agree(json.dumps(rec).encode(), window, space)


@pytest.mark.parametrize("raw", [
    b'{"op":"pub","id":1,"t":0,"x":1,"y":2,"text":"a","x":2}',  # a repeated key: the last counts
    b'{"op":"pub","id":1,"t":0,"x":1,"y":2,"keywords":["a"],"text":5}',  # keywords win over text
    b'{"op":"sub","id":"s","t":0,"kind":"topk","x":0,"y":0,"k":1,"alpha":0.5,"keywords":["A"],"match":7}',
    b'{"op":"sub","id":"s","t":0,"kind":"topk","x":0,"y":0,"k":1,"alpha":0.5,"keywords":["a","b"],'
    b'"weights":{"A":2,"a":3,"zz":1}}',
    b'{"op":"sub","id":"s","t":1e2,"kind":"range","rect":[0,0,1,1],"keywords":["a"],"expires":101}',
    b'{"op":"sub","id":"s","t":0,"kind":"range","rect":[0,0,1,1],"keywords":["a"],"match":null}',
    b'{"op":"pub","id":1,"t":0,"x":1,"y":2,"keywords":[" \\uff41 "]}',
    b'{"op":"pub","id":1,"t":1' + b'0' * 400 + b',"x":1,"y":2,"keywords":["a"]}',  # a time past float range
    b'{"op":"pub","id":"\xff\xfe","t":1,"x":0,"y":0,"keywords":["a"]}',  # not UTF-8
    b'{"op":"unsub","id":"s","t":1' + b'0' * 400 + b'}',
])
def test_edge_lines_agree(raw):
    _agree(raw, Window.parse("time:5"), Space())
    _agree(raw, Window.parse("none"), Space())
    for window in ("none", "time:5"):  # and the Gate gives what the full validator gives
        assert repr(Gate(window).admit_line(raw, 1)) == repr(_slow_gate(raw, window))


def _slow_gate(raw: bytes, window: str):
    gate, keep = Gate(window), fastline.decode
    try:
        fastline.decode = _refuse
        return gate.admit_line(raw, 1)
    finally:
        fastline.decode = keep


def _refuse(raw):
    raise msgspec.DecodeError("the slow path only")


def _admitted(lines: list[bytes], window: str, space: Space) -> list[str]:
    gate = Gate(window, space)
    return [repr(gate.admit_line(raw, i)) for i, raw in enumerate(lines, 1)]


def test_the_gate_gives_the_same_events_and_rejections_with_and_without_the_fast_path(monkeypatch):
    runs = [random_stream(seed, junk=20) for seed in range(60)]
    lines = [[json.dumps(rec).encode() for rec in s.events] for s in runs]
    fast = [_admitted(ls, s.window, s.space_or_default) for s, ls in zip(runs, lines)]

    def refuse(raw):
        raise msgspec.DecodeError("the slow path only")

    monkeypatch.setattr(fastline, "decode", refuse)
    slow = [_admitted(ls, s.window, s.space_or_default) for s, ls in zip(runs, lines)]
    assert fast == slow
