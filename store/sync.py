"""Sync with the network: the stream cursor and account status (core tables,
migrations/0004_sync.sql). The index queries the communities plugin's sync needs are in
that plugin (plugins/communities/store.py)."""

from __future__ import annotations

from store.db import Database, Reader, Row, Transaction

# ------------------------------------------------------------------ the cursor


async def get_cursor(db: Database, source: str) -> Row | None:
    return await db.fetchone("SELECT * FROM sync_cursors WHERE source = ?", (source,))


async def save_cursor_tx(tx: Transaction, source: str, cursor: int, event_time: str | None,
                         now: str) -> None:
    await tx.execute(
        "INSERT INTO sync_cursors (source, cursor, event_time, updated_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (source) DO UPDATE SET cursor = excluded.cursor, "
        "event_time = COALESCE(excluded.event_time, sync_cursors.event_time), "
        "updated_at = excluded.updated_at", (source, cursor, event_time, now))


# ------------------------------------------------------------------ account status


async def set_inactive_tx(tx: Transaction, did: str, status: str, now: str) -> None:
    """Record that `did`'s account is not active (a status change keeps `since`)."""
    await tx.execute(
        "INSERT INTO account_status (did, status, since) VALUES (?, ?, ?) "
        "ON CONFLICT (did) DO UPDATE SET status = excluded.status", (did, status, now))


async def set_active_tx(tx: Transaction, did: str) -> bool:
    cur = await tx.execute("DELETE FROM account_status WHERE did = ?", (did,))
    return cur.rowcount > 0




async def account_status(db: Reader, did: str) -> str | None:
    """What the network last said of `did`'s account when it is not active (``takendown``,
    ``suspended``, ``deactivated``, ``deleted``, ``inactive``...), or None while it is
    active or was never said otherwise (``daemon.plugin.atproto.account_status``)."""
    return await db.fetchval("SELECT status FROM account_status WHERE did = ?", (did,))


async def record_account_status_tx(tx: Transaction, did: str, *, active: bool, status: str | None,
                                   now: str) -> None:
    """What the network's stream said of `did`'s account (an ``account`` event): active
    again forgets it; otherwise its `status` is kept (``inactive`` when the stream names
    none), the date it first stopped being active too. The one way a plugin writes the
    core's ``account_status`` (``daemon.plugin.record_account_status_tx``)."""
    if active:
        await set_active_tx(tx, did)
    else:
        await set_inactive_tx(tx, did, status or "inactive", now)
