"""Pruning what grows without bound, in bounded batches (docs/operations.md, "Disk").

Each table's owner decides what may go (delivery logs past `webhooks.delivery_log_retention_days`,
denied-action audit entries past `communities.denied_audit_retention_days`, the events outbox
past `events.retention_days` once it has one); `prune_in_batches` runs its deletions as short
write transactions of at most a batch each, on the database's own threads, with a pause
between them so requests and other writes go in between. Pending write intents are never
pruned (they are the reconciler's record of PDS writes in flight), nor is anything a pending
webhook delivery still needs.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

log = logging.getLogger("commonroom.retention")

#: Rows removed by one transaction, at most: a few milliseconds of the writer's time.
BATCH = 1000
#: The pause between two batches, so the writer is never held for long.
PAUSE_SECONDS = 0.05


async def prune_in_batches(name: str, batch: Callable[[int], Awaitable[int]], *,
                           limit: int = BATCH, max_batches: int = 100_000) -> int:
    """Call ``batch(limit)`` (it removes at most `limit` rows in one transaction and says how
    many) until a call removes fewer than `limit`; the total removed."""
    total = 0
    for _ in range(max_batches):
        removed = await batch(limit)
        total += removed
        if removed < limit:
            break
        await asyncio.sleep(PAUSE_SECONDS)
    if total:
        log.info("%s: pruned %d row(s)", name, total)
    return total
