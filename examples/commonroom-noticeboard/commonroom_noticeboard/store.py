"""The noticeboard's queries: its own table only (the communities' tables are reached
through `app.communities`, never queried here). Each read takes a `Reader`: ``app.db``, or
the transaction of a change."""

from __future__ import annotations

from daemon.plugin import Reader, Row, Transaction


async def insert_notice_tx(tx: Transaction, *, community_did: str, author_did: str, body: str,
                           app_id: str | None, now: str) -> int:
    cur = await tx.execute(
        "INSERT INTO notices (community_did, author_did, body, app_id, created_at) VALUES (?, ?, ?, ?, ?)",
        (community_did, author_did, body, app_id, now))
    return int(cur.lastrowid)


async def get_notice(db: Reader, community_did: str, notice_id: int) -> Row | None:
    return await db.fetchone("SELECT * FROM notices WHERE community_did = ? AND id = ?", (community_did, notice_id))


async def delete_notice_tx(tx: Transaction, notice_id: int) -> None:
    await tx.execute("DELETE FROM notices WHERE id = ?", (notice_id,))


async def latest(db: Reader, community_did: str, *, limit: int, before_id: int | None = None) -> list[Row]:
    """Newest first; keyset on `id` (`before_id`: the last id of the previous page)."""
    return await db.fetchall(
        "SELECT * FROM notices WHERE community_did = ? AND id < ? ORDER BY id DESC LIMIT ?",
        (community_did, before_id if before_id is not None else 2**62, limit))
