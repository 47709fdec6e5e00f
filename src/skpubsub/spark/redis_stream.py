"""Redis Streams in and out of the Spark runtime (SPEC section 9).

**In.** ``stream --source redis://HOST:PORT/KEY`` (and ``run --engine spark URL``): the
source (``source.EventReader``) reads entries instead of lines, through :func:`read_entries`
(``source._read`` hands a Redis input here). Entry ``n`` of the stream (from its first) is
input line ``n``; its field ``event`` is the line (an entry without it is a blank line: ``not
JSON``). The offset keeps the last entry id read where a file offset keeps the file name
(``{"file": "<entry id>", "pos": 0, "line": n, "final": ...}``), so the checkpoint's offset
log holds entry ids and a batch reads ``XRANGE KEY (<id> + COUNT n``: the driver holds one
batch, never the stream. A restart rebuilds the sequencer by re-reading the entries before
the batch (as for files), so the stream must keep its entries while a job may restart on it
(no ``MAXLEN``/``XTRIM``/``XDEL``): a stream that lost entries is refused when read from its
start (``XINFO STREAM``'s ``entries-added`` against its length, Redis 7). Rejections name the
entry (``"entry": id`` instead of ``"line"``): ``rejected.jsonl`` is rewritten at the end of
the run from the line numbers (:func:`name_entries`).

**Out.** ``--sink redis://...``: after each micro-batch's record (``pipeline.start_query``'s
``foreachBatch``), :func:`publish_batch` merges the batch's notification parts as the
assembly does and appends them (``io.redis_bus.StreamSink``: explicit ids, exactly once).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from ..io.encode import json_text
from ..io.lines import MAX_LINE
from ..io.redis_bus import FIELD_EVENT, RedisURL, StreamSink, is_redis, redis_errors
from .fs import Loc

CHUNK = 5000  # entries per XRANGE


class RedisInput:
    """A stream as the pipeline's input: the few things it asks of a ``Loc``."""

    local = False

    def __init__(self, url: str | RedisURL) -> None:
        self.url = RedisURL.parse(url)

    @property
    def uri(self) -> str:
        return self.url.uri

    path = uri
    name = uri

    def is_file(self) -> bool:  # a stream never ends: followed as a directory is
        return False

    def is_dir(self) -> bool:
        return False

    def __str__(self) -> str:
        return self.uri


def as_input(where: Any) -> Loc | RedisInput:
    if isinstance(where, RedisInput):
        return where
    return RedisInput(where) if is_redis(where) else Loc(where)


_CLIENTS: dict[RedisURL, Any] = {}


def _client(src: RedisInput):
    r = _CLIENTS.get(src.url)
    if r is None:
        r = _CLIENTS[src.url] = src.url.connect()
    return r


def _failing(src: RedisInput, exc: BaseException) -> ValueError:
    return ValueError(f"Redis stream {src.uri}: {type(exc).__name__}: {exc}")


def _whole(r, src: RedisInput) -> int:
    """The stream's length, refused if entries were removed (lines would be renumbered)."""
    try:
        info = r.xinfo_stream(src.url.key)
    except redis_errors() as exc:
        if "no such key" in str(exc).lower():
            return 0
        raise
    added = info.get("entries-added")
    if added is not None and added != info["length"]:
        raise ValueError(f"Redis stream {src.uri} lost {added - info['length']} of its {added} entries "
                         "(XTRIM, MAXLEN or XDEL): a restart reads it again from its first entry; keep every "
                         "entry while a job may restart on it")
    return info["length"]


def read_entries(src: RedisInput, start: dict, max_lines: int | None, stop: dict | None = None,
                 keep: bool = True) -> tuple[list, dict]:
    """``source._read`` for a stream: entries after ``start`` as ``(line number, raw)``."""
    src = as_input(src)
    try:
        return _read_entries(src, start, max_lines, stop, keep)
    except redis_errors() as exc:
        raise _failing(src, exc) from None


def _read_entries(src: RedisInput, start: dict, max_lines: int | None, stop: dict | None,
                  keep: bool) -> tuple[list, dict]:
    r, key = _client(src), src.url.key
    last, line = start["file"], start["line"]
    if not line or (max_lines is None and stop is None and not keep):
        n = _whole(r, src)
        if max_lines is None and stop is None and not keep:  # the end (availableNow's target)
            top = r.xrevrange(key, count=1)
            return [], {"file": top[0][0].decode() if top else "", "pos": 0, "line": n, "final": False}
    want = max_lines
    if stop is not None:
        want = stop["line"] - line if want is None else min(want, stop["line"] - line)
    out: list = []
    while want is None or want > 0:
        count = CHUNK if want is None else min(want, CHUNK)
        got = r.xrange(key, min=f"({last}" if last else "-", max="+", count=count)
        for eid, fields in got:
            line += 1
            if keep:
                raw = fields.get(FIELD_EVENT, b"")  # no field: a blank line, "not JSON"
                out.append((line, raw if len(raw) <= MAX_LINE else None))
        if got:
            last = got[-1][0].decode()
        if want is not None:
            want -= len(got)
        if len(got) < count:
            break
    return out, {"file": last, "pos": 0, "line": line, "final": False}


def name_entries(src: RedisInput, out: Loc) -> None:
    """``rejected.jsonl``'s line numbers -> entry ids (``{"entry": id, "error", "raw"}``),
    reading the stream from its first entry up to the last rejected one."""
    path = Loc(out) / "rejected.jsonl"
    recs = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
    if not recs or "line" not in recs[0]:
        return
    want = {int(r["line"]) for r in recs}
    ids: dict[int, str] = {}
    try:
        r, start = _client(src), {"file": "", "line": 0}
        while len(ids) < len(want):
            got = r.xrange(src.url.key, min=f"({start['file']}" if start["file"] else "-", max="+", count=CHUNK)
            for i, (eid, _) in enumerate(got, start["line"] + 1):
                if i in want:
                    ids[i] = eid.decode()
            if len(got) < CHUNK:
                break
            start = {"file": got[-1][0].decode(), "line": start["line"] + len(got)}
    except redis_errors() as exc:
        raise _failing(src, exc) from None
    if len(ids) < len(want):
        raise ValueError(f"Redis stream {src.uri} lost entries the run rejected: keep every entry while a job "
                         "may restart on it")
    text = "".join(json_text({"entry": ids[int(x["line"])], "error": x["error"], "raw": x["raw"]}) + "\n"
                   for x in recs)
    path.write_atomic(text.encode("utf-8"))


_SINKS: dict[tuple[str, str], StreamSink] = {}


def publish_batch(out: Loc, run: str, info: dict, url: str) -> int:
    """Micro-batch ``info``'s notifications to the stream ``url``, as ``notifications.jsonl``
    will have them (``sink.merge_notes``), exactly once (``StreamSink``)."""
    from .sink import _lines_of, batch_dir, merge_notes

    sink = _SINKS.get((url, run))
    if sink is None:
        sink = _SINKS[url, run] = StreamSink(url, run)
    d = batch_dir(out, run)
    with contextlib.ExitStack() as stack:
        parts = [_lines_of(d / p["file"], stack) for p in info["parts"] if p["kind"] == "notes"]
        return sink.write(merge_notes(parts, keyed=True)) if parts else 0
