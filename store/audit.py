"""The per-community audit log of admin actions and membership changes."""

from __future__ import annotations

import json
from typing import Any

from store.db import Database, Row, Transaction


async def insert_entry_tx(tx: Transaction, *, community_did: str, action: str,
                          actor_did: str | None, target_did: str | None, reason: str | None,
                          metadata: dict[str, Any] | None, app_id: str | None, now: str) -> int:
    cur = await tx.execute(
        "INSERT INTO audit_log (community_did, action, actor_did, target_did, reason, metadata, "
        "app_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (community_did, action, actor_did, target_did, reason,
         json.dumps(metadata or {}, separators=(",", ":")), app_id, now))
    return cur.lastrowid


async def list_entries(db: Database, community_did: str, *, limit: int,
                       before_id: int | None, action: str | None = None) -> list[Row]:
    """Newest first, keyset on `id`."""
    where = ["community_did = ?"]
    params: list[Any] = [community_did]
    if before_id is not None:
        where.append("id < ?")
        params.append(before_id)
    if action is not None:
        where.append("action = ?")
        params.append(action)
    params.append(limit)
    return await db.fetchall(
        f"SELECT * FROM audit_log WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?", params)


async def scan_after(db: Database, after_id: int, limit: int) -> list[Row]:
    """The next `limit` entries after `after_id`, oldest first (a rowid range: the pruner
    walks the log in `id` order, which is time order), each with whether it records a
    refused action (`denied`), decided by SQLite so the event loop parses no JSON."""
    return await db.fetchall(
        "SELECT id, created_at, json_valid(metadata) AND json_extract(metadata, '$.outcome') = 'denied' AS denied "
        "FROM audit_log WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit))


async def delete_entries_tx(tx: Transaction, ids: list[int]) -> int:
    await tx.executemany("DELETE FROM audit_log WHERE id = ?", [(i,) for i in ids])
    return len(ids)
