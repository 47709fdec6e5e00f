"""Server-sent event streams of the service (SPEC section 8): one subscription's
notifications (``SSEStream``, resumable by ``Last-Event-ID``) and the admin feed
(``FeedStream``); a client that does not read in time is dropped with its resume point kept."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING

import msgspec

from .core import Reg, feed_item

if TYPE_CHECKING:
    from .app import Service

_encode = msgspec.json.Encoder().encode


class SlowConsumer(Exception):
    pass


class _Stream:
    """A raw ASGI response that writes events as they come: each write must finish within
    ``write_timeout`` (uvicorn waits while the client's socket is full), else the client is
    dropped as a slow consumer; it reconnects with ``Last-Event-ID`` and loses nothing kept."""

    status_code = 200

    def __init__(self, svc: Service) -> None:
        self.svc = svc
        self.event = asyncio.Event()
        self.gone = False

    async def _send(self, send, data: bytes) -> None:
        # asyncio.timeout, not wait_for: no task per write (a write is one per woken stream per
        # micro-batch: hundreds a batch under load)
        try:
            async with asyncio.timeout(self.svc.limits.write_timeout):
                await send({"type": "http.response.body", "body": data, "more_body": True})
        except TimeoutError:
            raise SlowConsumer from None

    async def __call__(self, scope, receive, send) -> None:
        svc = self.svc
        svc.streams += 1
        self.opened()

        async def watch() -> None:
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    self.gone = True
                    self.event.set()
                    return

        watcher = asyncio.create_task(watch())
        finished = False
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream; charset=utf-8"),
                                    (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]})
            await self._send(send, b"retry: 1000\n\n")
            finished = await self.pump(send)
        except SlowConsumer:
            svc.metrics.dropped.inc()
        except OSError:
            pass
        finally:
            watcher.cancel()
            svc.streams -= 1
            self.closed()
            if finished and not self.gone:
                with contextlib.suppress(Exception):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def wait(self) -> bool:
        """Until woken; False on a keep-alive timeout."""
        try:
            async with asyncio.timeout(self.svc.limits.keepalive):
                await self.event.wait()
            return True
        except TimeoutError:
            return False
        finally:
            self.event.clear()

    def opened(self) -> None: ...

    def closed(self) -> None: ...

    async def pump(self, send) -> bool:
        raise NotImplementedError


class SSEStream(_Stream):
    def __init__(self, svc: Service, reg: Reg, after: int) -> None:
        super().__init__(svc)
        self.reg, self.after = reg, after

    def opened(self) -> None:
        reg = self.reg
        reg.streams += 1
        if reg.wake is None:
            reg.wake = set()
        reg.wake.add(self.event)

    def closed(self) -> None:
        self.reg.streams -= 1
        self.reg.wake.discard(self.event)

    async def pump(self, send) -> bool:
        reg, last = self.reg, self.after
        if last < reg.first_kept - 1 and reg.next > 1:  # asked for what is no longer kept
            gap = {"after": last, "first_kept": reg.first_kept}
            await self._send(send, f"event: gap\ndata: {json.dumps(gap)}\n\n".encode())
        while not self.gone:
            items = reg.after(last, 500)
            if items:
                chunk = "".join(f"id: {n}\ndata: {line[:-1]}\n\n" for n, line in items)
                await self._send(send, chunk.encode("utf-8"))
                last = items[-1][0]
                continue
            if reg.ended is not None:
                await self._send(send, f"event: end\ndata: {json.dumps({'reason': reg.ended})}\n\n".encode())
                return True
            if not await self.wait() and not self.gone:
                await self._send(send, b": keep-alive\n\n")
        return False


class FeedStream(_Stream):
    """The admin feed: every accepted event (compact) and every notification, numbered."""

    def __init__(self, svc: Service, after: int) -> None:
        super().__init__(svc)
        self.after = after

    def opened(self) -> None:
        self.svc.feed_waiters.add(self.event)

    def closed(self) -> None:
        self.svc.feed_waiters.discard(self.event)

    async def pump(self, send) -> bool:
        feed, last = self.svc.feed, self.after
        while not self.gone:
            if feed and feed[-1][0] > last:
                first = feed[0][0]
                start = max(0, last - first + 1)
                items = [feed[i] for i in range(start, min(len(feed), start + 500))]
                chunk = "".join(f"id: {n}\ndata: {_encode(feed_item(it)).decode()}\n\n" for n, it in items)
                await self._send(send, chunk.encode("utf-8"))
                last = items[-1][0]
                continue
            if not await self.wait() and not self.gone:
                await self._send(send, b": keep-alive\n\n")
        return False


# -- the application ----------------------------------------------------------------------------
