"""Write intents: the one table of PDS writes in progress (daemon/atproto/writes.py)."""

from __future__ import annotations

import json
from typing import Any

from store.db import Database, Reader, Row, Transaction


async def get(db: Reader, key: str) -> Row | None:
    return await db.fetchone("SELECT * FROM write_intents WHERE key = ?", (key,))


async def begin_tx(tx: Transaction, *, kind: str, key: str, community_did: str | None,
                   operation: str, rkey: str | None, payload: dict[str, Any], now: str,
                   reuse: bool = True) -> Row:
    """The intent `key`: with `reuse`, the existing one if any (a retry: same rkey, one
    more try); otherwise a new row (a clash on `key` raises)."""
    if reuse:
        row = await get(tx, key)
        if row is not None:
            await tx.execute("UPDATE write_intents SET tries = tries + 1 WHERE id = ?", (row["id"],))
            return row
    await tx.execute(
        "INSERT INTO write_intents (kind, key, community_did, operation, rkey, payload, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (kind, key, community_did, operation, rkey,
         json.dumps(payload, separators=(",", ":"), ensure_ascii=False), now))
    row = await get(tx, key)
    assert row is not None
    return row


async def delete_tx(tx: Transaction, intent_id: int, tries: int | None = None) -> bool:
    """Remove an intent (only if it is still at `tries`, when given: no request picked it
    up meanwhile); False if it was already gone."""
    if tries is None:
        cur = await tx.execute("DELETE FROM write_intents WHERE id = ?", (intent_id,))
    else:
        cur = await tx.execute("DELETE FROM write_intents WHERE id = ? AND tries = ?", (intent_id, tries))
    return cur.rowcount > 0


async def delete_community_tx(tx: Transaction, community_did: str) -> None:
    """Forget every intent of a community (deleted, or reindexed from its repo)."""
    await tx.execute("DELETE FROM write_intents WHERE community_did = ?", (community_did,))


async def postpone_tx(tx: Transaction, intent_id: int, *, next_attempt_at: str, error: str) -> None:
    await tx.execute(
        "UPDATE write_intents SET attempts = attempts + 1, next_attempt_at = ?, last_error = ? "
        "WHERE id = ?", (next_attempt_at, error[:500], intent_id))


async def due(db: Database, *, kind: str, created_before: str | None, now: str | None,
              after_id: int, limit: int) -> list[Row]:
    """Intents of `kind` to settle, oldest first from `after_id`: created before
    `created_before` (None: any age) and not waiting out a backoff at `now` (None: ignore
    backoffs)."""
    sql = "SELECT * FROM write_intents WHERE kind = ? AND id > ?"
    params: list[Any] = [kind, after_id]
    if now is not None:
        sql += " AND (next_attempt_at IS NULL OR next_attempt_at <= ?)"
        params.append(now)
    if created_before is not None:
        sql += " AND created_at <= ?"
        params.append(created_before)
    sql += " ORDER BY id LIMIT ?"
    params.append(limit)
    return await db.fetchall(sql, params)


async def pending(db: Database, *, community_did: str | None = None, kind_prefix: str | None = None) -> list[Row]:
    """Every intent (of one community, of the kinds starting with `kind_prefix`), oldest first."""
    sql, params = "SELECT * FROM write_intents WHERE 1 = 1", []
    if community_did is not None:
        sql += " AND community_did = ?"
        params.append(community_did)
    if kind_prefix is not None:
        sql += " AND substr(kind, 1, ?) = ?"
        params += [len(kind_prefix), kind_prefix]
    return await db.fetchall(sql + " ORDER BY id", params)
