"""Invite links of communities (only the codes' hashes are stored)."""

from __future__ import annotations

from typing import Any

from store.db import Database, Row, Transaction


async def insert_invite_tx(tx: Transaction, *, community_did: str, code_hash: str, max_uses: int | None,
                           expires_at: str | None, note: str | None, created_by: str,
                           app_id: str | None, now: str) -> int:
    cur = await tx.execute(
        "INSERT INTO community_invites (community_did, code_hash, max_uses, expires_at, note, created_by, "
        "app_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (community_did, code_hash, max_uses, expires_at, note, created_by, app_id, now))
    return int(cur.lastrowid)


async def get_invite(reader: Database | Transaction, *, code_hash: str | None = None,
                     invite_id: int | None = None) -> Row | None:
    """By the code's hash or by id (either a database or a transaction reads it)."""
    if code_hash is not None:
        return await reader.fetchone("SELECT * FROM community_invites WHERE code_hash = ?", (code_hash,))
    return await reader.fetchone("SELECT * FROM community_invites WHERE id = ?", (invite_id,))


async def list_invites(db: Database, community_did: str, *, limit: int, before_id: int | None) -> list[Row]:
    """Newest first, keyset on `id` (revoked and used-up ones included)."""
    params: list[Any] = [community_did]
    extra = ""
    if before_id is not None:
        extra = "AND id < ? "
        params.append(before_id)
    params.append(limit)
    return await db.fetchall(
        f"SELECT * FROM community_invites WHERE community_did = ? {extra}ORDER BY id DESC LIMIT ?", params)


async def claim_use_tx(tx: Transaction, invite_id: int, now: str) -> bool:
    """Count one use if the invite is still usable (not revoked, not expired, uses left):
    the check and the count are one statement, so concurrent joins cannot pass the limit."""
    cur = await tx.execute(
        "UPDATE community_invites SET uses = uses + 1 WHERE id = ? AND revoked_at IS NULL "
        "AND (max_uses IS NULL OR uses < max_uses) AND (expires_at IS NULL OR expires_at > ?)",
        (invite_id, now))
    return cur.rowcount > 0


async def count_active_tx(tx: Transaction, community_did: str, now: str) -> int:
    """Invites of the community that could still be used: not revoked, not expired, uses left."""
    row = await tx.fetchone(
        "SELECT COUNT(*) AS n FROM community_invites WHERE community_did = ? AND revoked_at IS NULL "
        "AND (max_uses IS NULL OR uses < max_uses) AND (expires_at IS NULL OR expires_at > ?)",
        (community_did, now))
    return int(row["n"]) if row is not None else 0


async def revoke_tx(tx: Transaction, invite_id: int, by: str, now: str) -> bool:
    cur = await tx.execute(
        "UPDATE community_invites SET revoked_at = ?, revoked_by = ? WHERE id = ? AND revoked_at IS NULL",
        (now, by, invite_id))
    return cur.rowcount > 0
