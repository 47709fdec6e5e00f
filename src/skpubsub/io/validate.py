"""Validation at the edge (SPEC section 5): every bad event gets a specific reason.

:class:`Gate` turns raw lines (or already-parsed records) into :mod:`events`, in
stream order.  It is stateful only in what SPEC makes stateful: the time of the
last accepted event and which subscription ids are active (for the duplicate-id
and unknown-``unsub`` rules, judged after the expiries due at the event's ``t``).
A rejected event changes nothing here either.
"""

from __future__ import annotations

import heapq
import json
import math
from itertools import count, islice
from operator import attrgetter, le, mul
from typing import Any

import msgspec
from msgspec import UNSET

from ..core.config import Space, Window
from .events import (KINDS, KNN, MAX_K, RANGE, TOPK, UNREADABLE, Event, Packed, Pub, PubBlock, Rects, Rejection, Sub,
                     SubBlock, Unsub, op_label, packed)
from . import fastline, rawsubs
from .keywords import normalise, normalise_keywords, split_text
from .blockcheck import MATCH_ALL_KNN, MATCH_ALL_RANGE, ends_past, inside, normal_words, one_object_a_line, rects_ordered, weights_column
from .lexicon import LEX_MAX, Lexicon, Words

MAX_LINE = 1_048_576  # bytes, without the newline


class Invalid(ValueError):
    """An event that breaks SPEC; the message is the rejection reason, ``label`` what the
    event meant to be (:func:`record_label`) when a line that is not JSON still reads."""

    def __init__(self, reason: str, label: str = UNREADABLE) -> None:
        super().__init__(reason)
        self.label = label


def record_label(rec: Any) -> str:
    """What a parsed record meant to be, for the metrics (``op_label`` of its op and kind),
    whether or not it is valid; ``UNREADABLE`` if it has no string ``op``."""
    if not isinstance(rec, dict) or not isinstance(rec.get("op"), str):
        return UNREADABLE
    kind = rec.get("kind")
    return op_label(rec["op"], kind if isinstance(kind, str) else None)


# The rejection of a bare NaN/Infinity. The prefix is doubled as these rejections have
# always read (the reason was once raised inside the parse and prefixed again).
_BARE = "not JSON: not JSON: bare {} is not allowed"


def _read(text: str) -> tuple[Any, str | None, list[str]]:
    """Parse ``text`` once: (value, why it is not JSON or None, the bare constants read).
    Bare ``NaN``/``Infinity`` read on as floats (so the record still shows its op); the
    caller rejects them, the first one being the reason whatever breaks after it."""
    bare: list[str] = []

    def constant(name: str) -> float:
        bare.append(name)
        return float(name)

    try:
        return json.loads(text, parse_constant=constant), None, bare
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {exc.msg} at column {exc.colno}", bare
    except RecursionError:
        return None, "not JSON: nested too deeply", bare
    except ValueError as exc:  # e.g. an integer literal over Python's digit limit
        return None, f"not JSON: {exc}", bare


# SPEC section 6, "Text": a string anywhere in an event that is not valid Unicode (a lone
# surrogate, legal as a JSON escape such as "\ud800") rejects the event; it could not be
# written to any output.
INVALID_UNICODE = "invalid unicode"


def _valid_unicode(v: Any) -> bool:
    """No lone surrogate in any string of ``v`` (keys included). O(size of v)."""
    if isinstance(v, str):
        if v.isascii():
            return True
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(v, dict):
        return all(_valid_unicode(k) and _valid_unicode(x) for k, x in v.items())
    if isinstance(v, list):
        return all(_valid_unicode(x) for x in v)
    return True


def _replace_surrogates(text: str) -> str:
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _valid_label(rec: dict) -> str:
    """``record_label``, unless the op or kind itself is not valid Unicode (metrics keys)."""
    label = record_label(rec)
    return label if _valid_unicode(label) else UNREADABLE


def parse_line(raw: bytes) -> dict:
    """Decode one line (without its newline) into a JSON object, or raise Invalid (with the
    line's ``label`` when it is JSON but for a bad byte or a bare constant)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        value, error, _ = _read(raw.decode("utf-8", "replace"))
        raise Invalid(f"not JSON: invalid UTF-8 at byte {exc.start}",
                      UNREADABLE if error else record_label(value)) from None
    if not text.strip():
        raise Invalid("not JSON: blank line")
    value, error, bare = _read(text)
    if bare:
        raise Invalid(_BARE.format(bare[0]), UNREADABLE if error else record_label(value))
    if error:
        raise Invalid(error)
    if not isinstance(value, dict):
        raise Invalid(f"not an object: got a JSON {_json_type(value)}")
    return value


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _field(rec: dict, name: str) -> Any:
    if name not in rec:
        raise Invalid(f"missing field: {name}")
    return rec[name]


def _number(rec: dict, name: str) -> float:
    """A finite JSON number (booleans are not numbers), as a float."""
    v = _field(rec, name)
    return _as_number(v, name)


def _as_number(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Invalid(f"mistyped field: {name} must be a number, got {_json_type(v)}")
    try:
        f = float(v)
    except OverflowError:
        raise Invalid(f"non-finite number: {name}") from None
    if not math.isfinite(f):
        raise Invalid(f"non-finite number: {name}")
    return f


def _id(rec: dict) -> int | str:
    v = _field(rec, "id")
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise Invalid(f"mistyped field: id must be a string or an integer, got {_json_type(v)}")
    return v


def _time(rec: dict) -> int | float:
    v = _field(rec, "t")
    _as_number(v, "t")
    return v  # kept as given (an int stays an int in the outputs)


def _keywords(rec: dict) -> tuple[str, ...]:
    if "keywords" in rec:
        kws = rec["keywords"]
        if not isinstance(kws, list) or not all(isinstance(w, str) for w in kws):
            raise Invalid("mistyped field: keywords must be an array of strings")
        out = normalise_keywords(kws)
    elif "text" in rec:
        text = rec["text"]
        if not isinstance(text, str):
            raise Invalid(f"mistyped field: text must be a string, got {_json_type(text)}")
        out = split_text(text)
    else:
        raise Invalid("missing field: keywords (or text)")
    if not out:
        raise Invalid("no keywords after normalisation")
    return out


def _point(rec: dict, space: Space) -> tuple[float, float]:
    x, y = _number(rec, "x"), _number(rec, "y")
    if not space.contains(x, y):
        raise Invalid(f"out of space: ({x:g}, {y:g}) is outside [{space}]")
    return x, y


def _match(rec: dict, default: str) -> bool:
    m = rec.get("match", default)
    if m not in ("all", "any"):
        raise Invalid(f"bad match: {m!r} (use 'all' or 'any')")
    return m == "all"


def _expires(rec: dict, t: int | float) -> int | float | None:
    if "expires" not in rec:
        return None
    e = rec["expires"]
    _as_number(e, "expires")
    if not e > t:  # exact, also for integers above 2**53 (SPEC section 6, "Times")
        raise Invalid(f"expires not after t: expires={e:g} <= t={t:g}")
    return e  # kept as given, like t: an integer expiry stays exact


def validate_record(rec: dict, seq: int, window: Window, space: Space) -> Event:
    """Check one parsed record against SPEC; the stateless part of validation."""
    op = _field(rec, "op")
    if op not in ("sub", "pub", "unsub"):
        raise Invalid(f"unknown op: {op!r}")
    ident = _id(rec)
    t = _time(rec)
    if op == "unsub":
        return Unsub(seq, ident, t)
    if op == "pub":
        x, y = _point(rec, space)
        kws = _keywords(rec)
        expires = _expires(rec, t)
        if expires is not None and window.kind != "time":
            raise Invalid(f"object expires without a time window (window is {window})")
        return Pub(seq, ident, t, x, y, kws, expires)
    kind = _field(rec, "kind")
    if kind not in KINDS:
        raise Invalid(f"unknown kind: {kind!r}")
    kws = _keywords(rec)
    expires = _expires(rec, t)
    if kind == RANGE:
        rect = _field(rec, "rect")
        if not isinstance(rect, list) or len(rect) != 4:
            raise Invalid("mistyped field: rect must be an array of 4 numbers")
        r = tuple(_as_number(v, "rect") for v in rect)
        if r[0] > r[2] or r[1] > r[3]:
            raise Invalid(f"inverted rect: {list(rect)} needs x1<=x2 and y1<=y2")
        return Sub(seq, ident, t, RANGE, kws, match_all=_match(rec, "all"), rect=r, expires=expires)  # type: ignore[arg-type]
    x, y = _point(rec, space)
    k = _field(rec, "k")
    if isinstance(k, bool) or not isinstance(k, int):
        raise Invalid(f"mistyped field: k must be an integer, got {_json_type(k)}")
    if not 1 <= k <= MAX_K:
        raise Invalid(f"k out of range: {k} (1..{MAX_K})")
    if kind == KNN:
        return Sub(seq, ident, t, KNN, kws, match_all=_match(rec, "any"), x=x, y=y, k=k, expires=expires)
    alpha = _number(rec, "alpha")
    if not 0.0 <= alpha <= 1.0:
        raise Invalid(f"alpha outside [0, 1]: {alpha:g}")
    return Sub(seq, ident, t, TOPK, kws, x=x, y=y, k=k, alpha=alpha,
               weights=_weights(rec, kws), expires=expires)


def _weights(rec: dict, kws: tuple[str, ...]) -> tuple[float, ...] | None:
    if "weights" not in rec:
        return None
    raw = rec["weights"]
    if not isinstance(raw, dict):
        raise Invalid(f"mistyped field: weights must be an object, got {_json_type(raw)}")
    given: dict[str, float] = {}
    for key, v in raw.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise Invalid(f"mistyped field: weight of {key!r} must be a number")
        try:
            w = float(v)
        except OverflowError:
            w = math.inf
        if not math.isfinite(w):
            raise Invalid(f"non-finite weight: {key!r}")
        if w <= 0:
            raise Invalid(f"non-positive weight: {key!r} = {w:g}")
        given[normalise(key)] = w  # keys normalise like keywords; a later duplicate wins
    return tuple(given.get(w, 1.0) for w in kws)


# Column readers of fastline.Strict records, for Gate._columns (its tests: blockcheck).
_OP, _ID, _T, _KIND = attrgetter("op"), attrgetter("id"), attrgetter("t"), attrgetter("kind")
_X, _Y, _K, _RECT = attrgetter("x"), attrgetter("y"), attrgetter("k"), attrgetter("rect")
_KEYWORDS, _MATCH, _EXPIRES = attrgetter("keywords"), attrgetter("match"), attrgetter("expires")
_ALPHA, _WEIGHTS = attrgetter("alpha"), attrgetter("weights")
_UNSET_ONLY = {UNSET}
_SUB_OPENING = b'{"op":"sub"'  # a block a coded Gate first reads as subscriptions (``_raw_columns``)


class Gate:
    """Admits events in stream order; see the module docstring.

    ``admit_line`` is O(line length); the active-id bookkeeping is O(log S) per
    subscription with expiry.
    """

    def __init__(self, window: Window | str = "none", space: Space | None = None, coded: bool = False) -> None:
        self.window = Window.parse(window) if isinstance(window, str) else window
        # ``coded``: a SubBlock's keywords as codes (``lexicon.Words``), numbered here
        self.lexicon: Lexicon | None = Lexicon() if coded else None
        self.space = space or Space()
        self.last_t: int | float | None = None
        # The active sub ids: one insertion an id admitted, one deletion an id that ends.
        self._active: set[Any] = set()
        # sub id -> (expires as given, its seq), for those with one (the seq tells the heap's
        # entry of an ended registration from a reuse of its id)
        self._expires: dict[Any, tuple[int | float, int]] = {}
        self._ends: list[tuple[int | float, int, Any]] = []  # heap of (expires, seq, id): when ids end
        self._seq = 0
        self.block_label: str | None = None  # the label of every event of the last block, if one

    def admit_line(self, raw: bytes | None, line: int) -> Event | Rejection:
        """One input line; ``raw is None`` means it was longer than MAX_LINE."""
        if raw is None:
            return Rejection(line, f"line longer than {MAX_LINE} bytes", "")
        try:  # the common case (fastline); whatever it does not accept is judged below
            rec = fastline.decode(raw)
        except (msgspec.MsgspecError, ValueError, OverflowError):  # not JSON, bad UTF-8, a type it does not take
            rec = None
        return self._admit_decoded(rec, raw, line)

    def _admit_decoded(self, rec: Any, raw: bytes, line: int) -> Event | Rejection:
        """``admit_line`` of ``raw`` once the fast path has decoded it (``rec``, or None when
        it could not): the event ``fastline.event`` makes of it if the Gate's state takes it
        as is, else the slow path's judgement (``parse_line``, ``admit``)."""
        try:
            ev = None if rec is None else fastline.event(rec, line, self.window, self.space)
        except (ValueError, OverflowError):  # a time past float range
            ev = None
        if ev is not None:  # _check_state and _accept without the exception, inlined: per line
            t, last = ev.t, self.last_t
            if last is None or not t < last:
                cls = type(ev)
                if cls is Pub or self._is_active(ev.id, t) == (cls is Unsub):  # a sub's id free, an unsub's taken
                    self._accept(ev)
                    self._seq = line
                    return ev
        try:
            rec = parse_line(raw)
        except Invalid as exc:
            return Rejection(line, str(exc), raw.decode("utf-8", "replace"), exc.label)
        return self.admit(rec, line, raw)

    def admit_block(self, first: int, lines: bytes | list[bytes | None],
                    n: int | None = None) -> list[Event | Rejection] | SubBlock | PubBlock:
        """``admit_line`` of each of ``lines``, numbered from ``first``: the same events and
        rejections in the same order, at a fraction of the cost a line (see io/NOTES.md);
        a block of subscriptions or of objects judged by columns comes as their
        :class:`SubBlock` or :class:`PubBlock` (a sequence of the same events, kept as
        columns).
        ``lines``: a list as ``stream_lines`` gives them, or (``stream_blocks``) the bytes
        of lines without CR joined by ``\n``; ``n``, how many (counted when not given).

        The lines are decoded by msgspec into :class:`fastline.Strict` records: the whole
        buffer in one call when every line is one object (:func:`blockcheck.one_object_a_line`),
        else a C call a line; a line that does not decode (not JSON, a constraint broken,
        an over-long line's None) is left to ``admit_line``. A block of one op (and kind)
        with nothing unusual is then checked and made into events by whole columns
        (:meth:`_columns`; ``block_label`` is then their label, else None); any other
        block, event by event as ``admit_line``."""
        recs: list = []
        self.block_label = None
        if type(lines) is bytes:
            n = lines.count(b"\n") + 1 if n is None else n
            if one_object_a_line(lines, n):
                if self.lexicon is not None and lines.startswith(_SUB_OPENING):
                    out = self._scanned(first, lines, n)
                    if out is None:
                        out = self._raw_columns(first, lines, n)
                    if out is not None:
                        return out
                try:
                    recs = fastline.decode_strict_lines(lines)
                except Exception:  # noqa: BLE001 - line by line below finds which
                    recs = []
                if len(recs) == n:
                    out = self._columns(first, recs)
                    if out is not None:
                        return out
                else:
                    recs = []
            lines = lines.split(b"\n")
        n = len(lines)
        whole = bool(recs)
        if not recs:
            decode = fastline.decode_strict
            whole = True
            while len(recs) < n:
                try:  # extend keeps what it took before a line failed: only that line is redone
                    recs.extend(map(decode, islice(lines, len(recs), None)))
                except Exception:  # noqa: BLE001 - whatever it is, admit_line judges the line
                    recs.append(None)
                    whole = False
            if whole:
                out = self._columns(first, recs)
                if out is not None:
                    return out
        admit = self._admit_decoded
        return [self.admit_line(raw, line) if rec is None else admit(rec, raw, line)
                for line, raw, rec in zip(count(first), lines, recs)]

    def _raw_columns(self, first: int, lines: bytes, n: int) -> SubBlock | None:
        """``_columns`` of a coded Gate's subscriptions, their keywords coded from the lines'
        bytes; None when the block is anything else (it then goes the usual way)."""
        try:
            recs = fastline.decode_raw_lines(lines)
        except Exception:  # noqa: BLE001 - the usual way finds which line
            return None
        if len(recs) != n or UNSET in (raws := list(map(_KEYWORDS, recs))):
            return None
        words = self._coded(raws, raw=True)
        return None if words is None else self._columns(first, recs, words)

    def _scanned(self, first: int, lines: bytes, n: int) -> SubBlock | None:
        """``_raw_columns`` of a block that ``rawsubs`` reads whole from its bytes: the same
        tests as ``_columns`` makes of a block of range or kNN subscriptions, over arrays;
        None when the block is anything else."""
        got = rawsubs.scan_block(lines, n)
        if got is None:
            return None
        ints, floats = got.ints, got.floats
        kind = ints[:, rawsubs.KIND]
        if kind.min() != kind.max():
            return None
        floated = ints[:, rawsubs.T_FLOAT]
        if floated.min() != floated.max():  # ints and floats: the records' own path
            return None
        tcol = floats[:, rawsubs.T] if floated[0] else ints[:, rawsubs.T_INT]
        ts = packed(tcol)  # (Python numbers: compared with the last exactly)
        last = self.last_t
        if last is not None and ts[0] < last or bool((tcol[1:] < tcol[:-1]).any()):
            return None  # time going backwards somewhere: event by event
        ends = self._ends
        if ends and ends[0][0] <= ts[-1]:  # an expiry falls in the block: event by event
            return None
        words = self._coded((lines, ints[:, rawsubs.KW_A], ints[:, rawsubs.KW_B]), spans=True)
        if words is None:
            return None
        match = ints[:, rawsubs.MATCH]
        ids = got.ids
        if kind[0] == rawsubs.RANGE_CODE:
            rect = floats[:, rawsubs.X1:rawsubs.Y2 + 1]
            if not ((rect[:, 0] <= rect[:, 2]).all() and (rect[:, 1] <= rect[:, 3]).all()):
                return None
            out = SubBlock(seq=range(first, first + n), id=ids, t=ts, kind=Packed.of([RANGE] * n, (mul, ([RANGE], n))),
                           keywords=words, match_all=packed(match != rawsubs.MATCH_ANY), rect=Rects(rect.copy()))
            label = op_label("sub", RANGE)
        else:
            xs, ys, ks = packed(floats[:, rawsubs.X]), packed(floats[:, rawsubs.Y]), ints[:, rawsubs.K]
            if ks.min() < 1 or ks.max() > MAX_K or not inside(self.space, xs, ys):
                return None
            out = SubBlock(seq=range(first, first + n), id=ids, t=ts, kind=Packed.of([KNN] * n, (mul, ([KNN], n))),
                           keywords=words, match_all=packed(match == rawsubs.MATCH_ALL), x=xs, y=ys, k=packed(ks))
            label = op_label("sub", KNN)
        if not self._claim(ids):
            return None
        self.block_label = label
        self.last_t = ts[-1]
        self._seq = first + n - 1
        return out

    def _columns(self, first: int, recs: list, coded: Words | None = None) -> SubBlock | PubBlock | None:
        """The events of a block of decoded records when the block is one op (``pub``) or one
        kind of ``sub`` (``range``, ``knn``, ``topk``; their ends, if any, past the block)
        and every record passes, judged by columns (keywords to normalise, texts and top-k
        weights made as ``fastline.event`` makes them); None
        (and nothing changed) when any record needs a closer look. Subscriptions are handed
        on as their columns (a :class:`SubBlock`, no ``Sub`` a record), objects likewise (a
        :class:`PubBlock`). Each test is the one
        ``fastline.event`` and ``_admit_decoded`` make of one record, over the column, with
        C loops (``map``, ``min``, set operations) instead of a Python step a record.
        ``coded``: a subscription block's keyword column made already (``_raw_columns``)."""
        ops = set(map(_OP, recs))
        if len(ops) != 1:
            return None
        op = ops.pop()
        if coded is not None and op != "sub":
            return None
        exps = list(map(_EXPIRES, recs))
        timed = set(exps) != _UNSET_ONLY
        if op == "unsub" or timed and op == "pub" and self.window.kind != "time":  # the line path says why
            return None
        ts = list(map(_T, recs))
        last = self.last_t
        if last is not None and ts[0] < last or not all(map(le, ts, islice(ts, 1, None))):
            return None  # time going backwards somewhere: event by event
        try:  # in order, so every t lies between these two: none is past float range
            float(ts[0]), float(ts[-1])  # (the OverflowError fastline.event sends on)
        except OverflowError:
            return None
        ends = self._ends
        if ends and ends[0][0] <= ts[-1]:  # an expiry falls in the block: event by event
            return None
        exps = ends_past(exps, ts, op == "sub") if timed else None
        if timed and exps is None:
            return None
        kws = kw_col = coded  # (None unless ``_raw_columns`` made it)
        numbered = self.lexicon is not None and op == "sub"  # a SubBlock's keywords numbered here
        if coded is None:
            kws = list(map(_KEYWORDS, recs))
            if all(kws):  # each record's keywords given, none empty (UNSET is false)
                kw_col = self._coded(kws) if numbered else kws if normal_words(kws) else None  # (``_coded`` tests them)
        if kw_col is None:  # words to normalise, or a text: as ``fastline.event`` makes them
            kws = fastline.keywords_column(recs)
            if kws is None:  # one without any: the line path says why
                return None
            kw_col = self._coded(kws) if numbered else kws
            if kw_col is None:
                return None
        ids = list(map(_ID, recs))
        seqs = range(first, first + len(recs))
        space = self.space
        try:  # min/max of a column: an UNSET in it compares with no number, a TypeError
            if op == "pub":
                xs, ys = list(map(_X, recs)), list(map(_Y, recs))
                if not inside(space, xs, ys):
                    return None
                out = PubBlock(seq=seqs, id=ids, t=ts, x=xs, y=ys, keywords=kws, expires=exps)
                label = "pub"
            else:
                kinds = set(map(_KIND, recs))
                if len(kinds) != 1:
                    return None
                kind = kinds.pop()
                if kind == RANGE:
                    rects = list(map(_RECT, recs))
                    if not rects_ordered(rects):
                        return None
                    match_all = list(map(MATCH_ALL_RANGE.__getitem__, map(_MATCH, recs)))
                    out = SubBlock(seq=seqs, id=ids, t=ts, kind=[RANGE] * len(ids), keywords=kw_col,
                                   match_all=match_all, rect=rects, expires=exps)
                elif kind == KNN or kind == TOPK:
                    xs, ys, ks = list(map(_X, recs)), list(map(_Y, recs)), list(map(_K, recs))
                    if UNSET in ks or not inside(space, xs, ys):  # (the decoder held those given to 1..MAX_K)
                        return None
                    if kind == KNN:
                        match_all = list(map(MATCH_ALL_KNN.__getitem__, map(_MATCH, recs)))
                        out = SubBlock(seq=seqs, id=ids, t=ts, kind=[KNN] * len(ids), keywords=kw_col,
                                       match_all=match_all, x=xs, y=ys, k=ks, expires=exps)
                    else:  # top-k: its match is not read
                        alphas = list(map(_ALPHA, recs))  # (the decoder held those given to [0, 1])
                        if UNSET in alphas:
                            return None
                        weights = weights_column(list(map(_WEIGHTS, recs)), kws)
                        if weights is False:
                            return None
                        out = SubBlock(seq=seqs, id=ids, t=ts, kind=[TOPK] * len(ids), keywords=kw_col,
                                       match_all=[False] * len(ids), x=xs, y=ys, k=ks, alpha=alphas,
                                       weights=weights, expires=exps)
                else:
                    return None
                if not self._claim(ids):
                    return None
                if exps is not None:
                    for ident, e, q in zip(ids, exps, seqs):
                        if e is not None:
                            self._ends_at(ident, e, q)
                label = op_label("sub", kind)
        except TypeError:
            return None
        self.block_label = label
        self.last_t = ts[-1]
        self._seq = seqs[-1]
        return out

    def _coded(self, kws, raw: bool = False, spans: bool = False) -> Words | None:
        """``kws`` as codes into the Gate's lexicon if ``normal_words`` holds of them, else
        None (``Lexicon.judged``; ``raw``: each record's keywords as JSON, ``raw_judged``;
        ``spans``: a block's bytes and where each record's keywords lie in them,
        ``spans_judged``); a new lexicon (next ``gen``) past ``LEX_MAX`` words."""
        lex = self.lexicon
        if len(lex) > LEX_MAX:
            lex = self.lexicon = Lexicon(lex.gen + 1)
        return lex.spans_judged(*kws) if spans else lex.raw_judged(kws) if raw else lex.judged(kws)

    def _claim(self, ids: list) -> bool:
        """Make a block's ids active if none is active (or ended, but not yet forgotten) and
        none comes twice; else change nothing and say False (the block goes event by event,
        which names the id). A set's C loops, each about twice as fast as a dict's: the
        test, then the insertion, which grows the set by fewer than the ids exactly when
        one came twice (then all of them, new before, are taken out again)."""
        active = self._active
        if not active.isdisjoint(ids):
            return False
        size = len(active)
        active.update(ids)
        if len(active) - size != len(ids):
            active.difference_update(ids)
            return False
        return True

    def admit(self, rec: Any, seq: int | None = None, raw: bytes | str | None = None) -> Event | Rejection:
        """One parsed record at stream position ``seq`` (default: one after the last)."""
        seq = self._seq + 1 if seq is None else seq
        label = None
        try:
            if not isinstance(rec, dict):
                raise Invalid(f"not an object: got a JSON {_json_type(rec)}")
            # UTF-8 bytes decode to valid Unicode; only a \u escape can make a lone surrogate
            if (not isinstance(raw, bytes) or b"\\u" in raw) and not _valid_unicode(rec):
                label = _valid_label(rec)
                raise Invalid(INVALID_UNICODE)
            ev = validate_record(rec, seq, self.window, self.space)
            self._check_state(ev)
        except Invalid as exc:
            if raw is None:
                text = json.dumps(rec, default=str)  # escapes a lone surrogate: writable
            elif isinstance(raw, bytes):
                text = raw.decode("utf-8", "replace")
            else:
                text = raw if _valid_unicode(raw) else _replace_surrogates(raw)
            return Rejection(seq, str(exc), text, record_label(rec) if label is None else label)
        self._accept(ev)
        self._seq = seq
        return ev

    def _is_active(self, ident: Any, t: int | float) -> bool:
        if ident not in self._active:
            return False
        exp = self._expires.get(ident)
        return exp is None or exp[0] > t

    def _check_state(self, ev: Event) -> None:
        t = ev.t  # as given: int/float comparisons are exact (SPEC section 6, "Times")
        if self.last_t is not None and ev.t < self.last_t:  # exact, also for huge integers
            raise Invalid(f"time going backwards: t={ev.t} after t={self.last_t}")
        if isinstance(ev, Sub) and self._is_active(ev.id, t):
            raise Invalid(f"duplicate active subscription id: {ev.id!r}")
        if isinstance(ev, Unsub) and not self._is_active(ev.id, t):
            raise Invalid(f"unknown unsub id: {ev.id!r} is not an active subscription")

    def _ends_at(self, ident: Any, expires: int | float, seq: int) -> None:
        """Subscription ``ident`` (registered at ``seq``) ends at ``expires``: its id is freed
        once time passes it (``_accept``)."""
        self._expires[ident] = (expires, seq)
        heapq.heappush(self._ends, (expires, seq, ident))

    def _accept(self, ev: Event) -> None:
        t = ev.t
        self.last_t = t
        ends = self._ends
        while ends and ends[0][0] <= t:  # forget ended ids: memory stays O(active)
            _, seq, ident = heapq.heappop(ends)
            end = self._expires.get(ident)
            if end is not None and end[1] == seq:  # not unsubscribed, nor reused since
                self._active.remove(ident)
                del self._expires[ident]
        cls = type(ev)
        if cls is Sub:
            expires = ev.expires  # type: ignore[union-attr]
            self._active.add(ev.id)
            if expires is not None:
                self._ends_at(ev.id, expires, ev.seq)
            elif self._expires:
                self._expires.pop(ev.id, None)  # an id that ended by expiry, reused without one
        elif cls is Unsub:
            self._active.remove(ev.id)
            self._expires.pop(ev.id, None)
