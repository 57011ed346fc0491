"""The domain-event outbox."""

from __future__ import annotations

from store.db import Database, Row, Transaction


async def insert_event_tx(tx: Transaction, *, event_id: str, type: str, community_did: str | None,
                          app_id: str | None, actor_did: str | None, data_json: str,
                          created_at: str) -> int:
    cur = await tx.execute(
        "INSERT INTO events (id, type, community_did, app_id, actor_did, data, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (event_id, type, community_did, app_id, actor_did, data_json, created_at))
    return cur.lastrowid


async def get_event(db: Database, event_id: str) -> Row | None:
    return await db.fetchone("SELECT * FROM events WHERE id = ?", (event_id,))
