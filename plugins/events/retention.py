"""Retention of the events outbox (`events.retention_days`): old events are removed in
bounded batches by a background pass, never one a plugin still needs (`cr_events_needed`:
the webhooks plugin's pending deliveries)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from daemon.plugin import iso
from daemon.plugin.events import Outbox

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application

log = logging.getLogger("commonroom.events")

#: Events deleted per transaction: the writer is never held long.
BATCH = 1000


async def needed_floor(app: "Application") -> int | None:
    """The lowest event seq any plugin still needs (None: none)."""
    floors = [f for f in await app.call_hook(app.pm.hook.cr_events_needed, app=app) if f is not None]
    return min(floors) if floors else None


async def prune_events(app: "Application", batch: int = BATCH) -> int:
    """One pruning pass: delete events older than `events.retention_days`, oldest first,
    `batch` per transaction, stopping at the first event a plugin still needs. Returns
    the count deleted."""
    days = app.config.plugin("events").retention_days
    cutoff = iso(app.clock.time() - days * 86400)
    total = 0
    while True:
        floor = await needed_floor(app)
        async with app.db.transaction("events.prune") as tx:
            removed = await Outbox.prune_tx(tx, cutoff, floor, batch)
        total += removed
        if removed < batch:
            break
        await asyncio.sleep(0)  # requests get the writer between batches
    if total:
        log.info("pruned %d events older than %d days from the outbox", total, days)
        from plugins.events.stream import stream_of
        metrics = stream_of(app).metrics
        if metrics is not None:
            metrics.pruned.inc(total)
    return total
