"""Queries of the creation requests (`creation_requests`, migration instance/0003). Reads
take a `Reader`: ``app.db`` or a transaction."""

from __future__ import annotations

from typing import Any

from daemon.plugin import Reader, Row, Transaction

WAITING = ("pending", "approved")


async def insert_tx(tx: Transaction, *, requester_did: str, fields: dict[str, Any], app_id: str | None,
                    now: str) -> int:
    listed = fields.get("listed")
    cur = await tx.execute(
        "INSERT INTO creation_requests (requester_did, display_name, description, type, handle, roster_visibility,"
        " listed, recovery_key, app_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (requester_did, fields["display_name"], fields.get("description") or "", fields["type"], fields.get("handle"),
         fields.get("roster_visibility"), None if listed is None else int(bool(listed)), fields.get("recovery_key"),
         app_id, now))
    return int(cur.lastrowid)


async def get(db: Reader, request_id: int) -> Row | None:
    return await db.fetchone("SELECT * FROM creation_requests WHERE id = ?", (request_id,))


async def waiting_of(db: Reader, requester_did: str) -> list[Row]:
    """The person's requests not yet decided or not yet created."""
    return await db.fetchall(
        "SELECT * FROM creation_requests WHERE requester_did = ? AND state IN ('pending', 'approved') ORDER BY id",
        (requester_did,))


async def of_person(db: Reader, requester_did: str, *, since: str, limit: int = 20) -> list[Row]:
    """The person's requests: every waiting one, and those decided since `since`; newest first."""
    return await db.fetchall(
        "SELECT * FROM creation_requests WHERE requester_did = ?"
        " AND (state IN ('pending', 'approved') OR decided_at >= ?) ORDER BY id DESC LIMIT ?",
        (requester_did, since, limit))


async def listing(db: Reader, *, states: tuple[str, ...], limit: int, before: int | None = None) -> list[Row]:
    """Requests in `states`, oldest waiting first for the queue, newest first otherwise."""
    marks = ", ".join("?" for _ in states)
    order = "ASC" if set(states) <= set(WAITING) else "DESC"
    return await db.fetchall(
        f"SELECT * FROM creation_requests WHERE state IN ({marks}) AND (? IS NULL OR id < ?)"
        f" ORDER BY id {order} LIMIT ?", (*states, before, before, limit))


async def count_waiting(db: Reader) -> int:
    return int(await db.fetchval("SELECT count(*) FROM creation_requests WHERE state IN ('pending', 'approved')"))


async def approve_tx(tx: Transaction, request_id: int, *, operator_did: str, now: str) -> bool:
    cur = await tx.execute(
        "UPDATE creation_requests SET state = 'approved', decided_by = ?, decided_at = ?, error = NULL"
        " WHERE id = ? AND state = 'pending'", (operator_did, now, request_id))
    return cur.rowcount == 1


async def created_tx(tx: Transaction, request_id: int, *, community_did: str) -> None:
    await tx.execute("UPDATE creation_requests SET state = 'created', community_did = ?, error = NULL"
                     " WHERE id = ? AND state = 'approved'", (community_did, request_id))


async def failed_tx(tx: Transaction, request_id: int, *, error: str) -> None:
    await tx.execute("UPDATE creation_requests SET error = ? WHERE id = ? AND state = 'approved'",
                     (error, request_id))


async def decline_tx(tx: Transaction, request_id: int, *, operator_did: str, reason: str, now: str) -> bool:
    cur = await tx.execute(
        "UPDATE creation_requests SET state = 'declined', reason = ?, decided_by = ?, decided_at = ?"
        " WHERE id = ? AND state IN ('pending', 'approved')", (reason, operator_did, now, request_id))
    return cur.rowcount == 1
