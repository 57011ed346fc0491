"""The webhooks plugin's metrics (through `cr_metrics`): the queue's depth and the age of
its oldest delivery, read at each scrape, and deliveries by outcome, counted as they happen."""

from __future__ import annotations

import datetime
from typing import Any

from prometheus_client import Counter, Gauge

from plugins.webhooks import store as store


class WebhookMetrics:
    def __init__(self, app: Any, registry: Any) -> None:
        self.app = app
        self.depth = Gauge("commonroom_webhooks_queue_depth", "Deliveries waiting to be sent.", registry=registry)
        self.oldest = Gauge("commonroom_webhooks_queue_oldest_age_seconds",
                            "Age of the oldest delivery still waiting (0 when none).", registry=registry)
        self.outcomes = Counter("commonroom_webhooks_deliveries",
                                "Delivery attempts by outcome: delivered, retry (will try again), "
                                "failed (given up).", ["outcome"], registry=registry)
        for outcome in ("delivered", "retry", "failed"):
            self.outcomes.labels(outcome)

    def record(self, outcome: str, count: int = 1) -> None:
        if count:
            self.outcomes.labels(outcome).inc(count)

    async def refresh(self) -> None:
        depth, oldest = await store.queue_stats(self.app.db)
        self.depth.set(depth)
        age = 0.0
        if oldest:
            created = datetime.datetime.fromisoformat(oldest.replace("Z", "+00:00")).timestamp()
            age = max(0.0, self.app.clock.time() - created)
        self.oldest.set(age)


def record(app: Any, outcome: str, count: int = 1) -> None:
    from plugins.webhooks.service import webhooks_of
    metrics = webhooks_of(app).metrics
    if metrics is not None:
        metrics.record(outcome, count)
