"""Issue 18, class 2: text at the edges (SPEC section 6, "Text").

A lone surrogate (``"\\ud800"``, a legal JSON escape) anywhere in an event rejects that
event with ``invalid unicode``, in the fast path and the validator alike, and the run goes
on (before: the run aborted when the output was written, every later event lost). A UTF-8
byte-order mark at the very start of the input is ignored (before: the first event was
rejected as not JSON).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from skpubsub.cli import main
from skpubsub.io.events import Rejection
from hypothesis import given, settings
from hypothesis import strategies as st

from skpubsub.io import lines as lines_mod
from skpubsub.io.lines import BOM, read_lines, stream_lines
from skpubsub.io.validate import Gate

SUB = rb'{"op":"sub","id":"s","t":0,"kind":"knn","x":0,"y":0,"k":3,"keywords":["a"]}'
LONE = [  # the escape in every place a string can sit
    rb'{"op":"pub","id":"\ud800","t":1,"x":1,"y":1,"keywords":["a"]}',
    rb'{"op":"pub","id":"o","t":1,"x":1,"y":1,"keywords":["a","\udfff"]}',
    rb'{"op":"pub","id":"o","t":1,"x":1,"y":1,"text":"caf\ud83d"}',
    rb'{"op":"pub","id":"o","t":1,"x":1,"y":1,"keywords":["a"],"note":"\ud800x"}',
    rb'{"op":"pub","id":"o","t":1,"x":1,"y":1,"keywords":["a"],"\udc00":1}',
    rb'{"op":"sub","id":"\udbff","t":1,"kind":"range","rect":[0,0,1,1],"keywords":["a"]}',
    rb'{"op":"sub","id":"q","t":1,"kind":"topk","x":0,"y":0,"k":1,"alpha":0.5,"keywords":["a"],"weights":{"\ud800":2}}',
    rb'{"op":"\ud800","id":"q","t":1}',
    rb'{"op":"sub","id":"q","t":1,"kind":"\ud800","keywords":["a"]}',
    rb'{"op":"unsub","id":"\ud800","t":1}',
]


@pytest.mark.parametrize("raw", LONE)
def test_lone_surrogate_is_invalid_unicode(raw: bytes) -> None:
    gate = Gate("time:10")
    assert not isinstance(gate.admit_line(SUB, 1), Rejection)
    got = gate.admit_line(raw, 2)
    assert isinstance(got, Rejection) and got.error == "invalid unicode", got
    json.dumps({"raw": got.raw, "label": got.label}, ensure_ascii=False).encode("utf-8")  # writable
    # the same record handed over parsed (the service, the tests): the same reason
    got2 = Gate("time:10").admit(json.loads(raw), 2)
    assert isinstance(got2, Rejection) and got2.error == "invalid unicode"
    json.dumps({"raw": got2.raw, "label": got2.label}, ensure_ascii=False).encode("utf-8")


def test_surrogate_pairs_and_escaped_backslashes_stay_valid() -> None:
    gate = Gate()
    ev = gate.admit_line(rb'{"op":"pub","id":"\ud83d\ude00","t":1,"x":1,"y":1,"keywords":["\\ud800"]}', 1)
    assert not isinstance(ev, Rejection) and ev.id == "\U0001F600" and ev.keywords == ("\\ud800",)


def _run(tmp: Path, name: str, data: bytes, *flags: str) -> dict:
    src = tmp / f"{name}.jsonl"
    src.write_bytes(data)
    out = tmp / f"out-{name}"
    assert main(["run", str(src), "--out", str(out), *flags]) == 0
    files = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "metrics.json"}
    for b in files.values():
        b.decode("utf-8")  # every output is valid UTF-8
    return files


def test_run_goes_on_past_a_lone_surrogate(tmp_path: Path) -> None:
    """Every engine path: the bad lines rejected with their reason, the valid ones exactly
    as in a run without them (before: UnicodeEncodeError when the output was written)."""
    pubs = [rb'{"op":"pub","id":"o%d","t":%d,"x":%d,"y":1,"keywords":["a"]}' % (i, i + 2, i) for i in range(5)]
    good = [SUB, pubs[0], pubs[1], pubs[2], pubs[3], pubs[4]]
    bad = [SUB, pubs[0], LONE[0], pubs[1], LONE[1], pubs[2], LONE[3], pubs[3], LONE[9], pubs[4]]
    for flags in ((), ("--index", "reference")):  # the Gate before every runtime judges them
        a = _run(tmp_path, "good", b"\n".join(good) + b"\n", "--window", "count:3", *flags)
        b = _run(tmp_path, "bad", b"\n".join(bad) + b"\n", "--window", "count:3", *flags)
        assert a["results.jsonl"] == b["results.jsonl"]
        strip = [json.loads(x) for x in a["notifications.jsonl"].splitlines()]
        assert strip == [json.loads(x) for x in b["notifications.jsonl"].splitlines()]
        rej = [json.loads(x) for x in b["rejected.jsonl"].splitlines()]
        assert [(r["line"], r["error"]) for r in rej] == [(n, "invalid unicode") for n in (3, 5, 7, 9)]


def test_bom_at_the_start_is_ignored(tmp_path: Path) -> None:
    lines = [SUB, rb'{"op":"pub","id":"o","t":1,"x":1,"y":1,"keywords":["a"]}']
    plain = _run(tmp_path, "plain", b"\n".join(lines) + b"\n")
    marked = _run(tmp_path, "bom", BOM + b"\n".join(lines) + b"\n")
    assert marked == plain and b'"s"' in marked["results.jsonl"] and marked["rejected.jsonl"] == b""
    # only at the very start: a mark on a later line is that line's business (not JSON)
    late = _run(tmp_path, "late", lines[0] + b"\n" + BOM + lines[1] + b"\n")
    assert json.loads(late["rejected.jsonl"])["line"] == 2


def test_read_lines_bom_keeps_the_limits() -> None:
    def lines(data: bytes, limit: int, start: int = 0) -> list:
        f = io.BytesIO(data)
        f.seek(start)
        return list(read_lines(f, limit))

    assert lines(BOM, 10) == [] and lines(BOM + b"\n", 10) == [(1, b"")]
    assert lines(BOM + b"x" * 10 + b"\nab", 10) == [(1, b"x" * 10), (2, b"ab")]  # exactly the limit
    assert lines(BOM + b"x" * 11 + b"\nab", 10) == [(1, None), (2, b"ab")]  # one over
    assert lines(BOM + b"x" * 10, 10) == [(1, b"x" * 10)]  # no newline at the end
    assert lines(BOM + b"x" * 11, 10) == [(1, None)]
    assert lines(b"ab\n" + BOM + b"cd\n", 10, start=3) == [(1, BOM + b"cd")]  # read from mid-file: kept


class _Trickle(io.BytesIO):
    """A pipe's short reads: at most ``step`` bytes a call."""

    def __init__(self, data: bytes, step: int) -> None:
        super().__init__(data)
        self.step = step

    def read(self, size: int = -1) -> bytes:
        return super().read(min(self.step, size) if size >= 0 else self.step)


@settings(max_examples=400, deadline=None)
@given(parts=st.lists(st.sampled_from([b"a", b"bc", b"\r", b"\n", b"\r\n", BOM, b"x" * 7]), max_size=30),
       limit=st.integers(0, 9), block=st.integers(1, 12), chunk=st.integers(1, 5), start=st.integers(0, 3),
       step=st.none() | st.integers(1, 4))
def test_stream_lines_gives_what_read_lines_gives(parts, limit, block, chunk, start, step) -> None:
    """The block reader of ``run`` against the line reader, with blocks and skip chunks
    small enough that lines, CRs, marks and over-long lines straddle every boundary."""
    data = b"".join(parts)
    start = min(start, len(data))
    old = lines_mod._BLOCK, lines_mod._CHUNK
    lines_mod._BLOCK, lines_mod._CHUNK = block, chunk
    try:
        f = io.BytesIO(data)
        f.seek(start)
        want = list(read_lines(f, limit))
        g = io.BytesIO(data) if step is None else _Trickle(data, step)
        g.seek(start)
        assert list(stream_lines(g, limit)) == want
    finally:
        lines_mod._BLOCK, lines_mod._CHUNK = old


def test_keywords_win_over_text_when_both_are_given() -> None:
    """SPEC 6: with both ``keywords`` and ``text``, ``keywords`` is used (on the fast path
    and the validator's alike)."""
    from skpubsub.core.config import Window
    from skpubsub.io.validate import Gate

    g = Gate(Window.parse("none"))
    pub = g.admit_line(b'{"op":"pub","id":"o","t":0,"x":0,"y":0,"keywords":["A"],"text":"b c"}', 1)
    sub = g.admit({"op": "sub", "id": "s", "t": 0, "kind": "range", "rect": [0, 0, 1, 1], "keywords": ["x"],
                   "text": "y z"})
    assert pub.keywords == ("a",) and sub.keywords == ("x",)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(st.sampled_from('ab"\\\x01\x7fé 9'), max_size=4),
                          st.text(st.sampled_from("abc09_-"), max_size=6),
                          st.integers(-10**20, 10**20), st.floats(allow_nan=False, allow_infinity=False)),
                max_size=8))
def test_the_writers_values_are_their_json(values) -> None:
    """``notewriter.encoded`` (ids and times as the compiled writer copies them): each
    value's ``json_value``, whatever the group holds (plain ASCII strings and ints by whole
    groups; quotes, backslashes, control and non-ASCII characters, floats, mixed types)."""
    import numpy as np

    from skpubsub.io.encode import json_value
    from skpubsub.io.notewriter import encoded

    data, lens = encoded(values)
    want = [json_value(v).encode("utf-8") for v in values]
    assert data == b"".join(want) and np.asarray(lens).tolist() == [len(w) for w in want]
