"""Retention of settled reports (`reports.settled_retention_days`): a background pass on the
primary removes reports resolved longer ago than that, a bounded batch per short write
transaction with a pause between batches, so requests get the writer in between. Open
reports are never removed, however old."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from daemon.plugin import iso
from plugins.reports import store

log = logging.getLogger("commonroom.reports")

#: Reports removed by one transaction, at most.
BATCH = 1000
#: The pause between two batches.
PAUSE_SECONDS = 0.05


async def prune_settled(app: Any, batch: int = BATCH) -> int:
    """One pass: delete the reports settled before the retention window, oldest first, in
    batches of `batch`; how many it removed (0 when the retention is 0: keep for good)."""
    days = app.config.plugin("reports").settled_retention_days
    if not days:
        return 0
    cutoff = iso(app.clock.time() - days * 86400)
    total = 0
    while True:
        async with app.db.transaction("reports.prune") as tx:
            removed = await store.prune_settled_tx(tx, cutoff, batch)
        total += removed
        if removed < batch:
            break
        await asyncio.sleep(PAUSE_SECONDS)
    if total:
        log.info("reports: pruned %d report(s) settled more than %d days ago", total, days)
    return total
