"""Sync with the network: the stream cursor and account status (core tables,
migrations/0004_sync.sql), and the index queries the communities plugin's sync needs
(its interest set, the member behind a membership record, profile and handle refresh)."""

from __future__ import annotations

from store.db import Database, Row, Transaction

# ------------------------------------------------------------------ the cursor


async def get_cursor(db: Database, source: str) -> Row | None:
    return await db.fetchone("SELECT * FROM sync_cursors WHERE source = ?", (source,))


async def save_cursor_tx(tx: Transaction, source: str, cursor: int, event_time: str | None,
                         now: str) -> None:
    await tx.execute(
        "INSERT INTO sync_cursors (source, cursor, event_time, updated_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (source) DO UPDATE SET cursor = excluded.cursor, "
        "event_time = COALESCE(excluded.event_time, sync_cursors.event_time), "
        "updated_at = excluded.updated_at", (source, cursor, event_time, now))


# ------------------------------------------------------------------ account status


async def set_inactive_tx(tx: Transaction, did: str, status: str, now: str) -> None:
    """Record that `did`'s account is not active (a status change keeps `since`)."""
    await tx.execute(
        "INSERT INTO account_status (did, status, since) VALUES (?, ?, ?) "
        "ON CONFLICT (did) DO UPDATE SET status = excluded.status", (did, status, now))


async def set_active_tx(tx: Transaction, did: str) -> bool:
    cur = await tx.execute("DELETE FROM account_status WHERE did = ?", (did,))
    return cur.rowcount > 0


# ------------------------------------------------------------------ the communities' interest set


async def interest_since(db: Database, mark: tuple[int, int, int]) -> tuple[set[str], tuple[int, int, int]]:
    """DIDs of members, join requests and communities added after `mark` (the highest
    ids seen: members, join requests, communities), and the new mark. (0, 0, 0): all."""
    members = await db.fetchall("SELECT id, member_did FROM members WHERE id > ? ORDER BY id", (mark[0],))
    requests = await db.fetchall("SELECT id, member_did FROM join_requests WHERE id > ? ORDER BY id", (mark[1],))
    communities = await db.fetchall("SELECT id, did FROM communities WHERE id > ? ORDER BY id", (mark[2],))
    dids = {r["member_did"] for r in members} | {r["member_did"] for r in requests} | {r["did"] for r in communities}
    return dids, (members[-1]["id"] if members else mark[0], requests[-1]["id"] if requests else mark[1],
                  communities[-1]["id"] if communities else mark[2])


# ------------------------------------------------------------------ what an event touches


async def communities_by_dids_tx(tx: Transaction, dids: list[str]) -> dict[str, Row]:
    if not dids:
        return {}
    marks = ",".join("?" * len(dids))
    rows = await tx.fetchall(f"SELECT did, state, type FROM communities WHERE did IN ({marks})", dids)
    return {r["did"]: r for r in rows}


async def memberships_tx(tx: Transaction, user_did: str) -> list[Row]:
    """Every community `user_did` is a member of or asked to join: (community_did, kind,
    membership_uri, admin_rank) with kind ``member`` or ``request``."""
    return await tx.fetchall(
        "SELECT community_did, 'member' AS kind, membership_uri, admin_rank FROM members WHERE member_did = ? "
        "UNION ALL SELECT community_did, 'request' AS kind, membership_uri, NULL FROM join_requests "
        "WHERE member_did = ?", (user_did, user_did))


async def by_membership_uri_tx(tx: Transaction, user_did: str, uri: str) -> list[Row]:
    """The member rows and join requests of `user_did` that refer to the membership
    record at `uri` (their own repo)."""
    return [r for r in await memberships_tx(tx, user_did) if r["membership_uri"] == uri]


async def is_known_tx(tx: Transaction, did: str) -> bool:
    """Whether `did` is a member or asks to join anywhere."""
    return await tx.fetchone(
        "SELECT 1 FROM members WHERE member_did = ? UNION ALL "
        "SELECT 1 FROM join_requests WHERE member_did = ? LIMIT 1", (did, did)) is not None


async def set_profile_tx(tx: Transaction, did: str, handle: str | None, display_name: str | None,
                         avatar_url: str | None, now: str) -> None:
    """Replace the cached profile of `did` (a field the person removed becomes NULL)."""
    await tx.execute(
        "INSERT INTO user_profiles (did, handle, display_name, avatar_url, fetched_at) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (did) DO UPDATE SET "
        "handle = COALESCE(excluded.handle, user_profiles.handle), "
        "display_name = excluded.display_name, avatar_url = excluded.avatar_url, "
        "fetched_at = excluded.fetched_at", (did, handle, display_name, avatar_url, now))


async def set_handle_tx(tx: Transaction, did: str, handle: str, now: str) -> None:
    """A person's or a community's new handle, wherever the index shows it."""
    await tx.execute("UPDATE user_profiles SET handle = ?, fetched_at = ? WHERE did = ?", (handle, now, did))
    await tx.execute("UPDATE communities SET handle = ?, updated_at = ? WHERE did = ? AND handle != ?",
                     (handle, now, did, handle))


async def active_community_dids_tx(tx: Transaction) -> list[str]:
    return [r["did"] for r in await tx.fetchall("SELECT did FROM communities WHERE state = 'active'")]

