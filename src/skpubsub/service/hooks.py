"""Webhooks of the service (SPEC section 9): each notification of a hooked subscription is
POSTed to its URL, in sequence order, at least once, until a 2xx answer acknowledges it.

One asyncio task per hook, one kept-alive connection each, one request in flight each: a
hook that is down or slow waits in its own task (backoff 0.5 s doubling to 60 s, every
attempt bounded by ``--hook-timeout``) and never holds up the applier or another hook.
What a hook has not acknowledged stays in its registration's ring (kept beyond ``--keep``,
up to ``--keep-total`` in all: ``Book.keep_of``); acknowledged ones beyond ``--keep`` are let
go at once. The cursor (the last acknowledged number of each hook) is written to
``DIR/hooks.json`` at most every ``FLUSH`` seconds and at shutdown: after a crash a hook
resumes from a cursor at most that old, so a few notifications may come twice, none is
skipped (at least once, as SPEC 9 says).

The signing key is the subscription's token; the data directory keeps only token digests,
so a hooked subscription's token is derived from a secret of the directory
(``DIR/hook.key``, mode 0600, as ``admin.key``) and its registration (``Core.hook_token``):
the server can sign after a restart without storing any token.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import ssl
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import httptools
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

if TYPE_CHECKING:
    from .core import Core
    from .registrations import Reg

log = logging.getLogger("skpubsub.service.hooks")
CURSORS = "hooks.json"
FORMAT = "skpubsub-hooks"
FLUSH = 0.2  # seconds between writes of the cursors (a crash re-sends at most what this lets go)
BACKOFF = (0.5, 60.0)  # first retry after 0.5 s, doubling, at most 60 s
MAX_URL = 2048


class HookRefused(Exception):
    """A hook the request may not set: (status, reason)."""

    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.status, self.error = status, error


def parse_hook(value: Any) -> tuple[str, str, int, str, bool]:
    """``{"url": "http(s)://host[:port]/path"}`` -> (url, host, port, target, tls); ValueError
    with the reason otherwise."""
    if not isinstance(value, dict) or set(value) != {"url"} or not isinstance(value["url"], str):
        raise ValueError('bad hook: give {"url": "http://host[:port]/path"}')
    url = value["url"]
    if len(url) > MAX_URL or not url.isascii() or any(c in url for c in " \r\n\t"):
        raise ValueError(f"bad hook url: at most {MAX_URL} ASCII characters without spaces")
    u = urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"bad hook url: {url[:100]!r} (http:// or https:// with a host)")
    if u.username is not None or u.password is not None:
        raise ValueError("bad hook url: no user or password in it")
    try:
        port = u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        raise ValueError(f"bad hook url: bad port in {url[:100]!r}") from None
    target = (u.path or "/") + (f"?{u.query}" if u.query else "")
    return url, u.hostname.lower(), port, target, u.scheme == "https"


def check_hooks(items: list, admin: bool, allow: frozenset[str]) -> list:
    """The request's records with a bad ``hook`` turned into that record's error; raises
    HookRefused (403) when one names a host the request may not (admin, or ``--hook-allow``):
    nobody may make the server call an arbitrary address."""
    out = []
    for route, rec, err in items:
        if isinstance(rec, dict) and "hook" in rec and rec.get("op", "sub") == "sub":
            try:
                _, host, *_ = parse_hook(rec["hook"])
            except ValueError as exc:
                out.append((route, None, str(exc)))
                continue
            if not admin and host not in allow:
                raise HookRefused(403, f"hook host {host!r} is not allowed (the admin key, or --hook-allow)")
        out.append((route, rec, err))
    return out


def sign(token: str, body: bytes) -> str:
    return "sha256=" + hmac.new(token.encode(), body, hashlib.sha256).hexdigest()


_TLS: ssl.SSLContext | None = None


def _tls() -> ssl.SSLContext:
    """One client context for every https hook (making one reads the CA store: ~10 ms)."""
    global _TLS
    if _TLS is None:
        _TLS = ssl.create_default_context()
    return _TLS


class _Answer:
    """httptools' callbacks: the status is read from the parser; done at message end."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False

    def on_message_complete(self) -> None:
        self.done = True


class Hook:
    """One hooked registration: where to POST, how far it is acknowledged, its counters."""

    def __init__(self, reg: Reg, token: str, acked: int) -> None:
        self.reg, self.token, self.acked = reg, token, acked
        self.url, self.host, self.port, self.target, self.tls = parse_hook(reg.record["hook"])
        self.sub = quote(str(reg.id), safe="")
        self.delivered = 0
        self.failed = 0  # attempts that got no 2xx (refused, timed out, another status)
        self.retrying = False  # waiting out a backoff
        self.event = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    @property
    def lag(self) -> int:
        return self.reg.next - 1 - self.acked

    def close(self) -> None:
        if self.conn is not None:
            self.conn[1].close()
            self.conn = None

    async def post(self, body: bytes, headers: str, timeout: float) -> int:
        """POST ``body`` on the kept-alive connection (a fresh one if the kept one was closed
        by the receiver before answering); the status, or 0 when there was none."""
        req = (f"POST {self.target} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{headers}\r\n").encode() + body
        for attempt in (0, 1):
            reused = self.conn is not None
            try:
                async with asyncio.timeout(timeout):
                    if self.conn is None:
                        self.conn = await asyncio.open_connection(self.host, self.port,
                                                                  ssl=_tls() if self.tls else None)
                    reader, writer = self.conn
                    writer.write(req)
                    await writer.drain()
                    ans = _Answer()
                    parser = httptools.HttpResponseParser(ans)
                    got = False
                    while not ans.done:
                        data = await reader.read(65536)
                        if not data:
                            break
                        got = True
                        parser.feed_data(data)
                    if not ans.done:  # closed before the end: a body read to the close still has its status
                        self.close()
                        if not got and reused and attempt == 0:
                            continue  # the receiver had closed the kept connection: once more, fresh
                        return parser.get_status_code() if got else 0
                    if not parser.should_keep_alive():
                        self.close()
                    return parser.get_status_code()
            except (OSError, TimeoutError, httptools.HttpParserError, ssl.SSLError, ValueError):
                self.close()
                return 0
        return 0


class Hooks:
    """The hooks of one service: one task each, their cursors, their metrics."""

    def __init__(self, core: Core, timeout: float = 5.0) -> None:
        self.core, self.timeout = core, timeout
        self.hooks: dict[int, Hook] = {}  # by registration seq
        self.path = Path(core.data) / CURSORS
        self.cursors: dict[int, int] = self._read()
        self.dirty = False
        self.flusher: asyncio.Task | None = None

    def _read(self) -> dict[int, int]:
        try:
            got = json.loads(self.path.read_text())
            if got.get("format") != FORMAT or got.get("run") != self.core.run_id:
                raise ValueError("not this directory's")
            return {int(k): int(v) for k, v in got["acked"].items()}
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # every hook starts over from its oldest kept notification: at least once still holds
            log.error("%s unreadable (%s): hooks resend what is kept", self.path, exc)
            return {}

    def _write(self, acked: dict[int, int]) -> None:
        tmp = self.path.with_suffix(f".tmp{threading.get_ident()}")  # the flusher's thread may still be writing
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps({"format": FORMAT, "run": self.core.run_id,
                                "acked": {str(k): v for k, v in acked.items()}}))
        tmp.replace(self.path)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Hooks of every registration that has one (live, or ended and still kept)."""
        core = self.core
        core.new_hooks.clear()
        for reg in sorted([*core.regs.values(), *core.book.ended.values()], key=lambda r: r.seq):
            if "hook" in reg.record:
                self.adopt(reg)
        stale = self.cursors.keys() - self.hooks.keys()  # registrations gone while the server was down
        for seq in stale:
            del self.cursors[seq]
        self.dirty = bool(stale)
        self.flusher = asyncio.create_task(self._flush_loop())

    def adopt_new(self) -> None:
        """The hooked registrations the last micro-batch made."""
        new = self.core.new_hooks
        for reg in new:
            self.adopt(reg)
        new.clear()

    def adopt(self, reg: Reg) -> None:
        if reg.seq in self.hooks:
            return
        h = Hook(reg, self.core.hook_token(reg.seq), self.cursors.get(reg.seq, 0))
        self.hooks[reg.seq] = h
        if reg.wake is None:
            reg.wake = set()
        reg.wake.add(h.event)
        h.task = asyncio.create_task(self._run(h))

    async def stop(self) -> None:
        tasks = [h.task for h in self.hooks.values() if h.task is not None]
        if self.flusher is not None:
            tasks.append(self.flusher)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for h in self.hooks.values():
            h.close()
        self.flush()

    def flush(self) -> None:
        if self.dirty:
            self.dirty = False
            self._write(self.cursors)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(FLUSH)
            if self.dirty:
                self.dirty = False
                try:
                    await asyncio.to_thread(self._write, dict(self.cursors))
                except OSError as exc:  # the next flush tries again; meanwhile a crash re-sends more
                    log.error("cannot write %s: %s", self.path, exc)
                    self.dirty = True

    # -- delivery --------------------------------------------------------------------------
    def _ack(self, h: Hook, n: int) -> None:
        h.acked = self.cursors[h.reg.seq] = n
        self.dirty = True
        self.core.book.let_go(h.reg, n)

    def _finish(self, h: Hook) -> None:
        h.close()
        h.reg.wake.discard(h.event)
        del self.hooks[h.reg.seq]
        if self.cursors.pop(h.reg.seq, None) is not None:
            self.dirty = True

    async def _run(self, h: Hook) -> None:
        reg, backoff = h.reg, BACKOFF[0]
        while True:
            if reg.ended is not None and (reg.ring is None or h.acked >= reg.next - 1):
                self._finish(h)  # delivered, or dropped by --keep-ended: the hook stops
                return
            first = reg.first_kept
            if h.acked < first - 1:  # dropped (--keep-total) before acknowledged: say so once
                n, seq_header = first - 1, ""
                body = json.dumps({"gap": {"after": h.acked, "first_kept": first}}).encode()
                kind = "X-Skpubsub-Event: gap\r\n"
            else:
                items = reg.after(h.acked, 1)
                if not items:
                    h.event.clear()
                    await h.event.wait()
                    continue
                n, line = items[0]
                body, seq_header, kind = line.encode(), f"X-Skpubsub-Seq: {n}\r\n", ""
            headers = (f"X-Skpubsub-Subscription: {h.sub}\r\n{seq_header}{kind}"
                       f"X-Skpubsub-Signature: {sign(h.token, body)}\r\n")
            status = await h.post(body, headers, self.timeout)
            if 200 <= status < 300:
                h.delivered += 1
                h.retrying = False
                backoff = BACKOFF[0]
                self._ack(h, n)
                continue
            h.failed += 1
            h.retrying = True
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF[1])

    # -- metrics ---------------------------------------------------------------------------
    def collect(self):
        """Per-hook counters for /metrics (a collector: read at each scrape, no stale labels)."""
        delivered = CounterMetricFamily("skpubsub_hook_delivered", "Notifications a hook acknowledged", labels=["sub", "reg"])
        failed = CounterMetricFamily("skpubsub_hook_failed", "Hook attempts without a 2xx answer", labels=["sub", "reg"])
        retrying = GaugeMetricFamily("skpubsub_hook_retrying", "1 while a hook waits to retry", labels=["sub", "reg"])
        lag = GaugeMetricFamily("skpubsub_hook_lag", "Notifications made but not acknowledged", labels=["sub", "reg"])
        for h in self.hooks.values():
            label = [str(h.reg.id), str(h.reg.seq)]
            delivered.add_metric(label, h.delivered)
            failed.add_metric(label, h.failed)
            retrying.add_metric(label, int(h.retrying))
            lag.add_metric(label, h.lag)
        yield GaugeMetricFamily("skpubsub_hooks", "Hooks being delivered", value=len(self.hooks))
        yield from (delivered, failed, retrying, lag)

