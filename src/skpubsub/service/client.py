"""A small blocking client of the service (standard library only): requests and an SSE reader.

Used by the tests and handy from a shell::

    c = Client("http://127.0.0.1:8080", key=open("DIR/admin.key").read().strip())
    c.post("/v1/objects", [{"id": "o1", "x": 2.3, "y": 48.8, "text": "jazz"}])
    for n, data in c.stream("/v1/subscriptions/s1/notifications", token=tok): ...
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"Answer({self.status}, {self.body[:200]!r})"


class Client:
    def __init__(self, url: str, key: str | None = None, timeout: float = 30.0) -> None:
        u = urlsplit(url)
        self.host, self.port = u.hostname, u.port or 80
        self.key, self.timeout = key, timeout
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self._conn

    def request(self, method: str, path: str, body: Any = None, key: str | None = None,
                headers: dict[str, str] | None = None, raw: bytes | None = None) -> Answer:
        h = dict(headers or {})
        secret = key if key is not None else self.key
        if secret:
            h["Authorization"] = f"Bearer {secret}"
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        if data is not None:
            h.setdefault("Content-Type", "application/json")
        for attempt in (0, 1):  # a kept-alive connection the server closed: once more, fresh
            conn = self._connection()
            try:
                conn.request(method, path, body=data, headers=h)
                r = conn.getresponse()
                return Answer(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def post(self, path: str, body: Any = None, **kw: Any) -> Answer:
        return self.request("POST", path, body, **kw)

    def get(self, path: str, **kw: Any) -> Answer:
        return self.request("GET", path, **kw)

    def delete(self, path: str, **kw: Any) -> Answer:
        return self.request("DELETE", path, **kw)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def stream(self, path: str, token: str | None = None, last_event_id: int | None = None,
               timeout: float | None = None) -> Iterator[tuple[str, str | None, str]]:
        """Server-Sent Events of ``path`` as (event type, id, data) until the server ends
        the stream (or ``timeout`` seconds of silence: socket.timeout)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)
        h = {"Accept": "text/event-stream"}
        secret = token if token is not None else self.key
        if secret:
            h["Authorization"] = f"Bearer {secret}"
        if last_event_id is not None:
            h["Last-Event-ID"] = str(last_event_id)
        try:
            conn.request("GET", path, headers=h)
            r = conn.getresponse()
            if r.status != 200:
                raise StreamRefused(r.status, r.read())
            event, ident, data = "message", None, []
            while True:
                line = r.readline()
                if not line:
                    return
                line = line.decode("utf-8").rstrip("\r\n")
                if not line:
                    if data:
                        yield event, ident, "\n".join(data)
                    event, ident, data = "message", None, []
                elif line.startswith(":"):
                    continue
                else:
                    name, _, value = line.partition(":")
                    value = value[1:] if value.startswith(" ") else value
                    if name == "data":
                        data.append(value)
                    elif name == "id":
                        ident = value
                    elif name == "event":
                        event = value
        finally:
            conn.close()


class StreamRefused(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"{status}: {body[:200]!r}")
        self.status, self.body = status, body


def sub_path(ident: Any, tail: str = "") -> str:
    return f"/v1/subscriptions/{quote(str(ident), safe='')}{tail}"
