"""Apps and their API keys."""

from __future__ import annotations

from typing import Any

from store.db import Database, Reader, Row, Transaction


async def insert_app_tx(tx: Transaction, *, app_id: str, owner_did: str, name: str, domain: str,
                        key_hash: bytes, now: str) -> None:
    await tx.execute(
        "INSERT INTO apps (id, owner_did, name, domain, key_hash, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (app_id, owner_did, name, domain, key_hash, now, now))


async def active_domain_taken_tx(tx: Transaction, owner_did: str, domain: str,
                                 except_id: str | None = None) -> bool:
    row = await tx.fetchone(
        "SELECT 1 FROM apps WHERE owner_did = ? AND domain = ? AND active = 1 AND id != ?",
        (owner_did, domain, except_id or ""))
    return row is not None


async def count_active_tx(tx: Transaction, owner_did: str) -> int:
    return await tx.fetchval("SELECT count(*) FROM apps WHERE owner_did = ? AND active = 1", (owner_did,))


async def get_app(db: Reader, app_id: str) -> Row | None:
    return await db.fetchone("SELECT * FROM apps WHERE id = ?", (app_id,))


async def find_by_key_hash(db: Database, key_hash: bytes) -> Row | None:
    # Every API-key request does this unique-index lookup: a synchronous point read.
    return await db.fetchone_now("SELECT * FROM apps WHERE key_hash = ?", (key_hash,))


async def list_apps(db: Database, owner_did: str, limit: int,
                    after: tuple[str, str] | None) -> list[Row]:
    if after is None:
        return await db.fetchall(
            "SELECT * FROM apps WHERE owner_did = ? ORDER BY created_at, id LIMIT ?",
            (owner_did, limit))
    return await db.fetchall(
        "SELECT * FROM apps WHERE owner_did = ? AND (created_at, id) > (?, ?) "
        "ORDER BY created_at, id LIMIT ?", (owner_did, after[0], after[1], limit))


async def update_app_tx(tx: Transaction, app_id: str, now: str, **fields: Any) -> None:
    allowed = {"name", "domain", "rate_limit_requests", "rate_limit_window_seconds"}
    assert set(fields) <= allowed, fields
    if not fields:
        return
    assignments = ", ".join(f"{k} = ?" for k in fields)
    await tx.execute(f"UPDATE apps SET {assignments}, updated_at = ? WHERE id = ?",
                     (*fields.values(), now, app_id))


async def set_key_hash_tx(tx: Transaction, app_id: str, key_hash: bytes, now: str) -> None:
    await tx.execute(
        "UPDATE apps SET key_hash = ?, key_rotated_at = ?, updated_at = ? WHERE id = ?",
        (key_hash, now, now, app_id))


async def deactivate_tx(tx: Transaction, app_id: str, now: str) -> None:
    await tx.execute(
        "UPDATE apps SET active = 0, deactivated_at = ?, updated_at = ? WHERE id = ? AND active = 1",
        (now, now, app_id))


async def all_apps(db: Database) -> list[Row]:
    """Every app, oldest first (operator listing)."""
    return await db.fetchall("SELECT * FROM apps ORDER BY created_at, id")


class AppsTable:
    """The ``apps`` table, a core table (store/migrations/0001_core.sql), as plugins reach
    it through the plugin API (``daemon.plugin.AppsTable``; docs/plugins.md, "Storage").

    Every API request authenticates into one of these rows (``Principal.app_id``), events
    are addressed to them and webhooks hang off them, so the table is the core's. Any plugin
    may read it (``get``); the plugin that registers apps for their owners (``apikeys``) is
    the only one that writes it (the ``_tx`` methods and the key lookups)."""

    # reads, for any plugin
    get = staticmethod(get_app)
    # the registry's own reads and writes: the plugin that manages apps (apikeys)
    by_key_hash = staticmethod(find_by_key_hash)
    list_of_owner = staticmethod(list_apps)
    all = staticmethod(all_apps)
    count_active_tx = staticmethod(count_active_tx)
    domain_taken_tx = staticmethod(active_domain_taken_tx)
    insert_tx = staticmethod(insert_app_tx)
    update_tx = staticmethod(update_app_tx)
    set_key_hash_tx = staticmethod(set_key_hash_tx)
    deactivate_tx = staticmethod(deactivate_tx)
