"""Communities: the local index of each community's profile, app visibility and
community search (PDS writes in progress: store/intents.py)."""

from __future__ import annotations

import re
from typing import Any

from store.db import Database, Reader, Row, Transaction

_COLUMNS = ("handle", "display_name", "description", "type", "avatar_cid", "avatar_mime",
            "avatar_size", "banner_cid", "banner_mime", "banner_size", "pds_url", "state")


# ------------------------------------------------------------------ communities


async def get_community(db: Reader, did: str) -> Row | None:
    """By DID: a unique-index lookup, answered on the event-loop thread (`fetchone_now`)."""
    return await db.fetchone_now("SELECT * FROM communities WHERE did = ?", (did,))


async def insert_community_tx(tx: Transaction, *, did: str, handle: str, display_name: str,
                              description: str, type: str, pds_url: str, account_kind: str,
                              creator_did: str, creator_app_id: str | None, proof_rkey: str,
                              now: str, state: str = "creating") -> None:
    await tx.execute(
        "INSERT INTO communities (did, handle, display_name, description, type, pds_url, "
        "account_kind, state, creator_did, creator_app_id, proof_rkey, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (did, handle, display_name, description, type, pds_url, account_kind, state, creator_did,
         creator_app_id, proof_rkey, now, now))


async def update_community_tx(tx: Transaction, did: str, now: str, **fields: Any) -> None:
    assert set(fields) <= set(_COLUMNS), fields
    if not fields:
        return
    assignments = ", ".join(f"{k} = ?" for k in fields)
    await tx.execute(f"UPDATE communities SET {assignments}, updated_at = ? WHERE did = ?",
                     (*fields.values(), now, did))


async def delete_community_tx(tx: Transaction, did: str) -> None:
    """Remove a community with its members, requests, app grants and write intents
    (the audit log stays)."""
    await tx.execute("DELETE FROM write_intents WHERE community_did = ?", (did,))
    await tx.execute("DELETE FROM communities WHERE did = ?", (did,))


async def creating_community(db: Reader, *, did: str | None = None,
                             handle: str | None = None) -> Row | None:
    """A community whose creation started but did not finish, by DID or handle."""
    if did is not None:
        return await db.fetchone(
            "SELECT * FROM communities WHERE did = ? AND state = 'creating'", (did,))
    return await db.fetchone(
        "SELECT * FROM communities WHERE handle = ? AND state = 'creating'", (handle,))


async def adjust_counts_tx(tx: Transaction, did: str, members: int = 0, pending: int = 0) -> None:
    await tx.execute(
        "UPDATE communities SET member_count = member_count + ?, pending_count = pending_count + ? "
        "WHERE did = ?", (members, pending, did))


async def set_counts_tx(tx: Transaction, did: str, members: int, pending: int) -> None:
    await tx.execute("UPDATE communities SET member_count = ?, pending_count = ? WHERE did = ?",
                     (members, pending, did))


# ------------------------------------------------------------------ visibility

_VISIBLE_SQL = ("(c.type != 'private' OR ? IS NULL OR c.creator_app_id = ? OR EXISTS ("
                "SELECT 1 FROM community_apps a WHERE a.community_did = c.did AND a.app_id = ?))")


async def app_allowed(db: Reader, community_did: str, app_id: str) -> bool:
    return await db.fetchone_now(
        "SELECT 1 FROM community_apps WHERE community_did = ? AND app_id = ?",
        (community_did, app_id)) is not None


async def allow_app_tx(tx: Transaction, community_did: str, app_id: str, by: str, now: str,
                       manage: bool = False) -> bool:
    """Grant `app_id` visibility (`manage` False) or management (True); an existing grant
    is changed to the level asked for. True if anything changed."""
    cur = await tx.execute(
        "INSERT INTO community_apps (community_did, app_id, allowed_by, allowed_at, manage) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (community_did, app_id) DO UPDATE SET "
        "manage = excluded.manage, allowed_by = excluded.allowed_by, allowed_at = excluded.allowed_at "
        "WHERE community_apps.manage != excluded.manage",
        (community_did, app_id, by, now, 1 if manage else 0))
    return cur.rowcount > 0


async def app_manages(db: Reader, community_did: str, app_id: str) -> bool:
    """Whether an admin granted `app_id` management of the community (creator app aside)."""
    return await db.fetchone_now(
        "SELECT 1 FROM community_apps WHERE community_did = ? AND app_id = ? AND manage = 1",
        (community_did, app_id)) is not None


async def disallow_app_tx(tx: Transaction, community_did: str, app_id: str) -> bool:
    cur = await tx.execute("DELETE FROM community_apps WHERE community_did = ? AND app_id = ?",
                           (community_did, app_id))
    return cur.rowcount > 0


async def allowed_app_ids(db: Reader, community_did: str) -> list[str]:
    """The apps an admin allowed to see the community (management grants included)."""
    rows = await db.fetchall("SELECT app_id FROM community_apps WHERE community_did = ? ORDER BY app_id",
                             (community_did,))
    return [r["app_id"] for r in rows]


async def managing_app_ids(db: Reader, community_did: str) -> list[str]:
    """The apps an admin granted management (they act for the community's admins)."""
    rows = await db.fetchall("SELECT app_id FROM community_apps WHERE community_did = ? AND manage = 1 "
                             "ORDER BY app_id", (community_did,))
    return [r["app_id"] for r in rows]


async def list_allowed_apps(db: Database, community_did: str) -> list[Row]:
    return await db.fetchall(
        "SELECT app_id, allowed_by, allowed_at, manage FROM community_apps WHERE community_did = ? "
        "ORDER BY allowed_at, app_id", (community_did,))


# ------------------------------------------------------------------ list and search


def fts_query(text: str) -> str | None:
    """Turn free text into an FTS5 query: every word must match as a word prefix."""
    words = [w for w in re.split(r"[^\w]+", text.lower()) if w]
    if not words:
        return None
    return " AND ".join('"' + w.replace('"', '') + '"*' for w in words[:8])


async def list_communities(db: Database, *, query: str | None, user_did: str | None,
                           app_id: str | None, limit: int, before_id: int | None) -> list[Row]:
    """Active, listed communities, newest first, that the app may see; private ones only
    where `user_did` is a member, and then only where the app may see the roster (the
    roster is public, or the app created the community or manages it: listing it would
    say that the user is a member; access.app_sees_roster). With `query`, only those
    matching it. Keyset on `id`. Unlisted ones never appear (they are reached by DID or
    invite)."""
    params: list[Any] = [user_did, app_id, app_id, app_id, app_id, app_id, app_id]
    member_join = ("LEFT JOIN members m ON m.community_did = c.did AND m.member_did = ?")
    # Filtered here, not after the page is cut: a page left empty would still say so.
    private_ok = ("(c.type != 'private' OR (m.id IS NOT NULL AND (c.roster_visibility = 'public' OR ? IS NULL "
                  "OR c.creator_app_id = ? OR EXISTS (SELECT 1 FROM community_apps a WHERE a.community_did = c.did "
                  "AND a.app_id = ? AND a.manage = 1))))")
    where = ["c.state = 'active'", "c.listed = 1", _VISIBLE_SQL, private_ok]
    if before_id is not None:
        where.append("c.id < ?")
        params.append(before_id)
    if query:
        where.append("c.id IN (SELECT rowid FROM communities_fts WHERE communities_fts MATCH ?)")
        params.append(query)
    params.append(limit)
    sql = (f"SELECT c.*, m.admin_rank AS user_admin_rank, m.id AS user_member_id "
           f"FROM communities c {member_join} WHERE {' AND '.join(where)} "
           f"ORDER BY c.id DESC LIMIT ?")
    return await db.fetchall(sql, params)


async def all_communities(db: Database, query: str | None) -> list[Row]:
    """Every community in any state, newest first, optionally matching `query` (operator
    listing: private and unlisted ones included)."""
    if query:
        return await db.fetchall(
            "SELECT * FROM communities WHERE id IN "
            "(SELECT rowid FROM communities_fts WHERE communities_fts MATCH ?) ORDER BY id DESC", (query,))
    return await db.fetchall("SELECT * FROM communities ORDER BY id DESC")


async def set_require_user_proof_tx(tx: Transaction, did: str, required: bool, now: str) -> None:
    await tx.execute("UPDATE communities SET require_user_proof = ?, updated_at = ? WHERE did = ?",
                     (1 if required else 0, now, did))


async def set_visibility_tx(tx: Transaction, did: str, now: str | None, *, roster_visibility: str | None = None,
                            listed: bool | None = None) -> None:
    """Who may list the members (`public`, `members`, `admins`) and whether the community
    appears in lists and search; None leaves a setting as it is (`now` None: keep updated_at)."""
    if roster_visibility is not None:
        await tx.execute("UPDATE communities SET roster_visibility = ? WHERE did = ?", (roster_visibility, did))
    if listed is not None:
        await tx.execute("UPDATE communities SET listed = ? WHERE did = ?", (1 if listed else 0, did))
    if now is not None:
        await tx.execute("UPDATE communities SET updated_at = ? WHERE did = ?", (now, did))
