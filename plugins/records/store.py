"""The records plugin's tables (migrations/*.sql next to this file): the local index of
community records written through the service, each community's collection allowlist, and
who may create, update and delete records in each collection. Only this plugin runs SQL on
them (docs/plugins.md, "Storage")."""

from __future__ import annotations

from typing import Any, Iterable

from daemon.plugin import Reader, Row, Transaction
from daemon.plugin.storage import narrowed


# ==================================================================
# The local index of community records written through the service.
# ==================================================================

async def get_record(db: Reader, community_did: str, collection: str, rkey: str) -> Row | None:
    return await db.fetchone(
        "SELECT * FROM records WHERE community_did = ? AND collection = ? AND rkey = ?",
        (community_did, collection, rkey))


async def record_by_rkey(db: Reader, community_did: str, rkey: str) -> Row | None:
    return await db.fetchone(
        "SELECT * FROM records WHERE community_did = ? AND rkey = ? ORDER BY created_at DESC LIMIT 1",
        (community_did, rkey))


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


async def list_records(db: Reader, community_did: str, collection: str, limit: int,
                       before_id: int | None, author_did: str | None = None) -> list[Row]:
    """Newest first."""
    return await db.fetchall(*narrowed(
        "SELECT * FROM records WHERE community_did = ? AND collection = ?", [community_did, collection],
        {"author_did = ?": author_did, "id < ?": before_id}, "ORDER BY id DESC LIMIT ?", limit))


# ------------------------------------------------------------------ a community's allowed collections


async def collection_settings(db: Reader, community_did: str) -> Row | None:
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


# ==================================================================
# Who may create, update and delete records in each collection of a community (the
# ==================================================================

async def rule(reader: Any, community_did: str, collection: str) -> Row | None:
    """The collection's row (None: the defaults). One primary-key lookup."""
    return await reader.fetchone(
        "SELECT create_rule, update_rule, delete_rule FROM record_permissions "
        "WHERE community_did = ? AND collection = ?", (community_did, collection))


async def all_rules(reader: Any, community_did: str) -> list[Row]:
    return await reader.fetchall(
        "SELECT * FROM record_permissions WHERE community_did = ? ORDER BY collection", (community_did,))


async def replace_tx(tx: Transaction, community_did: str,
                     rules: Iterable[tuple[str, str, str, str]]) -> None:
    """Make exactly `rules` [(collection, create, update, delete)] the community's rules."""
    await tx.execute("DELETE FROM record_permissions WHERE community_did = ?", (community_did,))
    await tx.executemany(
        "INSERT INTO record_permissions (community_did, collection, create_rule, update_rule, delete_rule) "
        "VALUES (?, ?, ?, ?, ?)", [(community_did, *r) for r in rules])


# ==================================================================
# Handing a community over (cr_handover_state / cr_handover_restore_tx).
# ==================================================================

RECORD_FIELDS = ("collection", "rkey", "uri", "cid", "author_did", "value", "created_at", "updated_at", "updated_by")
PERMISSION_FIELDS = ("collection", "create_rule", "update_rule", "delete_rule")


async def community_state(db: Reader, community_did: str) -> dict[str, Any]:
    """This plugin's rows of a community, as a handover bundle carries them (app ids stay:
    apps are per instance)."""
    records = await db.fetchall(f"SELECT {', '.join(RECORD_FIELDS)} FROM records WHERE community_did = ? "
                                "ORDER BY id", (community_did,))
    settings = await db.fetchone("SELECT allowed_collections, updated_at, updated_by FROM record_collection_settings "
                                 "WHERE community_did = ?", (community_did,))
    permissions = await db.fetchall(f"SELECT {', '.join(PERMISSION_FIELDS)} FROM record_permissions "
                                    "WHERE community_did = ? ORDER BY collection", (community_did,))
    return {"version": 1, "records": [dict(r) for r in records],
            "collectionSettings": dict(settings) if settings is not None else None,
            "permissions": [dict(p) for p in permissions]}


async def restore_community_state_tx(tx: Transaction, community_did: str, state: dict[str, Any]) -> None:
    """Write back what `community_state` read, for the same community on another instance."""
    for r in state.get("records") or []:
        await tx.execute(
            "INSERT INTO records (community_did, collection, rkey, uri, cid, author_did, app_id, value, created_at, "
            "updated_at, updated_by) VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?) "
            "ON CONFLICT (community_did, collection, rkey) DO NOTHING",
            (community_did, *(r[k] for k in RECORD_FIELDS)))
    settings = state.get("collectionSettings")
    if settings:
        await tx.execute(
            "INSERT INTO record_collection_settings (community_did, allowed_collections, updated_at, updated_by, "
            "app_id) VALUES (?, ?, ?, ?, NULL) ON CONFLICT (community_did) DO NOTHING",
            (community_did, settings["allowed_collections"], settings["updated_at"], settings["updated_by"]))
    for p in state.get("permissions") or []:
        await tx.execute(
            "INSERT INTO record_permissions (community_did, collection, create_rule, update_rule, delete_rule) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (community_did, collection) DO NOTHING",
            (community_did, *(p[k] for k in PERMISSION_FIELDS)))
