"""The event stream's metrics (through `cr_metrics`)."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge


class StreamMetrics:
    def __init__(self, stream: Any, registry: Any) -> None:
        self.stream = stream
        self.subscribers = Gauge("commonroom_events_subscribers", "WebSocket subscribers connected.",
                                 registry=registry)
        self.sent = Counter("commonroom_events_sent",
                            "Events sent to apps by the stream (pulls and WebSocket messages).",
                            registry=registry)
        self.slow_closes = Counter("commonroom_events_slow_consumer_closes",
                                   "WebSocket subscribers closed as slow consumers (close code 4008).",
                                   registry=registry)
        self.pruned = Counter("commonroom_events_pruned", "Events removed from the outbox by retention.",
                              registry=registry)

    async def refresh(self) -> None:
        self.subscribers.set(len(self.stream.subscribers))
