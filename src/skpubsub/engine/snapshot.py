"""An engine's state as data, never a pickle (SPEC section 7).

An engine is a function of the events that are still live in it: its live subscriptions
in registration order, the objects alive in its window (under ``none``: the objects its
kNN/top-k results hold), and its counters. A snapshot is those events as SPEC records
(with their stream positions) plus the counters and a digest of the results; a restore
re-applies them, silently, with the messages the rebalancer migrates subscriptions with
(:class:`~.messages.Backfill` for each alive object, then :class:`~.messages.Adopt` for
each subscription, in registration order), and checks the results against the digest.
Every record is validated again on the way in (``validate_record``), so a damaged or
foreign snapshot is refused with a reason, and nothing in it is ever executed.

The framing, shared by every state file or blob that is read back::

    {"format": F, "version": V, "bytes": n, "sha256": h, ...}\\n<n bytes of JSON>

(``frame``/``unframe``; ``spark/statefile.py`` and the Spark workers' state use it.)
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from typing import Any

from ..core.config import Space, Window
from ..io.events import RANGE, TOPK, Event, Pub, Sub, Unsub
from ..io.validate import Invalid, validate_record
from .messages import Adopt, Backfill

ENGINE_FORMAT = "skpubsub-engine-state"
ENGINE_VERSION = 1


class Refused(ValueError):
    """A snapshot or state file that is damaged, foreign or of another version."""


# -- framing ---------------------------------------------------------------------------
def dumps(body: Any) -> bytes:
    """Compact JSON, ASCII (``\\u`` escapes: any string, lone surrogates included)."""
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode("ascii")


def frame(fmt: str, version: int, body: Any, **head: Any) -> bytes:
    data = dumps(body)
    top = {"format": fmt, "version": version, **head, "bytes": len(data),
           "sha256": hashlib.sha256(data).hexdigest()}
    return json.dumps(top).encode() + b"\n" + data


def unframe(raw: bytes, fmt: str, version: int, what: str = "") -> tuple[dict, Any]:
    """(header, body) of a ``frame``; :class:`Refused` with the reason otherwise."""
    what = what or fmt
    first, sep, data = raw.partition(b"\n")
    try:
        head = json.loads(first)
    except ValueError:
        head = None
    if not sep or not isinstance(head, dict) or head.get("format") != fmt:
        raise Refused(f"{what}: not a {fmt} file")
    if head.get("version") != version:
        raise Refused(f"{what}: {fmt} version {head.get('version')!r}, this program reads {version}")
    if head.get("bytes") != len(data) or head.get("sha256") != hashlib.sha256(data).hexdigest():
        raise Refused(f"{what}: damaged (size or checksum does not match)")
    try:
        return head, json.loads(data)
    except ValueError:
        raise Refused(f"{what}: damaged (body is not JSON)") from None


# -- events as records -------------------------------------------------------------------
def event_record(ev: Event) -> dict:
    """The SPEC record of a validated event (``validate_record`` gives the event back)."""
    if isinstance(ev, Unsub):
        return {"op": "unsub", "id": ev.id, "t": ev.t}
    if isinstance(ev, Pub):
        rec = {"op": "pub", "id": ev.id, "t": ev.t, "x": ev.x, "y": ev.y, "keywords": list(ev.keywords)}
    else:
        rec = {"op": "sub", "id": ev.id, "t": ev.t, "kind": ev.kind, "keywords": list(ev.keywords)}
        if ev.kind == RANGE:
            rec["rect"] = list(ev.rect)  # type: ignore[arg-type]
        else:
            rec.update(x=ev.x, y=ev.y, k=ev.k)
        if ev.kind == TOPK:
            rec["alpha"] = ev.alpha
            if ev.weights is not None:
                rec["weights"] = dict(zip(ev.keywords, ev.weights))
        else:
            rec["match"] = "all" if ev.match_all else "any"
    if ev.expires is not None:
        rec["expires"] = ev.expires
    return rec


def event_of(seq: Any, rec: Any, window: Window, space: Space) -> Event:
    """A record read back, validated as an input line is; :class:`Refused` otherwise."""
    if isinstance(seq, bool) or not isinstance(seq, int) or not isinstance(rec, dict):
        raise Refused(f"malformed event entry {seq!r}")
    try:
        return validate_record(rec, seq, window, space)
    except Invalid as exc:
        raise Refused(f"event {seq} refused: {exc}") from None


def results_digest(engine: Any) -> str:
    text = json.dumps(engine.all_results(), separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


# -- an engine with external expiry (a worker among several) ---------------------------------
def capture(engine: Any, subs: Iterable[Sub], alive: Iterable[Pub]) -> dict:
    """The state of ``engine`` as data: ``subs`` its live subscriptions, ``alive`` the
    objects alive in it (both as the events that made them). O(state)."""
    subs = sorted(subs, key=lambda s: s.seq)
    objects = {p.seq: p for p in alive}
    held: list[list[int]] = []
    if not engine.window.retains:  # results are not a function of alive objects: keep theirs
        for s in subs:
            pubs = engine.export(s.id) if s.kind != RANGE else ()
            objects.update((p.seq, p) for p in pubs if p.seq not in objects)
            held.append([p.seq for p in pubs])
    return {"subs": [[s.seq, event_record(s)] for s in subs],
            "alive": sorted(objects) if engine.window.retains else [],
            "objects": [[q, event_record(objects[q])] for q in sorted(objects)],
            "held": held,
            "stats": dict(engine.stats),
            "results": results_digest(engine)}


def restore(engine: Any, body: Any) -> tuple[list[Sub], dict[int, Pub]]:
    """Re-apply a :func:`capture` into a fresh ``engine`` (silently); returns (its live
    subscriptions, its alive objects by seq). :class:`Refused` if anything is off."""
    window, space = engine.window, engine.space
    try:
        subs = [event_of(q, r, window, space) for q, r in body["subs"]]
        objects = {q: event_of(q, r, window, space) for q, r in body["objects"]}
        alive_seqs, held, stats = body["alive"], body["held"], body["stats"]
        if not all(isinstance(s, Sub) for s in subs) or not all(isinstance(p, Pub) for p in objects.values()):
            raise Refused("an entry of the wrong kind")
        alive = {q: objects[q] for q in alive_seqs}
        if window.retains:
            items: list = [(Backfill(alive[q]), ()) for q in sorted(alive)]
            items += [(Adopt(s), ()) for s in subs]
        else:
            if len(held) != len(subs):
                raise Refused("held objects do not fit the subscriptions")
            items = [(Adopt(s, tuple(objects[q] for q in h)), ()) for s, h in zip(subs, held)]
        if not isinstance(stats, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in stats.values()):
            raise Refused("counters must be finite numbers")
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, Refused):
            raise
        raise Refused(f"malformed ({type(exc).__name__}: {exc})") from None
    engine.apply_routed(items)
    engine.stats.update(stats)
    if results_digest(engine) != body.get("results"):
        raise Refused("the restored results differ from the snapshot's")
    return subs, alive
