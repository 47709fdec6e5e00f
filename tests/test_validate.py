"""SPEC section 5 (bad input) and section 6 (fine print), through ``Gate.admit_line``.

Every case is fed as raw bytes, the way the CLI sees it. A rejection must carry the
stable error prefix, its line number and the raw text, and must not disturb the
valid lines around it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from skpubsub.core.config import Space
from skpubsub.io.events import KNN, RANGE, TOPK, Pub, Rejection, Sub, Unsub
from skpubsub.io.lines import read_lines
from skpubsub.io.validate import MAX_LINE, Gate

MiB = 1_048_576

# --------------------------------------------------------------------------- helpers


class Raw:
    """A JSON value written verbatim (``1e999``, ``NaN``...), which json.dumps cannot produce."""

    def __init__(self, text: str) -> None:
        self.text = text


DROP = object()  # remove the field from the base record


def line(base: dict, **changes: Any) -> bytes:
    """``base`` with ``changes`` applied, as one line of bytes (no newline)."""
    rec = dict(base)
    raws: dict[str, str] = {}
    for k, v in changes.items():
        if v is DROP:
            rec.pop(k, None)
        else:
            rec[k] = v

    def enc(v: Any) -> Any:
        if isinstance(v, Raw):
            key = f"@@RAW{len(raws)}@@"
            raws[key] = v.text
            return key
        if isinstance(v, list):
            return [enc(x) for x in v]
        if isinstance(v, dict):
            return {k: enc(x) for k, x in v.items()}
        return v

    text = json.dumps({k: enc(v) for k, v in rec.items()}, ensure_ascii=False)
    for key, raw in raws.items():
        text = text.replace(json.dumps(key), raw)
    return text.encode("utf-8")


PUB = {"op": "pub", "id": "o1", "t": 1, "x": 1.5, "y": 2.5, "keywords": ["a"]}
KNN_SUB = {"op": "sub", "id": "s1", "t": 1, "kind": "knn", "x": 0, "y": 0, "k": 5, "keywords": ["a"]}
RANGE_SUB = {"op": "sub", "id": "s1", "t": 1, "kind": "range", "rect": [0, 0, 1, 1], "keywords": ["a"]}
TOPK_SUB = {"op": "sub", "id": "s1", "t": 1, "kind": "topk", "x": 0, "y": 0, "k": 5, "alpha": 0.5,
            "keywords": ["a"]}
UNSUB = {"op": "unsub", "id": "s1", "t": 1}
BASES = {"pub": PUB, "knn": KNN_SUB, "range": RANGE_SUB, "topk": TOPK_SUB, "unsub": UNSUB}
SUBS = ("knn", "range", "topk")


def admit(raw: bytes, window: str = "none", space: Space | None = None, gate: Gate | None = None,
          line_no: int = 1):
    g = gate or Gate(window, space)
    return g.admit_line(raw, line_no)


def accepted(raw: bytes, window: str = "none", space: Space | None = None):
    ev = admit(raw, window, space)
    assert not isinstance(ev, Rejection), ev
    return ev


def assert_rejected_between_neighbours(raw: bytes, prefix: str, window: str = "none",
                                       space: Space | None = None) -> None:
    """Lines 1 and 3 are valid pubs around the bad line 2: only line 2 is rejected."""
    g = Gate(window, space)
    before = g.admit_line(line(PUB, id="n1", t=1), 1)
    bad = g.admit_line(raw, 2)
    after = g.admit_line(line(PUB, id="n3", t=1), 3)
    assert isinstance(before, Pub) and before.seq == 1 and before.id == "n1"
    assert isinstance(bad, Rejection), f"accepted: {raw!r} -> {bad!r}"
    assert bad.line == 2
    assert bad.error.startswith(prefix), f"{bad.error!r} does not start with {prefix!r}"
    assert bad.raw == raw.decode("utf-8", "replace")
    assert isinstance(after, Pub) and after.seq == 3 and after.id == "n3"


# --------------------------------------------------------------------------- not JSON / not an object

NOT_JSON = [
    b"hello",
    b"{",
    b'{"op": "pub",}',
    b"{'op': 'pub'}",
    b'{"op": "pub"} trailing',
    b"",
    b"   ",
    b"\t \t",
    b'{"op": "pub", "id": "\xff\xfe", "t": 1, "x": 0, "y": 0, "keywords": ["a"]}',
    b"\xc3\x28",
    b"NaN",
    b"Infinity",
    b"-Infinity",
    line(PUB, t=Raw("NaN")),
    line(PUB, x=Raw("Infinity")),
    line(PUB, y=Raw("-Infinity")),
    line(TOPK_SUB, alpha=Raw("NaN")),
    line(PUB, extra=Raw("NaN")),  # even in an ignored field: the line is not JSON
]


@pytest.mark.parametrize("raw", NOT_JSON)
def test_not_json(raw: bytes) -> None:
    assert_rejected_between_neighbours(raw, "not JSON")


@pytest.mark.parametrize("raw", [b"[1, 2]", b"[]", b"5", b"-2.5", b'"pub"', b"null", b"true", b"false"])
def test_not_an_object(raw: bytes) -> None:
    assert_rejected_between_neighbours(raw, "not an object")


# --------------------------------------------------------------------------- unknown op / kind, case

@pytest.mark.parametrize("op", ["PUB", "Sub", "UNSUB", "publish", "", 1, None, True, ["pub"]])
def test_unknown_op(op: Any) -> None:
    assert_rejected_between_neighbours(line(PUB, op=op), "unknown op")


@pytest.mark.parametrize("base", ["knn", "range", "topk"])
@pytest.mark.parametrize("kind", ["KNN", "Range", "TOPK", "box", "", 3, None])
def test_unknown_kind(base: str, kind: Any) -> None:
    assert_rejected_between_neighbours(line(BASES[base], kind=kind), "unknown kind")


@pytest.mark.parametrize("base", ["knn", "range"])
@pytest.mark.parametrize("match", ["some", "ALL", "Any", "", 1, None, True])
def test_bad_match(base: str, match: Any) -> None:
    assert_rejected_between_neighbours(line(BASES[base], match=match), "bad match")


@pytest.mark.parametrize("base,match,expect_all", [
    ("range", None, True), ("range", "all", True), ("range", "any", False),
    ("knn", None, False), ("knn", "any", False), ("knn", "all", True),
])
def test_match_values_and_defaults(base: str, match: str | None, expect_all: bool) -> None:
    ev = accepted(line(BASES[base], match=DROP if match is None else match))
    assert isinstance(ev, Sub) and ev.match_all is expect_all


# --------------------------------------------------------------------------- missing fields

MISSING = [
    (op, field)
    for op, fields in {
        "pub": ["op", "id", "t", "x", "y", "keywords"],
        "knn": ["op", "id", "t", "kind", "keywords", "x", "y", "k"],
        "range": ["op", "id", "t", "kind", "keywords", "rect"],
        "topk": ["op", "id", "t", "kind", "keywords", "x", "y", "k", "alpha"],
        "unsub": ["op", "id", "t"],
    }.items()
    for field in fields
]


@pytest.mark.parametrize("base,field", MISSING)
def test_missing_field(base: str, field: str) -> None:
    assert_rejected_between_neighbours(line(BASES[base], **{field: DROP}), "missing field")


@pytest.mark.parametrize("base", ["pub", *SUBS])
def test_text_stands_in_for_keywords(base: str) -> None:
    ev = accepted(line(BASES[base], keywords=DROP, text="Jazz bar"))
    assert ev.keywords == ("jazz", "bar")


# --------------------------------------------------------------------------- mistyped fields

MISTYPED = [
    # k: a JSON integer only
    ("knn", "k", 5.0), ("knn", "k", Raw("5.0")), ("knn", "k", Raw("5e0")), ("knn", "k", "5"),
    ("knn", "k", True), ("knn", "k", None), ("knn", "k", [5]),
    ("topk", "k", 5.0), ("topk", "k", "5"), ("topk", "k", True),
    # booleans are never numbers, anywhere
    ("pub", "x", True), ("pub", "y", False), ("pub", "t", True), ("knn", "x", True), ("knn", "y", False),
    ("topk", "alpha", True), ("topk", "alpha", False), ("knn", "t", False), ("unsub", "t", True),
    ("knn", "expires", True), ("range", "rect", [0, 0, True, 1]),
    # other non-numbers where numbers go
    ("pub", "x", "1.5"), ("pub", "y", None), ("pub", "t", "1"), ("pub", "t", None), ("unsub", "t", [1]),
    ("topk", "alpha", "0.5"), ("range", "expires", "9"), ("range", "expires", None),
    # id: string or integer only
    ("pub", "id", 1.5), ("pub", "id", 1.0), ("pub", "id", True), ("pub", "id", None), ("pub", "id", [1]),
    ("knn", "id", 2.0), ("knn", "id", False), ("knn", "id", {"a": 1}), ("unsub", "id", None),
    ("unsub", "id", 1.0), ("range", "id", True),
    # keywords: a list of strings
    ("pub", "keywords", "a"), ("pub", "keywords", {"a": 1}), ("pub", "keywords", None),
    ("pub", "keywords", [1]), ("pub", "keywords", ["a", None]), ("knn", "keywords", ["a", ["b"]]),
    ("topk", "keywords", "jazz"), ("range", "keywords", [True]),
    # rect: an array of exactly 4 numbers
    ("range", "rect", [0, 0, 1]), ("range", "rect", [0, 0, 1, 1, 1]), ("range", "rect", []),
    ("range", "rect", "0,0,1,1"), ("range", "rect", None), ("range", "rect", {"x1": 0}),
    ("range", "rect", [0, 0, "1", 1]), ("range", "rect", [0, None, 1, 1]), ("range", "rect", [[0, 0], [1, 1]]),
    # weights: an object of numbers
    ("topk", "weights", ["a", 2]), ("topk", "weights", "a"), ("topk", "weights", 2), ("topk", "weights", None),
    ("topk", "weights", {"a": "2"}), ("topk", "weights", {"a": None}), ("topk", "weights", {"a": True}),
    ("topk", "weights", {"a": [2]}),
]


@pytest.mark.parametrize("base,field,value", MISTYPED)
def test_mistyped_field(base: str, field: str, value: Any) -> None:
    assert_rejected_between_neighbours(line(BASES[base], **{field: value}), "mistyped field")


@pytest.mark.parametrize("base", ["pub", *SUBS])
@pytest.mark.parametrize("text", [5, None, ["a", "b"], {"a": 1}, True])
def test_mistyped_text(base: str, text: Any) -> None:
    assert_rejected_between_neighbours(line(BASES[base], keywords=DROP, text=text), "mistyped field")


# --------------------------------------------------------------------------- non-finite numbers

NON_FINITE = [
    ("pub", "x", Raw("1e999")), ("pub", "y", Raw("-1e999")), ("pub", "t", Raw("1e999")),
    ("pub", "t", Raw("-1e999")), ("pub", "x", Raw("1E400")),
    ("knn", "x", Raw("1e999")), ("knn", "y", Raw("1e999")), ("knn", "t", Raw("-1e999")),
    ("topk", "x", Raw("-1e999")), ("topk", "alpha", Raw("1e999")), ("topk", "alpha", Raw("-1e999")),
    ("range", "rect", [0, 0, Raw("1e999"), 1]), ("range", "rect", [Raw("-1e999"), 0, 1, 1]),
    ("knn", "expires", Raw("1e999")), ("range", "expires", Raw("1e999")), ("topk", "expires", Raw("1e999")),
    ("unsub", "t", Raw("1e999")),
    # an integer too large for a float is a number that overflows to infinity
    ("pub", "t", Raw("1" + "0" * 400)), ("pub", "x", Raw("-1" + "0" * 400)),
]


@pytest.mark.parametrize("base,field,value", NON_FINITE)
def test_non_finite_number(base: str, field: str, value: Any) -> None:
    assert_rejected_between_neighbours(line(BASES[base], **{field: value}), "non-finite number")


def test_non_finite_object_expires_under_time_window() -> None:
    assert_rejected_between_neighbours(line(PUB, expires=Raw("1e999")), "non-finite number", window="time:10")


@pytest.mark.parametrize("value", [Raw("1e999"), Raw("1" + "0" * 400)])
def test_non_finite_weight(value: Raw) -> None:
    assert_rejected_between_neighbours(line(TOPK_SUB, keywords=["a", "b"], weights={"a": 1, "b": value}),
                                       "non-finite weight")


def test_huge_integer_literal_is_rejected_not_a_crash() -> None:
    raw = line(PUB, t=Raw("1" * 5000))
    ev = admit(raw)
    assert isinstance(ev, Rejection)


# --------------------------------------------------------------------------- space

OUT_OF_SPACE_DEFAULT = [
    ("pub", 180.0001, 0), ("pub", -180.5, 0), ("pub", 0, 90.5), ("pub", 0, -91), ("pub", 1000, 1000),
    ("knn", 181, 0), ("knn", 0, -90.001), ("topk", -181, 0), ("topk", 0, 95),
]


@pytest.mark.parametrize("base,x,y", OUT_OF_SPACE_DEFAULT)
def test_out_of_default_space(base: str, x: float, y: float) -> None:
    assert_rejected_between_neighbours(line(BASES[base], x=x, y=y), "out of space")


@pytest.mark.parametrize("base", ["pub", "knn", "topk"])
@pytest.mark.parametrize("x,y", [(180, 90), (-180, -90), (180, -90), (-180, 90), (180.0, 0), (0, -90.0)])
def test_default_space_is_closed(base: str, x: float, y: float) -> None:
    ev = accepted(line(BASES[base], x=x, y=y))
    assert (ev.x, ev.y) == (x, y)


CUSTOM = Space(0, 0, 10, 10)


@pytest.mark.parametrize("base,x,y,ok", [
    ("pub", 10, 10, True), ("pub", 0, 0, True), ("pub", 0, 10, True), ("pub", 5, 5, True),
    ("pub", 10.5, 0, False), ("pub", -1, 5, False), ("pub", 5, -0.001, False), ("pub", 5, 10.001, False),
    ("pub", 150, 50, False),  # inside the default space, outside the custom one
    ("knn", 10, 0, True), ("knn", 11, 0, False), ("topk", 0, 10, True), ("topk", -0.5, 10, False),
])
def test_custom_space(base: str, x: float, y: float, ok: bool) -> None:
    raw = line(BASES[base], x=x, y=y)
    if ok:
        assert not isinstance(admit(raw, space=CUSTOM), Rejection)
    else:
        assert_rejected_between_neighbours(raw, "out of space", space=CUSTOM)


@pytest.mark.parametrize("rect,space", [
    ([-200, -100, 200, 100], None), ([170, 80, 500, 500], None), ([-1e6, -1e6, -500, -500], None),
    ([-5, -5, 15, 15], CUSTOM), ([20, 20, 30, 30], CUSTOM),
])
def test_rect_may_reach_outside_the_space(rect: list, space: Space | None) -> None:
    ev = accepted(line(RANGE_SUB, rect=rect), space=space)
    assert ev.rect == tuple(float(v) for v in rect)


@pytest.mark.parametrize("rect", [[0, 0, 0, 0], [1, 1, 1, 2], [-3, 4, -3, 4]])
def test_degenerate_rect_accepted(rect: list) -> None:
    assert isinstance(accepted(line(RANGE_SUB, rect=rect)), Sub)


@pytest.mark.parametrize("rect", [[1, 0, 0, 1], [0, 1, 1, 0], [1, 1, 0, 0], [0.5, 0, 0.4999, 1]])
def test_inverted_rect(rect: list) -> None:
    assert_rejected_between_neighbours(line(RANGE_SUB, rect=rect), "inverted rect")


# --------------------------------------------------------------------------- keywords

@pytest.mark.parametrize("base", ["pub", *SUBS])
@pytest.mark.parametrize("change", [
    {"keywords": []}, {"keywords": ["  ", ""]}, {"keywords": ["\u3000", "\t\n"]},
    {"keywords": DROP, "text": "!!!"}, {"keywords": DROP, "text": ""}, {"keywords": DROP, "text": " - , ; "},
    # keywords are preferred over text, even when they normalise to nothing
    {"keywords": ["  "], "text": "jazz"},
])
def test_no_keywords_after_normalisation(base: str, change: dict) -> None:
    assert_rejected_between_neighbours(line(BASES[base], **change), "no keywords after normalisation")


@pytest.mark.parametrize("change,expected", [
    ({"keywords": ["Jazz", "BAR"]}, ("jazz", "bar")),
    ({"keywords": ["  Jazz  ", "\tbar\n"]}, ("jazz", "bar")),  # stripped
    ({"keywords": ["New York"]}, ("new york",)),  # keywords are not split
    ({"keywords": ["Ｃａｆé"]}, ("café",)),  # full width: NFKC
    ({"keywords": ["Cafe\u0301"]}, ("café",)),  # combining accent composed by NFKC
    ({"keywords": ["ﬁsh"]}, ("fish",)),  # ligature decomposed by NFKC
    ({"keywords": ["STRASSE", "straße", "Strasse"]}, ("strasse",)),  # casefold, duplicates removed
    ({"keywords": ["a", "b", "A", "a ", "b"]}, ("a", "b")),  # duplicates removed, first kept
    ({"keywords": ["", "x", "  "]}, ("x",)),  # empty strings dropped
    ({"keywords": ["\u3000jazz\u3000"]}, ("jazz",)),  # ideographic space: NFKC -> space, stripped
    ({"keywords": ["ΣΊΣΥΦΟΣ"]}, ("σίσυφοσ",)),  # casefold, not lower
    ({"keywords": DROP, "text": "Late jazz at the corner CAFE, jazz!"},
     ("late", "jazz", "at", "the", "corner", "cafe")),
    ({"keywords": DROP, "text": "Ｃａｆé　ＷＩＦＩ"}, ("café", "wifi")),
    ({"keywords": DROP, "text": "STRASSE/straße"}, ("strasse",)),
    ({"keywords": DROP, "text": "snake_case x-y 42"}, ("snake_case", "x", "y", "42")),
    ({"keywords": DROP, "text": "ﬁne-tuned"}, ("fine", "tuned")),
    ({"keywords": DROP, "text": "  ...hello...  "}, ("hello",)),
    # keywords are preferred over text, which is then ignored
    ({"keywords": ["a"], "text": "b c"}, ("a",)),
])
def test_normalisation(change: dict, expected: tuple) -> None:
    for base in ("pub", "knn", "range", "topk"):
        assert accepted(line(BASES[base], **change)).keywords == expected


# --------------------------------------------------------------------------- k, alpha, weights

@pytest.mark.parametrize("base", ["knn", "topk"])
@pytest.mark.parametrize("k,ok", [(0, False), (-1, False), (1001, False), (10 ** 30, False),
                                  (1, True), (2, True), (999, True), (1000, True)])
def test_k_range(base: str, k: int, ok: bool) -> None:
    raw = line(BASES[base], k=k)
    if ok:
        assert accepted(raw).k == k
    else:
        assert_rejected_between_neighbours(raw, "k out of range")


@pytest.mark.parametrize("alpha,ok", [(0, True), (0.0, True), (1, True), (1.0, True), (0.3, True),
                                      (-0.0001, False), (1.0001, False), (-1, False), (2, False)])
def test_alpha_range(alpha: float, ok: bool) -> None:
    raw = line(TOPK_SUB, alpha=alpha)
    if ok:
        assert accepted(raw).alpha == alpha
    else:
        assert_rejected_between_neighbours(raw, "alpha outside [0, 1]")


@pytest.mark.parametrize("weights", [{"a": 0}, {"a": 0.0}, {"a": -1}, {"a": -0.5}, {"b": 2, "a": -3}])
def test_non_positive_weight(weights: dict) -> None:
    assert_rejected_between_neighbours(line(TOPK_SUB, keywords=["a", "b"], weights=weights),
                                       "non-positive weight")


@pytest.mark.parametrize("weights,expected", [
    ({}, (1.0, 1.0, 1.0)),
    ({"jazz": 2}, (2.0, 1.0, 1.0)),
    ({"JAZZ": 2, "Ｂａｒ": 3.5}, (2.0, 3.5, 1.0)),  # keys normalised like keywords
    ({"  Café  ": 4}, (1.0, 1.0, 4.0)),
    ({"jazz": 2, "unknown": 7, "other": 0.5}, (2.0, 1.0, 1.0)),  # keys not among the keywords ignored
    ({"cafe\u0301": 1e-9}, (1.0, 1.0, 1e-9)),
])
def test_weights_normalised(weights: dict, expected: tuple) -> None:
    ev = accepted(line(TOPK_SUB, keywords=["Jazz", "bar", "CAFÉ"], weights=weights))
    assert ev.keywords == ("jazz", "bar", "café")
    assert ev.weights == expected


def test_topk_without_weights() -> None:
    ev = accepted(line(TOPK_SUB))
    assert ev.kind == TOPK and ev.weights is None


# --------------------------------------------------------------------------- expires

@pytest.mark.parametrize("base", SUBS)
@pytest.mark.parametrize("t,expires", [(1, 1), (1, 0.5), (5, -5), (-2, -2)])
def test_sub_expires_not_after_t(base: str, t: float, expires: float) -> None:
    assert_rejected_between_neighbours(line(BASES[base], t=t, expires=expires), "expires not after t")


@pytest.mark.parametrize("t,expires", [(1, 1), (1, 0)])
def test_pub_expires_not_after_t(t: float, expires: float) -> None:
    assert_rejected_between_neighbours(line(PUB, t=t, expires=expires), "expires not after t", window="time:10")


@pytest.mark.parametrize("base", SUBS)
@pytest.mark.parametrize("window", ["none", "count:3", "time:10"])
def test_sub_expires_accepted_under_every_window(base: str, window: str) -> None:
    ev = accepted(line(BASES[base], t=1, expires=1.0001), window=window)
    assert ev.expires == 1.0001


@pytest.mark.parametrize("window", ["none", "count:3", "count:1"])
def test_object_expires_without_time_window(window: str) -> None:
    assert_rejected_between_neighbours(line(PUB, t=1, expires=50), "object expires without a time window",
                                       window=window)


@pytest.mark.parametrize("expires", [1.5, 50, 1e9])
def test_object_expires_under_time_window(expires: float) -> None:
    ev = accepted(line(PUB, t=1, expires=expires), window="time:10")
    assert isinstance(ev, Pub) and ev.expires == expires


def test_object_without_expires() -> None:
    assert accepted(line(PUB), window="time:10").expires is None


# --------------------------------------------------------------------------- accepted odds and ends

def test_valid_events_parse() -> None:
    g = Gate()
    evs = [g.admit_line(line(b), n) for n, b in enumerate([PUB, KNN_SUB, UNSUB], 1)]
    assert [type(e) for e in evs] == [Pub, Sub, Unsub]
    assert [e.seq for e in evs] == [1, 2, 3]
    g = Gate()
    assert g.admit_line(line(RANGE_SUB), 1).kind == RANGE
    assert g.admit_line(line(TOPK_SUB, id="s2"), 2).kind == TOPK
    assert g.admit_line(line(KNN_SUB, id="s3"), 3).kind == KNN


@pytest.mark.parametrize("base", ["pub", *SUBS, "unsub"])
def test_unknown_extra_fields_ignored(base: str) -> None:
    extras = {"color": "red", "nested": {"a": [1, {"b": None}]}, "OP": "PUB", "weight": -1, "n": 1e300}
    g = Gate()
    if base == "unsub":
        assert isinstance(g.admit_line(line(KNN_SUB), 1), Sub)
    ev = g.admit_line(line(BASES[base], **extras), 2)
    assert not isinstance(ev, Rejection), ev


def test_topk_ignores_match() -> None:
    """``match`` is not a top-k field: an unknown extra field, ignored whatever its value."""
    assert isinstance(accepted(line(TOPK_SUB, match="some")), Sub)


@pytest.mark.parametrize("t", [-5, -1e9, -0.5, 0, Raw("-0.0")])
def test_negative_times_allowed(t: Any) -> None:
    g = Gate()
    assert isinstance(g.admit_line(line(KNN_SUB, t=t, expires=1), 1), Sub)
    assert isinstance(g.admit_line(line(PUB, t=t), 2), Pub)


def test_time_kept_as_given() -> None:
    assert accepted(line(PUB, t=7)).t == 7 and isinstance(accepted(line(PUB, t=7)).t, int)
    assert accepted(line(PUB, t=7.25)).t == 7.25


def test_ids_kept_as_given() -> None:
    assert accepted(line(PUB, id=1)).id == 1
    assert accepted(line(PUB, id="1")).id == "1"
    assert accepted(line(PUB, id=-12345678901234567890)).id == -12345678901234567890


def test_crlf_line_endings_via_read_lines(tmp_path) -> None:
    p = tmp_path / "crlf.jsonl"
    p.write_bytes(line(PUB) + b"\r\n" + line(PUB, id="o2") + b"\r\n")
    g = Gate()
    with p.open("rb") as f:
        evs = [g.admit_line(raw, n) for n, raw in read_lines(f)]
    assert [e.id for e in evs] == ["o1", "o2"]


# --------------------------------------------------------------------------- stateful rules

def feed(gate: Gate, raws: list[bytes]) -> list:
    return [gate.admit_line(raw, n) for n, raw in enumerate(raws, 1)]


def kinds(results: list) -> list[str]:
    """'ok' or the error prefix up to the colon, per line."""
    return ["ok" if not isinstance(r, Rejection) else r.error.split(":")[0] for r in results]


def test_time_going_backwards() -> None:
    rs = feed(Gate(), [
        line(PUB, t=5),
        line(PUB, t=4),  # backwards
        line(PUB, t=5),  # equal: fine
        line(PUB, t=4.999),  # backwards
        line(KNN_SUB, t=3),  # backwards, any op
        line(UNSUB, t=2),  # backwards (and unknown id: either reason rejects it)
        line(PUB, t=5.5),
        line(PUB, t=5.5),
    ])
    assert kinds(rs)[:5] == ["ok", "time going backwards", "ok", "time going backwards", "time going backwards"]
    assert isinstance(rs[5], Rejection)
    assert kinds(rs)[6:] == ["ok", "ok"]
    assert [r.line for r in rs if isinstance(r, Rejection)] == [2, 4, 5, 6]


def test_equal_times_accepted_for_every_op() -> None:
    rs = feed(Gate(), [line(PUB, t=3), line(KNN_SUB, t=3), line(UNSUB, t=3), line(RANGE_SUB, t=3)])
    assert kinds(rs) == ["ok"] * 4


def test_rejected_event_does_not_advance_time() -> None:
    rs = feed(Gate(), [
        line(PUB, t=1),
        line(PUB, t=100, x=999),  # rejected (out of space): time stays at 1
        line(PUB, t=100, kind="x", keywords=[]),  # rejected (no keywords)
        b"garbage",
        line(PUB, t=2),  # accepted: the rejected t=100 did not count
    ])
    assert kinds(rs) == ["ok", "out of space", "no keywords after normalisation", "not JSON", "ok"]


def test_rejected_event_triggers_no_expiry() -> None:
    rs = feed(Gate(), [
        line(KNN_SUB, id="s", t=0, expires=10),
        line(KNN_SUB, id="z", t=20, kind="KNN"),  # rejected at t=20: s must not end
        line(KNN_SUB, id="s", t=5),  # still active -> duplicate
        line(UNSUB, id="s", t=5),  # still active -> unsub accepted
    ])
    assert kinds(rs) == ["ok", "unknown kind", "duplicate active subscription id", "ok"]


def test_duplicate_active_subscription_id() -> None:
    rs = feed(Gate(), [
        line(KNN_SUB, id="s"),
        line(RANGE_SUB, id="s"),  # duplicate, whatever the kind
        line(TOPK_SUB, id="s"),
        line(UNSUB, id="s"),
        line(TOPK_SUB, id="s"),  # ended by unsub: the id is free again
        line(KNN_SUB, id="s"),
    ])
    assert kinds(rs) == ["ok", "duplicate active subscription id", "duplicate active subscription id",
                         "ok", "ok", "duplicate active subscription id"]


def test_unknown_unsub_id() -> None:
    rs = feed(Gate(), [
        line(UNSUB, id="nobody"),
        line(KNN_SUB, id="s"),
        line(UNSUB, id="s"),
        line(UNSUB, id="s"),  # already ended
        line(UNSUB, id="S"),  # ids are case-sensitive
    ])
    assert kinds(rs) == ["unknown unsub id", "ok", "ok", "unknown unsub id", "unknown unsub id"]


def test_rejected_sub_does_not_register_its_id() -> None:
    rs = feed(Gate(), [
        line(KNN_SUB, id="s", k=0),  # rejected
        line(UNSUB, id="s"),  # so s is unknown
        line(KNN_SUB, id="s"),  # and free
    ])
    assert kinds(rs) == ["k out of range", "unknown unsub id", "ok"]


@pytest.mark.parametrize("window", ["none", "count:2", "time:3"])
def test_unsub_at_exactly_expires(window: str) -> None:
    rs = feed(Gate(window), [
        line(KNN_SUB, id="s", t=0, expires=10),
        line(UNSUB, id="s", t=10),  # s ended at 10, before this unsub is judged
        line(KNN_SUB, id="s", t=10, expires=20),  # the id is free at 10
        line(UNSUB, id="s", t=19.5),
    ])
    assert kinds(rs) == ["ok", "unknown unsub id", "ok", "ok"]


def test_unsub_just_before_expires() -> None:
    rs = feed(Gate(), [line(RANGE_SUB, id="s", t=0, expires=10), line(UNSUB, id="s", t=9.999),
                       line(UNSUB, id="s", t=9.999)])
    assert kinds(rs) == ["ok", "ok", "unknown unsub id"]


def test_expired_sub_id_reusable_later_and_duplicate_after_reuse() -> None:
    rs = feed(Gate(), [
        line(KNN_SUB, id="s", t=0, expires=10),
        line(PUB, t=15),
        line(KNN_SUB, id="s", t=15),  # no expiry this time
        line(PUB, t=30),
        line(KNN_SUB, id="s", t=30),  # still active: the old expiry of 10 must not end it
        line(UNSUB, id="s", t=31),
    ])
    assert kinds(rs) == ["ok", "ok", "ok", "ok", "duplicate active subscription id", "ok"]


def test_int_and_string_ids_distinct() -> None:
    rs = feed(Gate(), [
        line(KNN_SUB, id=1),
        line(KNN_SUB, id="1"),  # a different id
        line(KNN_SUB, id=1),  # duplicate
        line(UNSUB, id="1"),
        line(UNSUB, id="1"),  # gone
        line(UNSUB, id=1),  # still there
        line(UNSUB, id=1),
    ])
    assert kinds(rs) == ["ok", "ok", "duplicate active subscription id", "ok", "unknown unsub id", "ok",
                         "unknown unsub id"]
    assert [r.id for r in rs if not isinstance(r, Rejection)] == [1, "1", "1", 1]


def test_object_and_subscription_ids_separate() -> None:
    rs = feed(Gate(), [
        line(PUB, id="x"),
        line(UNSUB, id="x"),  # "x" is an object, not a subscription
        line(KNN_SUB, id="x"),  # free as a subscription id
        line(PUB, id="x"),  # duplicate object ids are separate objects: fine
        line(PUB, id="x"),
        line(UNSUB, id="x"),
    ])
    assert kinds(rs) == ["ok", "unknown unsub id", "ok", "ok", "ok", "ok"]


# --------------------------------------------------------------------------- line length

def padded_pub(total: int, ident: str) -> bytes:
    """A valid pub line of exactly ``total`` bytes (the padding is an ignored field)."""
    head = line(PUB, id=ident, pad="")
    assert head.endswith(b'"pad": ""}')
    raw = head[:-2] + b"p" * (total - len(head)) + b'"}'
    assert len(raw) == total
    return raw


def test_admit_line_none_means_too_long() -> None:
    g = Gate()
    r = g.admit_line(None, 7)
    assert isinstance(r, Rejection) and r.line == 7 and r.error.startswith("line longer than")
    assert isinstance(g.admit_line(line(PUB), 8), Pub)


def test_line_longer_than_1_mib(tmp_path) -> None:
    assert MAX_LINE == MiB
    lines = [
        line(PUB, id="first"),  # 1
        b'{"op": "pub", "id": "huge", "pad": "' + b"x" * (2 * MiB) + b'"}',  # 2: 2 MiB
        line(PUB, id="third"),  # 3
        padded_pub(MiB, "exact"),  # 4: exactly 1,048,576 bytes: allowed
        padded_pub(MiB + 1, "over"),  # 5: one byte over
        b"",  # 6: blank
        b"z" * (3 * MiB + 17),  # 7: long garbage
        line(PUB, id="last"),  # 8, no trailing newline
    ]
    p = tmp_path / "events.jsonl"
    p.write_bytes(b"\n".join(lines))
    g = Gate()
    with p.open("rb") as f:
        got = [(n, g.admit_line(raw, n)) for n, raw in read_lines(f)]
    assert [n for n, _ in got] == list(range(1, 9))
    ok = {n: r for n, r in got if not isinstance(r, Rejection)}
    bad = {n: r for n, r in got if isinstance(r, Rejection)}
    assert {n: r.id for n, r in ok.items()} == {1: "first", 3: "third", 4: "exact", 8: "last"}
    assert {n: r.seq for n, r in ok.items()} == {1: 1, 3: 3, 4: 4, 8: 8}
    assert {n: r.error.split(" ")[0:3] for n, r in bad.items()} == {
        2: ["line", "longer", "than"], 5: ["line", "longer", "than"], 6: ["not", "JSON:", "blank"],
        7: ["line", "longer", "than"]}
    assert all(r.line == n for n, r in bad.items())


@pytest.mark.parametrize("size,too_long", [(MiB - 1, False), (MiB, False), (MiB + 1, True)])
def test_line_length_limit_at_end_of_file_without_newline(tmp_path, size: int, too_long: bool) -> None:
    p = tmp_path / "tail.jsonl"
    p.write_bytes(line(PUB, id="a") + b"\n" + padded_pub(size, "b"))
    with p.open("rb") as f:
        got = list(read_lines(f))
    assert [n for n, _ in got] == [1, 2]
    assert (got[1][1] is None) is too_long
    if not too_long:
        assert Gate().admit_line(got[1][1], 2).id == "b"


def test_exact_limit_line_with_crlf(tmp_path) -> None:
    p = tmp_path / "crlf.jsonl"
    p.write_bytes(line(PUB, id="a") + b"\r\n" + padded_pub(MiB, "b") + b"\r\n" + line(PUB, id="c") + b"\r\n")
    with p.open("rb") as f:
        got = list(read_lines(f))
    assert [n for n, _ in got] == [1, 2, 3]
    assert got[1][1] is not None and len(got[1][1]) == MiB
