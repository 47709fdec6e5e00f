"""Redis Streams as a bus (SPEC section 9): the URL, the connection, and the sink.

``redis://HOST:PORT/KEY`` (or ``redis://HOST:PORT/DB/KEY``; ``rediss://`` for TLS) names a
stream; the password comes from ``REDIS_PASSWORD``, never from the URL (a URL ends up in
logs, ``run.json`` and error messages).

The sink writes each notification as one entry with the field ``notification`` (its JSON
line without the newline), in the order of ``notifications.jsonl``, under an explicit id made
from the notification's key (``spark/sink.py``): ``<event seq>-<registration position * 16 +
k>`` (``k`` numbers the notifications one event gives one registration: 0, seldom 1). Ids grow
along ``notifications.jsonl``, so a replayed batch finds its first entries already there
(ids at most the stream's last) and adds only the rest: exactly once, whatever point the
writer was killed at (a pipeline is applied in order: what reached Redis is a prefix). A
marker key (``KEY:skpubsub-run``) names the run that writes the stream: a stream written by
another run is refused, since its ids would hide ours.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

SCHEMES = ("redis", "rediss")
FIELD_EVENT, FIELD_NOTE = b"event", "notification"
PIPELINE = 2000  # XADDs per round trip


def is_redis(where: Any) -> bool:
    """A Redis stream URL, or something that holds one (``spark.redis_stream.RedisInput``)."""
    if isinstance(where, str):
        return where.split(":", 1)[0].lower() in SCHEMES
    return isinstance(where, RedisURL) or isinstance(getattr(where, "url", None), RedisURL)


@dataclass(frozen=True)
class RedisURL:
    """A parsed stream URL (no password in it)."""

    tls: bool
    host: str
    port: int
    db: int
    key: str

    @classmethod
    def parse(cls, url: str | RedisURL) -> RedisURL:
        if isinstance(url, RedisURL):
            return url
        u = urlsplit(url)
        if u.scheme.lower() not in SCHEMES:
            raise ValueError(f"not a Redis stream URL: {url!r} (redis://HOST:PORT/KEY)")
        if u.username is not None or u.password is not None:
            raise ValueError("a Redis URL carries no user or password: give it in REDIS_PASSWORD")
        try:
            port = u.port or 6379
        except ValueError:
            raise ValueError(f"bad port in {url!r}") from None
        parts = [unquote(p) for p in u.path.split("/")[1:]]
        if len(parts) == 2 and re.fullmatch(r"\d+", parts[0]):
            db, key = int(parts[0]), parts[1]
        elif len(parts) == 1:
            db, key = 0, parts[0]
        else:
            raise ValueError(f"bad Redis stream URL {url!r}: redis://HOST:PORT/KEY or redis://HOST:PORT/DB/KEY")
        if not u.hostname or not key or u.query or u.fragment:
            raise ValueError(f"bad Redis stream URL {url!r}: redis://HOST:PORT/KEY or redis://HOST:PORT/DB/KEY")
        return cls(u.scheme.lower() == "rediss", u.hostname, port, db, key)

    @property
    def uri(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'rediss' if self.tls else 'redis'}://{host}:{self.port}/{self.db}/{self.key}"

    def __str__(self) -> str:
        return self.uri

    def connect(self):
        """A client (redis-py); its errors are redis.RedisError."""
        try:
            import redis
        except ImportError:
            raise ValueError("Redis streams need the redis package: pip install 'skpubsub[redis]'") from None
        return redis.Redis(host=self.host, port=self.port, db=self.db, ssl=self.tls,
                           password=os.environ.get("REDIS_PASSWORD") or None, socket_timeout=30,
                           socket_connect_timeout=10, health_check_interval=30)


def redis_errors() -> tuple[type[BaseException], ...]:
    import redis

    return (redis.RedisError,)


def entry_ids(keys: Iterable[bytes]) -> Iterable[str]:
    """The entry id of each notification key (32 hex digits: event seq, registration
    position; spark/sink.py), in order: ``seq-(reg * 16 + k)``."""
    prev, k = None, 0
    for key in keys:
        k = k + 1 if key == prev else 0
        if k >= 16:
            raise ValueError(f"more than 16 notifications of one event for one subscription ({key!r})")
        prev = key
        yield f"{int(key[:16], 16)}-{int(key[16:32], 16) * 16 + k}"


def _id(v: bytes | str) -> tuple[int, int]:
    s = v.decode() if isinstance(v, bytes) else v
    a, _, b = s.partition("-")
    return int(a), int(b or 0)


class StreamSink:
    """Appends notifications to one stream, exactly once across replays (module docstring)."""

    def __init__(self, url: str | RedisURL, run: str) -> None:
        self.url = RedisURL.parse(url)
        self.run = run
        self.r = None
        self.checked = False

    def _client(self):
        if self.r is None:
            self.r = self.url.connect()
        return self.r

    def _claim(self) -> None:
        """The stream is this run's: the marker says so, or the stream is empty and gets it."""
        r, key = self._client(), self.url.key
        marker = f"{key}:skpubsub-run"
        r.set(marker, self.run, nx=True)
        owner = r.get(marker)
        if owner is not None and owner.decode() != self.run:
            raise ValueError(f"Redis stream {self.url} is written by another run ({marker} = {owner.decode()}); "
                             "delete the stream and the marker, or give another KEY")
        self.checked = True

    def write(self, keyed: Iterable[tuple[bytes, bytes]]) -> int:
        """Append (key, line) pairs in order, skipping what a replay finds written; returns
        how many were added."""
        try:
            return self._write(keyed)
        except redis_errors() as exc:
            raise ValueError(f"Redis stream {self.url}: {type(exc).__name__}: {exc}") from None

    def _write(self, keyed: Iterable[tuple[bytes, bytes]]) -> int:
        if not self.checked:
            self._claim()
        r, key = self._client(), self.url.key
        top = r.xrevrange(key, count=1)
        last = _id(top[0][0]) if top else (0, 0)
        added = pending = 0
        pipe = r.pipeline(transaction=False)
        pairs = list(keyed)
        for eid, (_, line) in zip(entry_ids([k for k, _ in pairs]), pairs):
            if _id(eid) <= last:
                continue  # written before this batch was replayed
            pipe.xadd(key, {FIELD_NOTE: line.rstrip(b"\n")}, id=eid)
            pending += 1
            if pending >= PIPELINE:
                pipe.execute()
                added, pending = added + pending, 0
        if pending:
            pipe.execute()
            added += pending
        return added
