"""What travels between the Spark runtime's pieces, as data (SPEC section 7).

Routed rows (sequencer -> worker, also kept in the worker's state log) are JSON lists of
items, each event as its SPEC record, validated again when read (``event_of``); the
driver rows (rejections, metadata) are JSON; a worker's notification order columns are
raw little-endian arrays. Nothing here is ever unpickled: a damaged payload is refused
(:class:`~skpubsub.engine.snapshot.Refused`) with the reason.

Item layout: ``[seq, "e", event seq, record, leave]`` (an event), ``[seq, "b", ...]`` (a
Backfill of that object), ``[seq, "t", tick seq, t, leave]`` (a Tick), ``[seq, "x", 0, null,
[]]`` (END); migrations (rebalancing, ``spark/NOTES.md``): ``[seq, "d", 0, id, []]`` (Drop),
``[seq, "a", sub seq, {"sub": record, "held": [[seq, record], ...], "now": t}, []]`` (Adopt),
``[seq, "E", tag, [id, ...], []]`` (Export); these travel in rows of their own and are read by
the full validator. Written and read by msgspec in the common case (read with fastline's typed
record, checked by ``fastline.event``); anything it does not take (a lone surrogate, an
integer past 64 bits) goes through ``json`` and ``validate_record``, which give the reason.
"""

from __future__ import annotations

import json
import math
from typing import Any, Union

import msgspec

import numpy as np

from ..core.config import Space, Window
from ..engine.messages import Adopt, Backfill, Drop, Export, Tick
from ..engine.snapshot import Refused, dumps, event_of, event_record
from ..io import fastline
from ..io.events import Pub, Sub

END = "end"  # an item asking a worker for its final results
DRIVER = -1  # the pseudo-worker carrying rejections and run metadata to the sink


def encode_items(items: list[tuple[int, Any]]) -> bytes:
    out: list = []
    for seq, it in items:
        if it == END:
            out.append([seq, "x", 0, None, []])
            continue
        msg, leave = it
        if isinstance(msg, Tick):
            out.append([seq, "t", msg.seq, msg.t, list(leave)])
        elif isinstance(msg, Backfill):
            out.append([seq, "b", msg.pub.seq, event_record(msg.pub), list(leave)])
        elif isinstance(msg, Drop):
            out.append([seq, "d", 0, msg.id, []])
        elif isinstance(msg, Adopt):
            out.append([seq, "a", msg.sub.seq, {"sub": event_record(msg.sub), "held": _pubs(msg.held),
                                                 "now": msg.now}, []])
        elif isinstance(msg, Export):
            out.append([seq, "E", msg.tag, list(msg.ids), []])
        else:
            out.append([seq, "e", msg.seq, event_record(msg), list(leave)])
    try:
        return _encode(out)
    except (TypeError, ValueError, OverflowError, UnicodeError):  # a lone surrogate, an int past 64 bits
        return dumps(out)


_encode = msgspec.json.Encoder().encode
# The common case, typed as it is parsed (fastline's record type): no dict per event.
_decode_fast = msgspec.json.Decoder(list[tuple[int, str, int, Union[fastline.Line, int, float, None], list[int]]]).decode


def _decode_typed(blob: bytes, window: Window, space: Space) -> list[tuple[int, Any]] | None:
    """The fast path of :func:`decode_items`; None when anything needs the full validator."""
    try:
        raw = _decode_fast(blob)
    except (msgspec.MsgspecError, ValueError, OverflowError):
        return None
    items: list[tuple[int, Any]] = []
    for seq, tag, q, body, leave in raw:
        if tag == "x":
            items.append((seq, END))
        elif tag == "t":
            if isinstance(body, bool) or not isinstance(body, (int, float)) or not math.isfinite(body):
                return None
            items.append((seq, (Tick(q, body), tuple(leave))))
        elif tag in ("e", "b") and isinstance(body, fastline.Line):
            try:
                ev = fastline.event(body, q, window, space)
            except (ValueError, OverflowError):
                return None
            if ev is None:
                return None
            items.append((seq, (ev if tag == "e" else Backfill(ev), tuple(leave))))  # type: ignore[arg-type]
        else:
            return None
    return items


def _ints(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)


def decode_items(blob: bytes, window: Window, space: Space) -> list[tuple[int, Any]]:
    fast = _decode_typed(blob, window, space)
    if fast is not None:
        return fast
    try:
        raw = json.loads(blob)
    except ValueError:
        raise Refused("routed payload: not JSON") from None
    if not isinstance(raw, list):
        raise Refused("routed payload: not a list")
    items: list[tuple[int, Any]] = []
    for e in raw:
        if not (isinstance(e, list) and len(e) == 5 and isinstance(e[0], int) and not isinstance(e[0], bool)):
            raise Refused(f"routed payload: malformed item {str(e)[:80]}")
        if e[1] == "x":
            items.append((e[0], END))
            continue
        if not _ints(e[4]):
            raise Refused(f"routed payload: malformed item {str(e)[:80]}")
        tag, q, body, leave = e[1], e[2], e[3], tuple(e[4])
        if tag == "t":
            if (isinstance(q, bool) or not isinstance(q, int) or isinstance(body, bool)
                    or not isinstance(body, (int, float)) or not math.isfinite(body)):
                raise Refused(f"routed payload: malformed tick {str(e)[:80]}")
            items.append((e[0], (Tick(q, body), leave)))
        elif tag in ("e", "b"):
            ev = event_of(q, body, window, space)
            items.append((e[0], (ev if tag == "e" else Backfill(ev), leave)))  # type: ignore[arg-type]
        elif tag == "d":
            items.append((e[0], (Drop(_id(body)), ())))
        elif tag == "a" and isinstance(body, dict) and set(body) == {"sub", "held", "now"}:
            sub = event_of(q, body["sub"], window, space)
            now = body["now"]
            if not isinstance(sub, Sub) or not (now is None or _time(now)):
                raise Refused(f"routed payload: malformed adoption {str(e)[:80]}")
            items.append((e[0], (Adopt(sub, decode_pubs(body["held"], window, space), now), ())))
        elif tag == "E" and isinstance(q, int) and isinstance(body, list):
            items.append((e[0], (Export(tuple(_id(i) for i in body), q), ())))
        else:
            raise Refused(f"routed payload: unknown item {tag!r}")
    return items


def _id(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise Refused(f"routed payload: bad subscription id {str(v)[:80]}")
    return v


def _time(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def _pubs(pubs) -> list:
    return [[p.seq, event_record(p)] for p in pubs]


def decode_pubs(raw: Any, window: Window, space: Space) -> tuple[Pub, ...]:
    """Objects written by ``_pubs`` (an adoption's held objects), validated again."""
    if not isinstance(raw, list) or not all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], int)
                                            and not isinstance(x[0], bool) for x in raw):
        raise Refused("held objects: malformed")
    out = tuple(event_of(q, r, window, space) for q, r in raw)
    if not all(isinstance(p, Pub) for p in out):
        raise Refused("held objects: not publications")
    return out  # type: ignore[return-value]


def encode_export(held: dict[int, tuple]) -> bytes:
    """A worker's export (registration seq -> result objects) as data (JSON)."""
    return dumps([[seq, _pubs(pubs)] for seq, pubs in sorted(held.items())])


def decode_export(blob: bytes, window: Window, space: Space) -> dict[int, tuple[Pub, ...]]:
    try:
        raw = json.loads(blob)
    except ValueError:
        raise Refused("export: not JSON") from None
    if not isinstance(raw, list) or not all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], int)
                                            for x in raw):
        raise Refused("export: malformed")
    return {seq: decode_pubs(pubs, window, space) for seq, pubs in raw}


def encode_driver(entries: list[tuple]) -> bytes:
    return dumps([list(e) for e in entries])


def decode_driver(blob: bytes) -> list[tuple]:
    try:
        raw = json.loads(blob)
    except ValueError:
        raise Refused("driver payload: not JSON") from None
    if not isinstance(raw, list) or not all(isinstance(e, list) and e and isinstance(e[0], str) for e in raw):
        raise Refused("driver payload: malformed")
    return [tuple(e) for e in raw]


def pack_notes(seqs: list[int], regs: list[int], match: list[bool]) -> bytes:
    """One batch's notification order columns: n int64 seqs, n int64 regs, n match bytes."""
    return (np.asarray(seqs, "<i8").tobytes() + np.asarray(regs, "<i8").tobytes()
            + np.asarray(match, np.bool_).tobytes())


def unpack_notes(blob: bytes, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if len(blob) != 17 * n:
        raise Refused(f"notification columns: {len(blob)} bytes for {n} notifications")
    return (np.frombuffer(blob, "<i8", n, 0), np.frombuffer(blob, "<i8", n, 8 * n),
            np.frombuffer(blob, np.bool_, n, 16 * n))
