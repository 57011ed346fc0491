"""The local index of community records written through the service."""

from __future__ import annotations

from store.db import Database, Row, Transaction


async def get_record(db: Database, community_did: str, collection: str, rkey: str) -> Row | None:
    return await db.fetchone(
        "SELECT * FROM records WHERE community_did = ? AND collection = ? AND rkey = ?",
        (community_did, collection, rkey))


async def get_record_tx(tx: Transaction, community_did: str, collection: str, rkey: str) -> Row | None:
    return await tx.fetchone(
        "SELECT * FROM records WHERE community_did = ? AND collection = ? AND rkey = ?",
        (community_did, collection, rkey))


async def upsert_record_tx(tx: Transaction, *, community_did: str, collection: str, rkey: str,
                           uri: str, cid: str, author_did: str, app_id: str | None, value_json: str,
                           now: str) -> None:
    """Index a record just created on the PDS (a row left by a lost race is overwritten:
    the repo is the truth)."""
    await tx.execute(
        "INSERT INTO records (community_did, collection, rkey, uri, cid, author_did, app_id, value, "
        "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (community_did, collection, rkey) DO UPDATE SET uri = excluded.uri, "
        "cid = excluded.cid, value = excluded.value, updated_at = excluded.updated_at, "
        "updated_by = excluded.author_did",
        (community_did, collection, rkey, uri, cid, author_did, app_id, value_json, now, now))


async def update_record_tx(tx: Transaction, record_id: int, *, uri: str, cid: str, value_json: str,
                           updated_by: str, now: str) -> None:
    await tx.execute(
        "UPDATE records SET uri = ?, cid = ?, value = ?, updated_by = ?, updated_at = ? WHERE id = ?",
        (uri, cid, value_json, updated_by, now, record_id))


async def delete_record_tx(tx: Transaction, record_id: int) -> None:
    await tx.execute("DELETE FROM records WHERE id = ?", (record_id,))


async def list_records(db: Database, community_did: str, collection: str, limit: int,
                       before_id: int | None, author_did: str | None = None) -> list[Row]:
    """Newest first."""
    sql = "SELECT * FROM records WHERE community_did = ? AND collection = ?"
    params: list = [community_did, collection]
    if author_did is not None:
        sql += " AND author_did = ?"
        params.append(author_did)
    if before_id is not None:
        sql += " AND id < ?"
        params.append(before_id)
    sql += " ORDER BY id DESC LIMIT ?"
    params.append(limit)
    return await db.fetchall(sql, params)


# ------------------------------------------------------------------ a community's allowed collections


async def collection_settings(db: Database, community_did: str) -> Row | None:
    """The community's allowlist row (None: it has not set one)."""
    return await db.fetchone("SELECT * FROM record_collection_settings WHERE community_did = ?",
                             (community_did,))


async def set_collection_settings_tx(tx: Transaction, community_did: str, *, allowed_json: str | None,
                                     updated_by: str, app_id: str | None, now: str) -> None:
    """Set the allowlist (a JSON list), or remove it (`allowed_json` None)."""
    if allowed_json is None:
        await tx.execute("DELETE FROM record_collection_settings WHERE community_did = ?", (community_did,))
        return
    await tx.execute(
        "INSERT INTO record_collection_settings (community_did, allowed_collections, updated_at, "
        "updated_by, app_id) VALUES (?, ?, ?, ?, ?) ON CONFLICT (community_did) DO UPDATE SET "
        "allowed_collections = excluded.allowed_collections, updated_at = excluded.updated_at, "
        "updated_by = excluded.updated_by, app_id = excluded.app_id",
        (community_did, allowed_json, now, updated_by, app_id))


# ------------------------------------------------------------------ pending PDS writes


async def get_pending_write(db: Database, community_did: str, collection: str, rkey: str) -> Row | None:
    """The write in progress on one record, if any."""
    return await db.fetchone(
        "SELECT * FROM record_pending_writes WHERE community_did = ? AND collection = ? AND rkey = ?",
        (community_did, collection, rkey))


async def pending_write_by_id_tx(tx: Transaction, write_id: int) -> Row | None:
    return await tx.fetchone("SELECT * FROM record_pending_writes WHERE id = ?", (write_id,))


async def insert_pending_write_tx(tx: Transaction, *, op: str, community_did: str, collection: str,
                                  rkey: str, value_json: str | None, cid: str | None,
                                  author_did: str, user_did: str, app_id: str | None,
                                  now: str) -> Row:
    cur = await tx.execute(
        "INSERT INTO record_pending_writes (op, community_did, collection, rkey, value, cid, "
        "author_did, user_did, app_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (op, community_did, collection, rkey, value_json, cid, author_did, user_did, app_id, now))
    row = await pending_write_by_id_tx(tx, cur.lastrowid)
    assert row is not None
    return row


async def delete_pending_write_tx(tx: Transaction, write_id: int) -> bool:
    """Remove a pending write; False if it was already gone."""
    cur = await tx.execute("DELETE FROM record_pending_writes WHERE id = ?", (write_id,))
    return cur.rowcount > 0


async def postpone_pending_write_tx(tx: Transaction, write_id: int, *, next_attempt_at: str,
                                    error: str) -> None:
    await tx.execute(
        "UPDATE record_pending_writes SET attempts = attempts + 1, next_attempt_at = ?, "
        "last_error = ? WHERE id = ?", (next_attempt_at, error[:500], write_id))


async def due_pending_writes(db: Database, *, created_before: str | None, now: str,
                             after_id: int, limit: int) -> list[Row]:
    """Pending writes to reconcile, oldest first from `after_id`: created before
    `created_before` (None: any age) and not waiting out a backoff at `now`."""
    sql = ("SELECT * FROM record_pending_writes WHERE id > ? "
           "AND (next_attempt_at IS NULL OR next_attempt_at <= ?)")
    params: list = [after_id, now]
    if created_before is not None:
        sql += " AND created_at <= ?"
        params.append(created_before)
    sql += " ORDER BY id LIMIT ?"
    params.append(limit)
    return await db.fetchall(sql, params)


async def pending_writes(db: Database, community_did: str | None = None) -> list[Row]:
    if community_did is None:
        return await db.fetchall("SELECT * FROM record_pending_writes ORDER BY id")
    return await db.fetchall("SELECT * FROM record_pending_writes WHERE community_did = ? ORDER BY id",
                             (community_did,))
