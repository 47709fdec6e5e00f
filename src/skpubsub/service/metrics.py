"""Prometheus metrics of one service (its own registry: several apps may share a process)."""

from __future__ import annotations

import time
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.events = Counter("skpubsub_events", "Accepted events by kind", ["kind"], registry=r)
        self.rejected = Counter("skpubsub_rejected", "Rejected events by what they meant to be", ["kind"], registry=r)
        self.notifications = Counter("skpubsub_notifications", "Notifications made", registry=r)
        self.requests = Counter("skpubsub_requests", "HTTP answers by route and status", ["route", "status"],
                                registry=r)
        self.latency = Histogram("skpubsub_request_seconds", "Write requests: body read to answer", ["route"],
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.batch = Histogram("skpubsub_batch_events", "Events per micro-batch",
                               buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000), registry=r)
        self.wal = Histogram("skpubsub_wal_seconds", "Log write (and fsync) per micro-batch",
                             buckets=LATENCY_BUCKETS, registry=r)
        self.apply = Histogram("skpubsub_apply_seconds", "Engine apply per micro-batch",
                               buckets=LATENCY_BUCKETS, registry=r)
        self.objects_per_second = Gauge("skpubsub_objects_per_second", "Objects published, last 10 s",
                                        registry=r)
        self.subscriptions = Gauge("skpubsub_subscriptions", "Live subscriptions", registry=r)
        self.seq = Gauge("skpubsub_seq", "Stream position of the last accepted event", registry=r)
        self.streams = Gauge("skpubsub_sse_streams", "Open SSE streams", registry=r)
        self.dropped = Counter("skpubsub_sse_dropped", "SSE streams dropped as slow consumers", registry=r)
        self.snapshots = Counter("skpubsub_snapshots", "Snapshots written", registry=r)
        self._pubs: deque[tuple[float, int]] = deque()
        self._sum = 0  # objects in _pubs

    def published(self, n: int) -> None:
        now = time.monotonic()
        q = self._pubs
        q.append((now, n))
        self._sum += n
        while q and q[0][0] < now - 10.0:
            self._sum -= q.popleft()[1]
        span = max(1.0, min(10.0, now - q[0][0])) if q else 10.0
        self.objects_per_second.set(self._sum / span)

    def text(self) -> bytes:
        self.published(0)
        return generate_latest(self.registry)
