"""The line-rate path (io/fastline) accepts exactly what the full validator accepts, as
the same events, and the Gate gives the same events and rejections with it as without."""

from __future__ import annotations

import itertools
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


# The block path (Gate.admit_block): a block of lines, decoded at once and judged by columns
# when it is all one op and kind, gives the events and rejections admit_line gives line by
# line, and leaves the Gate in the same state. Blocks of one kind with a few bad or unusual
# lines mixed in are what reach its column tests; the blocks are cut at random.
WORDS = ["a", "b", "de", "mx", "x y", "1", "é", "Ab", "ß", "ﬁ", " a", ""]  # normal, then not


def _record(kind: str, ident, t, words, edit: str) -> dict:
    rec: dict = {"op": "sub", "id": ident, "t": t, "keywords": list(words)}
    if kind == "range":
        rec.update(kind="range", rect=[0.0, 0.0, 1.5, 2.0])
    elif kind == "knn":
        rec.update(kind="knn", x=0.5, y=-0.5, k=3)
    elif kind == "topk":
        rec.update(kind="topk", x=0.5, y=-0.5, k=3, alpha=0.25)
    elif kind == "pub":
        rec.update(op="pub", x=0.5, y=-0.5)
    else:
        rec = {"op": "unsub", "id": ident, "t": t}
    if edit == "drop":
        for field in ("rect", "x", "k", "keywords", "kind"):
            rec.pop(field, None)
            break
    elif edit == "text":
        rec["text"] = " ".join(rec.pop("keywords", []))
    elif edit == "inverted":
        rec["rect"] = [1.0, 0.0, 0.0, 1.0]
    elif edit == "inverted_y":
        rec["rect"] = [0.0, 1.0, 1.0, 0.0]
    elif edit in ("far", "far_x"):
        rec["x"] = 500.0 if edit == "far" else -180.5
    elif edit in ("far_y", "far_y2"):
        rec["y"] = 90.5 if edit == "far_y" else -95.0
    elif edit == "edge":  # on the closed border of the space: inside
        rec.update(x=180, y=-90)
    elif edit in ("no_y", "no_k"):
        rec.pop(edit[-1], None)
    elif edit == "no_alpha":
        rec.pop("alpha", None)
    elif edit == "alpha_hi":
        rec["alpha"] = 1.5
    elif edit == "weights":
        rec["weights"] = {words[0]: 2.0}
    elif edit == "kw_dup":
        rec["keywords"] = ["a", "a"]
    elif edit == "kw_odd":
        rec["keywords"] = ["Ab"]
    elif edit in ("all", "any", "some"):
        rec["match"] = edit
    elif edit == "expires":
        rec["expires"] = t + 2
    elif edit == "expires_now":  # not after its own time
        rec["expires"] = t
    elif edit == "huge":
        rec["t"] = 10**400
    elif edit == "k0":
        rec["k"] = 0
    elif edit == "int_id":
        rec["id"] = 7
    elif edit == "float_t":
        rec["t"] = float(t)
    return rec


EDITS = ["", "", "", "", "drop", "text", "inverted", "inverted_y", "far", "far_x", "far_y", "far_y2", "edge",
         "no_y", "no_k", "kw_dup", "kw_odd", "all", "any", "some", "expires", "huge", "k0", "int_id", "float_t",
         "junk", "long", "no_alpha", "alpha_hi", "weights", "expires", "expires_now"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["none", "time:3"]),
       st.lists(st.tuples(st.sampled_from(["range", "range", "knn", "topk", "pub", "pub", "unsub"]),
                          st.integers(1, 40),  # how many lines of that kind
                          st.lists(st.tuples(st.integers(0, 39), st.sampled_from(EDITS)), max_size=3),
                          st.lists(st.sampled_from(WORDS[:7]), min_size=1, max_size=3, unique=True)
                          | st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
                          st.sampled_from([0, 0, 1, -1, 3]),  # the time step into the run
                          st.sampled_from([0.0, 0.0, 0.03, 0.2])),  # how often a line is odd
                min_size=1, max_size=6),
       st.lists(st.integers(1, 60), min_size=1, max_size=8), st.randoms(use_true_random=False))
def test_a_block_gives_what_line_by_line_gives(window, runs, cuts, rnd):
    lines: list = []
    t, serial = 0, 0
    for kind, n, edits, words, step, odd in runs:
        t += step
        edit_at = dict(edits)
        for i in range(n):
            serial += 1
            # ids: mostly fresh, some reused (duplicates in the block or before it, unsubs of
            # live and dead ids); words: mostly the run's, some drawn a line
            ident = f"s{serial}"
            if kind == "unsub" or rnd.random() < odd:
                ident = f"s{rnd.choice([serial - 1, serial - 2, rnd.randrange(serial + 1)])}"
            ws = [rnd.choice(WORDS) for _ in words] if rnd.random() < odd else words
            edit = edit_at.get(i, "")
            if edit == "junk":
                lines.append(rnd.choice([b"", b"  ", b"{", b"[1]", b"\xff", b'{"op":"pub"}{"op":"pub"}']))
            elif edit == "long":
                lines.append(None)  # over MAX_LINE, as the reader gives it
            else:
                lines.append(json.dumps(_record(kind, ident, t, ws, edit)).encode())
    _same_by_blocks(window, lines, cuts)


def _same_by_blocks(window: str, lines: list, cuts: list[int], joined: int = 1, coded: bool = False) -> None:
    one = Gate(window)
    by_line = [repr(one.admit_line(raw, i)) for i, raw in enumerate(lines, 1)]
    blocks = Gate(window, coded=coded)
    by_block: list[str] = []
    start, cut = 0, itertools.cycle(cuts)
    while start < len(lines):
        end = min(len(lines), start + next(cut))
        block = lines[start:end]
        if None not in block and (end + joined) % 2:  # as stream_blocks gives a block without CR: one buffer
            by_block += map(repr, blocks.admit_block(start + 1, b"\n".join(block), len(block)))
        else:
            by_block += map(repr, blocks.admit_block(start + 1, block))
        start = end
    assert by_block == by_line
    assert (blocks.last_t, blocks._active, blocks._expires, sorted(blocks._ends), blocks._seq) == \
        (one.last_t, one._active, one._expires, sorted(one._ends), one._seq)


@pytest.mark.parametrize("kind", ["range", "knn", "topk", "pub"])
def test_a_block_of_one_line_without_a_field_is_what_the_line_is(kind):
    """A block of one record has no second value to compare a missing one with (``min`` of
    one UNSET is no error): each field dropped in turn, in a block of one and of two."""
    base = _record(kind, "s1", 0, ["a"], "")
    for field in base:
        rec = json.dumps({k: v for k, v in base.items() if k != field}).encode()
        _same_by_blocks("none", [rec], [1])
        _same_by_blocks("none", [rec, rec.replace(b'"s1"', b'"s2"')], [2])
    for edit in ("weights", "no_alpha", "alpha_hi", "expires", "some"):  # each alone, and after a clean one
        odd = json.dumps(_record(kind, "s1", 0, ["a", "b"], edit)).encode()
        _same_by_blocks("time:3", [odd], [1])
        _same_by_blocks("time:3", [json.dumps(_record(kind, "s0", 0, ["a"], "")).encode(), odd], [2])


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["range", "knn", "topk", "unsub", "pub"]), st.integers(1, 25),
                          st.integers(0, 3), st.sampled_from([None, 1, 3, 6, 0, 10 ** 400])), min_size=1, max_size=10),
       st.lists(st.integers(1, 40), min_size=1, max_size=4), st.booleans(), st.randoms(use_true_random=False))
def test_subscription_ends_by_blocks_are_what_line_by_line_gives(runs, cuts, coded, rnd):
    """Subscriptions with an ``expires`` judged by columns (``Gate._columns``): the same events
    and rejections as line by line, and the same ids and ends kept, while ids end, are
    unsubscribed, come back and collide (runs of one kind over 60 ids), and expiries fall
    before, within and after the blocks, or are not after their own time, or past float range."""
    lines, t = [], 0
    for kind, n, step, after in runs:
        t += step
        for _ in range(n):
            rec = _record(kind, f"s{rnd.randrange(60)}", t, rnd.sample(WORDS[:7], rnd.randint(1, 3)), "")
            if kind not in ("unsub", "pub") and after is not None and rnd.random() < 0.8:
                rec["expires"] = after if after > 10 ** 300 else t + after
            lines.append(json.dumps(rec).encode())
    _same_by_blocks("time:4", lines, cuts, coded=coded)


def test_the_block_path_takes_whole_blocks_by_columns():
    """It is a fast path: blocks of one kind go by columns (else this test cannot tell)."""
    from skpubsub.io import validate
    calls = []
    real = Gate._columns

    def spy(self, first, recs):
        out = real(self, first, recs)
        calls.append(out is not None)
        return out

    gate = Gate("none")
    Gate._columns = spy
    try:
        for kind in ("range", "knn", "pub"):
            lines = [json.dumps(_record(kind, f"{kind}{i}", i // 3, ["de", "mx"], "")).encode() for i in range(50)]
            gate = Gate("none")
            assert all(not isinstance(e, validate.Rejection) for e in gate.admit_block(1, lines))
    finally:
        Gate._columns = real
    assert calls == [True, True, True]


def _sub(i, t, **extra) -> bytes:
    rec = {"op": "sub", "id": f"s{i}", "t": t, "kind": "range", "rect": [0, 0, 1, 1], "keywords": ["a"]}
    return json.dumps({**rec, **extra}).encode()


@pytest.mark.parametrize("lines", [
    [_sub(i, 1) for i in range(4)] + [_sub(9, 10**400)],  # a time past float range, last in its block
    [_sub(0, 0, expires=2), _sub(1, 1)] + [_sub(i, 2) for i in range(2, 6)] + [_sub(0, 2)],  # an expiry
    [_sub(0, 0, expires=2), _sub(1, 1)] + [_sub(i, 3) for i in range(2, 6)],  # ends in the next block
    # one value over two lines and two on one: as many values as lines, none a line's own
    [_sub(0, 0), b'{"op":"sub","id":"x","t":0,"kind":"range","rect":[0,0,1,1],"keywords":', b'{"a":1}}',
     _sub(1, 0) + _sub(2, 0), _sub(3, 0)],
    [_sub(0, 0), b"", _sub(1, 0) + b" " + _sub(2, 0), b"  " + _sub(3, 0) + b" "],  # blank, and spaces
])
def test_block_edges(lines):
    for cuts in ([1], [2], [5], [100]):
        for joined in (0, 1):
            _same_by_blocks("none", lines, cuts, joined)


@pytest.mark.parametrize("kind", ["range", "knn", "pub", "unsub"])
@pytest.mark.parametrize("edit", sorted(set(EDITS) - {"junk", "long"}) + ["dup", "active", "back"])
def test_one_odd_line_in_a_block_of_one_kind(kind, edit):
    """Each oddity alone in a block otherwise taken by columns."""
    lines = [json.dumps(_record("range", "old", 0, ["a"], "")).encode()]
    for i in range(6):
        ident, t = f"s{i}", 1
        if i == 3:
            ident = {"dup": "s2", "active": "old"}.get(edit, ident)
            t = 0 if edit == "back" else t
        lines.append(json.dumps(_record(kind, ident, t, ["a", "de"], edit if i == 3 else "")).encode())
    for joined in (0, 1):
        _same_by_blocks("none", lines, [1, 6], joined)
        _same_by_blocks("time:3", lines, [1, 6], joined)


def test_ids_across_blocks():
    """The active-id rules across blocks, by columns where the block allows (``_claim``): an
    id freed by its unsub and reused in a block is accepted; an id twice in one block, and
    an id still active when a block of subscriptions arrives, are rejected (the block goes
    line by line, the rest of it accepted) and the Gate's ids are as before the block; an
    id ended by expiry is reusable, then active again. Each verdict is spelled out (the
    line-by-line Gate could be wrong the same way), and the block path's state is the
    line path's (``_same_by_blocks``)."""
    def sub(ident, t, kind="range", **extra):
        return json.dumps({**_record(kind, ident, t, ["de"], ""), **extra}).encode()

    def unsub(ident, t):
        return json.dumps({"op": "unsub", "id": ident, "t": t}).encode()

    blocks = [
        [sub("a", 0), sub("b", 0), sub(1, 0), sub("1", 0, "knn")],  # 1 and "1" are two ids
        [unsub("b", 1)],
        [sub("b", 1), sub("d", 1)],  # b reused after its unsub
        [sub("e", 2), sub("f", 2), sub("e", 2)],  # e twice in the block
        [sub("g", 2, "knn"), sub("a", 2, "knn"), sub("h", 2, "knn")],  # a still active
        [sub("g", 3), sub("i", 3)],  # g, accepted line by line in the block before, is active
        [sub("z", 4, expires=6)],  # by columns, its end kept
        [sub("z", 6), sub("y", 6)],  # z ended at 6: reusable
        [sub("z", 7), sub(1, 7)],  # both active
        [unsub("a", 8), sub("j", 8)],
        [sub("a", 8), sub("k", 8)],
    ]
    from skpubsub.io import validate
    g = Gate("time:100")
    got, labels = [], []
    start = 1
    for block in blocks:
        out = g.admit_block(start, b"\n".join(block), len(block))
        labels.append(g.block_label)
        got += [(e.id, "ok") if not isinstance(e, validate.Rejection) else (json.loads(e.raw)["id"], e.error)
                for e in out]
        start += len(block)
    dup = "duplicate active subscription id: {!r}"
    assert got == [("a", "ok"), ("b", "ok"), (1, "ok"), ("1", "ok"), ("b", "ok"), ("b", "ok"), ("d", "ok"),
                   ("e", "ok"), ("f", "ok"), ("e", dup.format("e")),
                   ("g", "ok"), ("a", dup.format("a")), ("h", "ok"),
                   ("g", dup.format("g")), ("i", "ok"),
                   ("z", "ok"), ("z", "ok"), ("y", "ok"), ("z", dup.format("z")), (1, dup.format(1)),
                   ("a", "ok"), ("j", "ok"), ("a", "ok"), ("k", "ok")]
    assert set(g._active) == {"a", "b", 1, "1", "d", "e", "f", "g", "h", "i", "z", "y", "j", "k"}
    # the clean blocks went by columns (the reuses included), the others line by line
    assert labels == [None, None, "sub:range", None, None, None, "sub:range", None, None, None, "sub:range"]
    lines = [line for block in blocks for line in block]
    _same_by_blocks("time:100", lines, [len(b) for b in blocks])
    _same_by_blocks("time:100", lines, [1])
