"""The instance plugin's own tables (migrations/0002): instance-wide bans and suspended
communities. SQL lives here; the rest of the plugin calls these functions."""

from __future__ import annotations

from typing import Any

from daemon.plugin import Reader, Row, Transaction

# ------------------------------------------------------------------ bans


async def put_ban_tx(tx: Transaction, *, subject: str, kind: str, reason: str, expires_at: str | None,
                     end_memberships: bool, operator_did: str, now: str) -> None:
    """Ban `subject` (a new ban replaces the one in place: its reason, expiry, date)."""
    await tx.execute(
        "INSERT INTO instance_bans (subject, kind, reason, expires_at, end_memberships, operator_did, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (subject) DO UPDATE SET reason = excluded.reason,"
        " expires_at = excluded.expires_at, end_memberships = excluded.end_memberships,"
        " operator_did = excluded.operator_did, created_at = excluded.created_at",
        (subject, kind, reason, expires_at, 1 if end_memberships else 0, operator_did, now))


async def delete_ban_tx(tx: Transaction, subject: str) -> bool:
    cursor = await tx.execute("DELETE FROM instance_bans WHERE subject = ?", (subject,))
    return cursor.rowcount > 0


async def list_bans(db: Reader, *, query: str | None = None, limit: int = 500) -> list[Row]:
    """Every ban, in force or expired, newest first (`query`: part of the subject)."""
    if query:
        return await db.fetchall(
            "SELECT * FROM instance_bans WHERE instr(subject, ?) > 0 ORDER BY id DESC LIMIT ?",
            (query.lower(), limit))
    return await db.fetchall("SELECT * FROM instance_bans ORDER BY id DESC LIMIT ?", (limit,))


async def counts(db: Reader, now: str) -> dict[str, int]:
    """Bans in force and suspended communities, for the console's overview."""
    bans = await db.fetchval("SELECT COUNT(*) FROM instance_bans WHERE expires_at IS NULL OR expires_at > ?", (now,))
    suspended = await db.fetchval("SELECT COUNT(*) FROM instance_suspensions")
    return {"bans": int(bans or 0), "suspended": int(suspended or 0)}


async def get_ban(db: Reader, subject: str) -> Row | None:
    return await db.fetchone("SELECT * FROM instance_bans WHERE subject = ?", (subject,))


# ------------------------------------------------------------------ suspensions


async def suspend_tx(tx: Transaction, community_did: str, reason: str, operator_did: str, now: str) -> None:
    await tx.execute(
        "INSERT INTO instance_suspensions (community_did, reason, operator_did, created_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (community_did) DO UPDATE SET reason = excluded.reason,"
        " operator_did = excluded.operator_did, created_at = excluded.created_at",
        (community_did, reason, operator_did, now))


async def lift_tx(tx: Transaction, community_did: str) -> bool:
    cursor = await tx.execute("DELETE FROM instance_suspensions WHERE community_did = ?", (community_did,))
    return cursor.rowcount > 0


async def suspension(db: Reader, community_did: str) -> Row | None:
    return await db.fetchone("SELECT * FROM instance_suspensions WHERE community_did = ?", (community_did,))


async def suspended_dids(db: Reader) -> list[str]:
    return [row["community_did"] for row in await db.fetchall("SELECT community_did FROM instance_suspensions")]


async def suspensions(db: Reader, dids: list[str]) -> dict[str, Any]:
    """community DID -> its suspension row, for those of `dids` that are suspended."""
    if not dids:
        return {}
    marks = ",".join("?" * len(dids))
    rows = await db.fetchall(f"SELECT * FROM instance_suspensions WHERE community_did IN ({marks})", dids)
    return {row["community_did"]: row for row in rows}
