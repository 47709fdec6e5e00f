"""Seeded random event streams that aim at the hard cases of SPEC.md.

A stream is a list of plain records in the SPEC JSON format (section 3), ready for
:meth:`skpubsub.io.validate.Gate.admit`. The generator is built to make the
corner cases common rather than rare:

- coordinates on a small square lattice (steps that are exact binary fractions),
  so equal distances and equal top-k scores -- ties broken by stream position --
  happen all the time, and points lie exactly on grid cell borders; now and then
  a point sits on the border or corner of the space, or a kNN/top-k centre sits
  off the lattice (rounded distances next to cell borders);
- a small keyword alphabet (2 to 5 letters), written in varied forms that
  normalise to the same keyword (``"A"``, ``" a "``, full-width ``"ａ"``, a
  ``text`` instead of ``keywords``);
- a small pool of object ids (duplicate ids are separate objects) and of
  subscription ids (ids come back after an ``unsub`` or an ``expires``; ``1`` and
  ``"1"`` are different ids);
- ``range``/``knn`` in both ``match`` modes (or the default), ``topk`` with alpha
  0, 1, 0.5 or random and optional ``weights`` (including keys that are ignored);
  ``k`` mostly 1..5, sometimes larger than anything the window holds;
- subscriptions with ``expires``; objects with ``expires`` under a time window;
  equal times, and time jumps that expire many objects and subscriptions at once;
- a window ``none``, ``count:N`` with N in 1..5, or ``time:T``; now and then a
  custom :class:`~skpubsub.core.config.Space`;
- optionally *junk*: records that the Gate must reject (every reason of SPEC
  section 5 that a record can carry: malformed, mistyped, out of range or space,
  non-finite, time going backwards, a duplicate active subscription id, an
  ``unsub`` of an unknown or ended id). Each record is flagged, so a test can
  check the junk is rejected and changes nothing.

Two drivers share the same builder: :func:`random_stream` (deterministic per seed,
``random.Random``) and :func:`streams` (a Hypothesis strategy whose draws shrink
towards short, simple streams).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..core.config import Space, Window

T = TypeVar("T")

ALPHABET = ("a", "b", "c", "d", "e")
_FULLWIDTH = {c: chr(ord(c) - ord("a") + 0xFF41) for c in ALPHABET}  # NFKC folds these to ASCII

# Custom spaces (None is SPEC's default [-180, -90, 180, 90]).
SPACES: tuple[Space | None, ...] = (
    None,
    Space(0.0, 0.0, 10.0, 10.0),
    Space(-4.0, -2.0, 4.0, 2.0),
    Space(0.0, 0.0, 1.0, 1.0),
    Space(-1000.0, 500.0, 1000.0, 1500.0),
)

WINDOW_KINDS = ("none", "count", "time")
TIME_SPANS = (1, 2, 2.5, 3, 5, 10)

JUNK_KINDS = (
    "bad_op", "bad_kind", "missing", "mistyped", "out_of_range", "out_of_space", "no_keywords",
    "non_finite", "expires_not_after", "object_expires", "not_object", "time_backwards",
    "duplicate_sub", "unknown_unsub",
)


# -- sources of choices ------------------------------------------------------------------
class RandomChoices:
    """Choices from a seeded ``random.Random``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def int(self, a: int, b: int) -> int:
        return self.rng.randint(a, b)

    def choice(self, seq: Sequence[T]) -> T:
        return seq[self.rng.randrange(len(seq))]

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def unit(self) -> float:
        return self.rng.random()

    def weighted(self, options: Sequence[tuple[int, T]]) -> T:
        total = sum(w for w, _ in options)
        r = self.rng.randrange(total)
        for w, v in options:
            if r < w:
                return v
            r -= w
        raise AssertionError("unreachable")


class DrawChoices:
    """Choices drawn by Hypothesis; every choice shrinks towards its first/simplest option."""

    def __init__(self, draw: Any) -> None:
        from hypothesis import strategies as st

        self.draw, self.st = draw, st

    def int(self, a: int, b: int) -> int:
        return self.draw(self.st.integers(a, b))

    def choice(self, seq: Sequence[T]) -> T:
        return self.draw(self.st.sampled_from(list(seq)))

    def chance(self, p: float) -> bool:
        if p <= 0.0:
            return False
        if p >= 1.0:
            return True
        return self.draw(self.st.integers(0, 999)) >= round(1000 * (1.0 - p))  # 0 (the shrink target) -> False

    def unit(self) -> float:
        return self.draw(self.st.floats(0.0, 1.0, allow_nan=False))

    def weighted(self, options: Sequence[tuple[int, T]]) -> T:
        total = sum(w for w, _ in options)
        r = self.draw(self.st.integers(0, total - 1))
        for w, v in options:
            if r < w:
                return v
            r -= w
        raise AssertionError("unreachable")


# -- the stream ----------------------------------------------------------------------------
@dataclass
class Stream:
    """Records in stream order; ``junk[i]`` is True when record ``i`` must be rejected."""

    window: str
    space: Space | None
    events: list[Any]
    junk: list[bool]
    seed: int | None = None

    def clean(self) -> list[Any]:
        """The records that must be accepted, in order (what remains without the junk)."""
        return [e for e, j in zip(self.events, self.junk) if not j]

    @property
    def space_or_default(self) -> Space:
        return self.space or Space()

    def to_jsonl(self) -> str:
        return "".join(json.dumps(e) + "\n" for e in self.events)

    def __repr__(self) -> str:  # short: pytest prints it on failure
        n_junk = sum(self.junk)
        return (f"Stream(seed={self.seed}, window={self.window!r}, space={self.space}, "
                f"{len(self.events)} events, {n_junk} junk)")


def _num(v: float) -> int | float:
    """An integral value as a JSON integer (both are valid numbers; ints read better)."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return int(v)
    return v


@dataclass
class _Geometry:
    """A square lattice of points in the space: ``centre + step * (i, j)``, |i|, |j| <= reach."""

    space: Space
    step: float
    cx: float
    cy: float
    reach: int

    @classmethod
    def make(cls, ch: Any, space: Space) -> "_Geometry":
        w, h = space.x2 - space.x1, space.y2 - space.y1
        step = min(w, h) / ch.choice((8, 16, 4, 64, 360, 2))
        nx, ny = int(w // step), int(h // step)
        where = ch.weighted([(5, "middle"), (2, "random"), (1, "corner"), (1, "spread")])
        if where == "middle":
            cx, cy = space.x1 + step * (nx // 2), space.y1 + step * (ny // 2)
        elif where == "corner":
            cx, cy = ch.choice(((space.x1, space.y1), (space.x2, space.y2), (space.x1, space.y2)))
        else:
            cx, cy = space.x1 + step * ch.int(0, nx), space.y1 + step * ch.int(0, ny)
        reach = max(nx, ny) if where == "spread" else ch.int(1, 6)
        return cls(space, step, cx, cy, reach)

    def clamp(self, x: float, y: float) -> tuple[float, float]:
        s = self.space
        return min(s.x2, max(s.x1, x)), min(s.y2, max(s.y1, y))

    def point(self, ch: Any) -> tuple[int | float, int | float]:
        s = self.space
        if ch.chance(0.04):  # on the border (grid cells clamp there)
            x = ch.choice((s.x1, s.x2, self.cx))
            y = ch.choice((s.y1, s.y2, self.cy))
        else:
            x = self.cx + self.step * ch.int(-self.reach, self.reach)
            y = self.cy + self.step * ch.int(-self.reach, self.reach)
        x, y = self.clamp(x, y)
        return _num(x), _num(y)

    def rect(self, ch: Any) -> list[int | float]:
        s = self.space
        shape = ch.weighted([(12, "box"), (2, "all"), (1, "point"), (1, "outside"), (1, "strip")])
        if shape == "all":  # reaches outside the space on every side
            return [_num(s.x1 - self.step), _num(s.y1 - self.step), _num(s.x2 + self.step), _num(s.y2 + self.step)]
        if shape == "outside":
            return [_num(s.x2 + self.step), _num(s.y1), _num(s.x2 + 2 * self.step), _num(s.y2)]
        x, y = self.point(ch)
        if shape == "point":
            return [x, y, x, y]
        if shape == "strip":
            return [_num(s.x1), y, _num(s.x2), y]
        r = self.reach
        return [_num(x - self.step * ch.int(0, r)), _num(y - self.step * ch.int(0, r)),
                _num(x + self.step * ch.int(0, r)), _num(y + self.step * ch.int(0, r))]


class StreamBuilder:
    """Builds one stream record by record, tracking what the Gate will think of each.

    It knows the time of the last accepted event and which subscription ids are
    active (with their ``expires``), so valid records stay valid and junk is
    certainly rejected.
    """

    def __init__(self, ch: Any, window: str, space: Space | None, junk_weight: int = 5) -> None:
        self.ch = ch
        self.window = Window.parse(window)
        self.window_text = window
        self.space = space
        self.geo = _Geometry.make(ch, space or Space())
        self.letters = ALPHABET[: ch.weighted([(1, 2), (2, 3), (2, 4), (2, 5)])]
        pool = ch.int(2, 8)
        self.object_ids: list[Any] = (["o0", "o1", "o2", "o3", 0, 1, "s0", "o4"])[:pool]
        self.sub_pool: list[Any] = (["s0", "s1", 1, "1", "s2", "s3", 0, "s4"])[: ch.int(2, 8)]
        self.junk_weight = junk_weight
        self.now: float | int | None = None  # t of the last accepted event
        self.active: dict[Any, float] = {}  # sub id -> expires (inf) as of `now`
        self.used: list[Any] = []  # sub ids ever accepted
        self.fresh = 0
        self.events: list[Any] = []
        self.junk: list[bool] = []
        self.t0 = ch.weighted([(6, 0), (1, -7), (1, 1000), (1, 0.5)])

    # -- time ----------------------------------------------------------------------------
    def _span(self) -> float:
        return self.window.span if self.window.kind == "time" else 3.0

    def next_time(self) -> int | float:
        if self.now is None:
            return self.t0
        ch = self.ch
        kind = ch.weighted([(45, "same"), (30, "one"), (5, "half"), (12, "few"), (6, "jump")])
        if kind == "same":
            dt: float = 0
        elif kind == "one":
            dt = 1
        elif kind == "half":
            dt = 0.5
        elif kind == "few":
            dt = ch.int(2, 4)
        else:
            dt = ch.choice((self._span(), 2 * self._span(), 3 * self._span() + 1, 50))
        return _num(self.now + dt)

    def active_at(self, t: float) -> list[Any]:
        """Sub ids the Gate considers active for an event at ``t`` (after expiries due at t)."""
        return [i for i, e in self.active.items() if e > t]

    def _commit(self, rec: dict) -> None:
        t = rec["t"]
        self.now = t
        self.active = {i: e for i, e in self.active.items() if e > t}
        if rec["op"] == "sub":
            self.active[rec["id"]] = rec.get("expires", math.inf)
            if rec["id"] not in self.used:
                self.used.append(rec["id"])
        elif rec["op"] == "unsub":
            del self.active[rec["id"]]
        self.events.append(rec)
        self.junk.append(False)

    def _reject(self, rec: Any) -> None:
        self.events.append(rec)
        self.junk.append(True)

    # -- keywords ----------------------------------------------------------------------------
    def _spell(self, w: str) -> str:
        form = self.ch.weighted([(12, 0), (2, 1), (1, 2), (1, 3)])
        return (w, w.upper(), f" {w} ", _FULLWIDTH.get(w, w))[form]

    def words(self, most: int = 3) -> list[str]:
        ch = self.ch
        n = ch.int(1, most)
        return [ch.choice(self.letters) for _ in range(n)]  # duplicates are dropped by the Gate

    def keyword_fields(self, rec: dict, most: int = 3) -> dict:
        ws = self.words(most)
        if self.ch.chance(0.15):
            seps = (" ", ", ", "! ", "-", "\t")
            rec["text"] = "".join(self._spell(w).strip() + self.ch.choice(seps) for w in ws)
            if self.ch.chance(0.2):  # keywords win over text
                rec["keywords"] = [self._spell(w) for w in ws]
                rec["text"] = "zzz yyy"
        else:
            rec["keywords"] = [self._spell(w) for w in ws]
        return rec

    # -- records -----------------------------------------------------------------------------
    def pub(self, t: Any, ident: Any = None) -> dict:
        ch = self.ch
        if ident is None:
            ident = ch.choice(self.object_ids) if ch.chance(0.85) else f"u{len(self.events)}"
        x, y = self.geo.point(ch)
        rec = self.keyword_fields({"op": "pub", "id": ident, "t": t, "x": x, "y": y})
        if self.window.kind == "time" and ch.chance(0.3):
            span = self.window.span
            rec["expires"] = _num(t + ch.choice((1, 0.5, span, 2 * span, span + 1, span / 2, 2)))
        if ch.chance(0.03):
            rec["extra"] = {"ignored": True}
        return rec

    def sub_id(self, t: Any) -> Any:
        ch = self.ch
        busy = set(map(_key, self.active_at(t)))
        free = [i for i in self.sub_pool if _key(i) not in busy]
        ended = [i for i in self.used if _key(i) not in busy]
        if ended and ch.chance(0.4):
            return ch.choice(ended)  # re-subscribe a previously used id
        if free:
            return ch.choice(free)
        self.fresh += 1
        return f"n{self.fresh}"

    def sub(self, t: Any, ident: Any) -> dict:
        ch = self.ch
        kind = ch.weighted([(3, "knn"), (3, "topk"), (3, "range")])
        rec: dict = {"op": "sub", "id": ident, "t": t, "kind": kind}
        self.keyword_fields(rec, most=3)
        if kind == "range":
            rec["rect"] = self.geo.rect(ch)
        else:
            rec["x"], rec["y"] = self.geo.point(ch)
            if ch.chance(0.15):  # off the lattice: distances round, so regions must allow for it
                rec["x"], rec["y"] = self.geo.clamp(rec["x"] + self.geo.step * ch.unit(),
                                                    rec["y"] - self.geo.step * ch.unit())
            rec["k"] = ch.weighted([(30, 1), (25, 2), (20, 3), (10, 4), (8, 5), (6, 8), (1, 1000)])
        if kind in ("range", "knn"):
            m = ch.weighted([(2, "all"), (2, "any"), (1, None)])
            if m is not None:
                rec["match"] = m
        else:
            rec["alpha"] = ch.weighted([(3, 0), (3, 1), (2, 0.5), (4, "random")])
            if rec["alpha"] == "random":
                rec["alpha"] = ch.unit()
            if ch.chance(0.35):
                kws = rec.get("keywords") or [ch.choice(self.letters)]
                weights = {self._spell(w): ch.choice((2, 0.5, 3, 1, 0.25, 10)) for w in kws if ch.chance(0.7)}
                if ch.chance(0.2):
                    weights["zz"] = 5  # not a keyword of the subscription: ignored
                rec["weights"] = weights
            if ch.chance(0.05):
                rec["match"] = "all"  # not a top-k field: ignored
        if ch.chance(0.25):
            rec["expires"] = _num(t + ch.choice((1, 2, 0.5, 3, 5, 10)))
        return rec

    def unsub(self, t: Any, ident: Any) -> dict:
        return {"op": "unsub", "id": ident, "t": t}

    # -- junk --------------------------------------------------------------------------------
    def junk_record(self, t: Any) -> Any:
        """A record the Gate must reject, at time ``t`` (>= now) unless it is about time."""
        ch = self.ch
        what = ch.choice(JUNK_KINDS)
        if what == "time_backwards" and self.now is None:
            what = "bad_op"
        if what == "object_expires" and self.window.kind == "time":
            what = "expires_not_after"
        busy = self.active_at(t)
        if what == "duplicate_sub" and not busy:
            what = "unknown_unsub"
        base = self.pub(t) if ch.chance(0.4) else self.sub(t, self.sub_id(t))
        if what == "bad_op":
            base["op"] = ch.choice(("PUB", "Sub", "publish", "", None, 3))
        elif what == "bad_kind":
            base = self.sub(t, self.sub_id(t))
            base["kind"] = ch.choice(("KNN", "circle", "Range", "top-k", None))
        elif what == "missing":
            need = ["op", "id", "t"]
            if base["op"] == "pub":
                need += ["x", "y", "keywords"]
            else:
                need += ["kind", "keywords"]
                need += ["rect"] if base["kind"] == "range" else ["x", "y", "k"]
                need += ["alpha"] if base["kind"] == "topk" else []
            gone = ch.choice(need)
            base.pop(gone, None)
            if gone == "keywords":
                base.pop("text", None)
        elif what == "mistyped":
            options = [("id", 1.5), ("id", True), ("id", None), ("id", ["s1"]), ("t", "5"), ("t", None),
                       ("t", True), ("keywords", "a"), ("keywords", [1]), ("keywords", {"a": 1})]
            if base["op"] == "pub":
                options += [("x", "1"), ("y", None), ("x", True)]
            elif base["kind"] == "range":
                options += [("rect", [0, 0, 1]), ("rect", "0,0,1,1"), ("rect", [0, 0, "1", 1]),
                            ("rect", [0, 0, True, 1]), ("match", True)]
            else:
                options += [("k", 2.0), ("k", True), ("k", "3"), ("k", None), ("x", "0")]
                if base["kind"] == "topk":
                    options += [("alpha", "0.5"), ("weights", [1]), ("weights", {"a": "2"}),
                                ("weights", {"b": True})]
            name, value = ch.choice(options)
            base[name] = value
            if name == "keywords":
                base.pop("text", None)
        elif what == "out_of_range":
            if base["op"] == "pub" or base["kind"] == "range":
                base = self.sub(t, self.sub_id(t))
            options: list = [("match", "some"), ("match", "ALL")]
            if base["kind"] == "range":
                x1, y1, _, _ = base["rect"]
                options += [("rect", [x1 + 1, y1, x1, y1 + 1]), ("rect", [x1, y1 + 1, x1 + 1, y1])]
            else:
                options = [("k", 0), ("k", 1001), ("k", -1)]
                if base["kind"] == "topk":
                    options += [("alpha", 1.5), ("alpha", -0.25), ("weights", {"a": 0}),
                                ("weights", {"b": -2}), ("weights", {"c": 1e400})]
                else:
                    options += [("match", "some"), ("match", "ALL")]
            name, value = ch.choice(options)
            base[name] = value
        elif what == "out_of_space":
            if base["op"] == "sub" and base["kind"] == "range":
                base = self.pub(t)
            s = self.space or Space()
            name, value = ch.choice((("x", s.x2 + 0.5), ("x", s.x1 - 1), ("y", s.y2 + 1e-9), ("y", s.y1 - 100)))
            base[name] = value
        elif what == "no_keywords":
            base.pop("keywords", None)
            base.pop("text", None)
            if ch.chance(0.5):
                base["keywords"] = ch.choice(([], ["", "  "], ["\t"]))
            else:
                base["text"] = ch.choice(("", "!!! ...", " - "))
        elif what == "non_finite":
            name = ch.choice(("t", "x", "expires") if base["op"] == "pub" or base["kind"] != "range"
                             else ("t", "expires", "rect"))
            if name == "rect":
                base["rect"] = [base["rect"][0], base["rect"][1], math.inf, base["rect"][3]]
            else:
                base[name] = ch.choice((math.inf, -math.inf, math.nan))
            if name == "expires" and base["op"] == "pub" and self.window.kind != "time":
                pass  # rejected either way
        elif what == "expires_not_after":
            if base["op"] == "pub" and self.window.kind != "time":
                base = self.sub(t, self.sub_id(t))
            base["expires"] = _num(t - ch.choice((0, 0, 1, 0.5)))
        elif what == "object_expires":
            base = self.pub(t)
            base["expires"] = _num(t + ch.choice((1, 10)))
        elif what == "not_object":
            return ch.choice((["pub"], "pub", 3, None, [base]))
        elif what == "time_backwards":
            assert self.now is not None
            back = _num(self.now - ch.choice((1, 0.5, 100)))
            if ch.chance(0.3) and self.active:
                base = self.unsub(back, ch.choice(list(self.active)))
            else:
                base["t"] = back
                if "expires" in base:
                    base["expires"] = _num(self.now + 1)
        elif what == "duplicate_sub":
            base = self.sub(t, ch.choice(busy))
        elif what == "unknown_unsub":
            ended = [i for i in self.used if i not in busy]
            confusable = [("1" if i == 1 else 1) for i in busy if i in (1, "1")]
            options = ["never", "o0"] + (["ended"] if ended else []) + (["confusable"] if confusable else [])
            how = ch.choice(options)
            ident = {"never": f"zz{len(self.events)}", "o0": "o0"}.get(how)
            if how == "ended":
                ident = ch.choice(ended)
            elif how == "confusable":
                ident = confusable[0]
            if ident in busy:  # "o0" may be an active sub id
                ident = f"zz{len(self.events)}"
            base = self.unsub(t, ident)
        return base

    # -- one step ----------------------------------------------------------------------------
    def step(self) -> None:
        ch = self.ch
        t = self.next_time()
        op = ch.weighted([(50, "pub"), (27, "sub"), (11, "unsub"), (self.junk_weight, "junk")])
        if op == "junk" and self.junk_weight:
            self._reject(self.junk_record(t))
            return
        if op == "unsub":
            busy = self.active_at(t)
            if busy:
                self._commit(self.unsub(t, ch.choice(busy)))
                return
            op = "sub"
        if op == "sub" or (self.now is None and ch.chance(0.5)):
            self._commit(self.sub(t, self.sub_id(t)))
        else:
            self._commit(self.pub(t))

    def build(self, n_events: int, seed: int | None = None) -> Stream:
        while len(self.events) < n_events:
            self.step()
        return Stream(self.window_text, self.space, self.events, self.junk, seed)


def _key(ident: Any) -> tuple[str, Any]:
    """Ids compare as given: ``1`` and ``"1"`` differ (and True is never an id)."""
    return (type(ident).__name__, ident)


# -- drivers -------------------------------------------------------------------------------
def random_window(ch: Any, kinds: Sequence[str] = WINDOW_KINDS) -> str:
    kind = ch.choice(tuple(kinds))
    if kind == "count":
        return f"count:{ch.weighted([(3, 1), (3, 2), (3, 3), (2, 4), (2, 5), (1, 8)])}"
    if kind == "time":
        return f"time:{ch.choice(TIME_SPANS)}"
    return "none"


def random_space(ch: Any) -> Space | None:
    return ch.choice(SPACES) if ch.chance(0.25) else None


_DEFAULT = object()


def _junk_weight(junk: bool | int) -> int:
    if isinstance(junk, bool):
        return 5 if junk else 0
    return max(0, int(junk))


def random_stream(seed: int, n_events: int | tuple[int, int] = (20, 150), window: str | None = None,
                  space: Any = _DEFAULT, junk: bool | int = True, windows: Sequence[str] = WINDOW_KINDS) -> Stream:
    """One stream, deterministic per ``seed`` (and arguments).

    ``n_events``: an exact count or a (low, high) range; ``window``: fixed, else drawn
    from ``windows`` kinds; ``space``: fixed (None = default), else drawn; ``junk``:
    whether to mix in records that must be rejected (True: about 5% of the records;
    an int: the weight of junk against 88 for valid records).
    """
    ch = RandomChoices(random.Random(f"skpubsub-stream-{seed}"))
    if window is None:
        window = random_window(ch, windows)
    if space is _DEFAULT:
        space = random_space(ch)
    n = n_events if isinstance(n_events, int) else ch.int(*n_events)
    return StreamBuilder(ch, window, space, junk_weight=_junk_weight(junk)).build(n, seed)


def random_streams(seeds: Sequence[int] | range, **kwargs: Any):
    """``random_stream(seed, **kwargs)`` for each seed (a generator)."""
    for seed in seeds:
        yield random_stream(seed, **kwargs)


def streams(min_events: int = 1, max_events: int = 60, windows: Sequence[str] | None = None,
            window: str | None = None, space: Any = _DEFAULT, junk: bool | int = True):
    """A Hypothesis strategy of :class:`Stream` built by the same builder from draws.

    Every choice is a Hypothesis draw, so a failing stream shrinks towards fewer,
    simpler events. ``windows`` restricts the window kinds; ``window`` fixes it.
    """
    from hypothesis import strategies as st

    kinds = tuple(windows) if windows is not None else WINDOW_KINDS

    @st.composite
    def _streams(draw: Any) -> Stream:
        ch = DrawChoices(draw)
        w = window if window is not None else random_window(ch, kinds)
        sp = random_space(ch) if space is _DEFAULT else space
        n = draw(st.integers(min_events, max_events))
        return StreamBuilder(ch, w, sp, junk_weight=_junk_weight(junk)).build(n)

    return _streams()
