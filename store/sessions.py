"""Browser sessions (the `sid` cookie). Only a hash of the cookie value is stored."""

from __future__ import annotations

from store.db import Database, Row, Transaction


async def create_session_tx(tx: Transaction, *, id_hash: str, did: str, handle: str | None,
                            csrf_token: str, now: float, expires_at: float) -> None:
    await tx.execute(
        "INSERT INTO sessions (id_hash, did, handle, csrf_token, created_at, last_seen_at, expires_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)", (id_hash, did, handle, csrf_token, now, now, expires_at))


async def get_session(db: Database, id_hash: str) -> Row | None:
    return await db.fetchone_now("SELECT * FROM sessions WHERE id_hash = ?", (id_hash,))


async def touch_session_tx(tx: Transaction, id_hash: str, now: float) -> None:
    await tx.execute("UPDATE sessions SET last_seen_at = ? WHERE id_hash = ?", (now, id_hash))


async def delete_session_tx(tx: Transaction, id_hash: str) -> None:
    await tx.execute("DELETE FROM sessions WHERE id_hash = ?", (id_hash,))


async def session_ids_of(db: Database, did: str) -> list[str]:
    rows = await db.fetchall("SELECT id_hash FROM sessions WHERE did = ?", (did,))
    return [row["id_hash"] for row in rows]


async def delete_sessions_of_tx(tx: Transaction, did: str) -> int:
    cur = await tx.execute("DELETE FROM sessions WHERE did = ?", (did,))
    return cur.rowcount


async def update_handle_tx(tx: Transaction, id_hash: str, handle: str | None) -> None:
    await tx.execute("UPDATE sessions SET handle = ? WHERE id_hash = ?", (handle, id_hash))


async def delete_expired_tx(tx: Transaction, now: float, idle_cutoff: float) -> int:
    cur = await tx.execute(
        "DELETE FROM sessions WHERE expires_at <= ? OR last_seen_at <= ?", (now, idle_cutoff))
    return cur.rowcount
