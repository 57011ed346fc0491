"""Retention of settled reports (`reports.settled_retention_days`): a background pass on the
primary removes reports resolved longer ago than that, a bounded batch per short write
transaction with a pause between batches, so requests get the writer in between. Open
reports are never removed, however old."""

from __future__ import annotations

from typing import Any

from daemon.plugin import iso
from daemon.plugin.storage import prune_in_batches
from plugins.reports import store

#: Reports removed by one transaction, at most.
BATCH = 1000


async def prune_settled(app: Any, batch: int = BATCH) -> int:
    """One pass: delete the reports settled before the retention window, oldest first, in
    batches of `batch`; how many it removed (0 when the retention is 0: keep for good)."""
    days = app.config.plugin("reports").settled_retention_days
    if not days:
        return 0
    cutoff = iso(app.clock.time() - days * 86400)

    async def one_batch(limit: int) -> int:
        async with app.db.transaction("reports.prune") as tx:
            return await store.prune_settled_tx(tx, cutoff, limit)

    return await prune_in_batches("reports.settled", one_batch, limit=batch)  # logs what it removed
