"""Bans of users from communities. Whether a ban is in force is read with the member's
status (`store.members.active_ban`), so an admission reads one module."""

from __future__ import annotations

from typing import Any

from store.db import Database, Row, Transaction
from store.members import active_ban


async def put_ban_tx(tx: Transaction, *, community_did: str, member_did: str, reason: str | None,
                     expires_at: str | None, banned_by: str, app_id: str | None, now: str) -> None:
    """Record a ban, replacing an expired one of the same user (a new id: newest last)."""
    await tx.execute("DELETE FROM community_bans WHERE community_did = ? AND member_did = ?",
                     (community_did, member_did))
    await tx.execute(
        "INSERT INTO community_bans (community_did, member_did, reason, expires_at, banned_by, app_id, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (community_did, member_did, reason, expires_at, banned_by, app_id, now))


async def lift_tx(tx: Transaction, community_did: str, member_did: str, now: str) -> Row | None:
    """Delete the user's ban; the row if it was still in force (an expired one is only cleaned up)."""
    row = await active_ban(tx, community_did, member_did, now)
    await tx.execute("DELETE FROM community_bans WHERE community_did = ? AND member_did = ?",
                     (community_did, member_did))
    return row


async def list_bans(db: Database, community_did: str, now: str, *, limit: int,
                    before_id: int | None) -> list[Row]:
    """Bans in force, newest first, with the cached profile of each user; keyset on `id`."""
    params: list[Any] = [community_did, now]
    extra = ""
    if before_id is not None:
        extra = "AND b.id < ? "
        params.append(before_id)
    params.append(limit)
    return await db.fetchall(
        "SELECT b.*, p.handle, p.display_name FROM community_bans b "
        "LEFT JOIN user_profiles p ON p.did = b.member_did "
        f"WHERE b.community_did = ? AND (b.expires_at IS NULL OR b.expires_at > ?) {extra}"
        "ORDER BY b.id DESC LIMIT ?", params)
