"""Removing audit entries of refused actions past `communities.denied_audit_retention_days`.

Entries are written in time order, so the pruner walks the log by `id` from where its last
pass stopped, a batch at a time (a rowid range read on a reader thread, then one short
write transaction for the denied entries in it), deleting the denied entries older than the
cutoff and stopping at the first entry that is not older. Every other entry is kept. After
a restart the pruner walks the old part of the log once more (reads only)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from daemon.plugin import iso
from daemon.plugin.storage import PRUNE_BATCH as BATCH, PRUNE_PAUSE_SECONDS as PAUSE_SECONDS
from plugins.communities import store

log = logging.getLogger("commonroom.retention")

START_DELAY_SECONDS = 60.0


class DeniedAuditPruner:
    def __init__(self, app: Any) -> None:
        self.app = app
        #: Every entry up to this id is kept for good or already removed.
        self.done_up_to = 0

    async def periodic(self, first: bool) -> None:
        """For `spawn_periodic`: the first pass a minute after start-up, not during it."""
        if first:
            await self.app.clock.sleep(START_DELAY_SECONDS)
        await self.prune()

    async def prune(self) -> int:
        """One pass; how many entries it removed."""
        days = self.app.config.plugin("communities").denied_audit_retention_days
        cutoff = iso(self.app.clock.time() - days * 86400)
        removed = 0
        while True:
            rows = await store.scan_after(self.app.db, self.done_up_to, BATCH)
            doomed, last, reached = [], self.done_up_to, False
            for row in rows:
                if row["created_at"] >= cutoff:
                    reached = True
                    break
                last = row["id"]
                if row["denied"]:
                    doomed.append(row["id"])
            if doomed:
                async with self.app.db.transaction("communities.audit_prune") as tx:
                    removed += await store.delete_entries_tx(tx, doomed)
            self.done_up_to = last
            if reached or len(rows) < BATCH:
                break
            await asyncio.sleep(PAUSE_SECONDS)
        if removed:
            log.info("communities.denied_audit: pruned %d denied-action audit entries", removed)
        return removed
