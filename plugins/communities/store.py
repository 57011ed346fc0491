"""The communities plugin's tables (migrations/*.sql next to this file): communities and
the apps they allow, members, join requests, admins and roles, bans, invites, the audit
log and the user-profile cache, and the index reads the network sync needs. Only this
plugin runs SQL on these tables; other plugins ask its service (`CommunitiesService`),
and the core asks it through the service too (an event's audience, docs/plugins.md).
Every function takes a reader (``app.db`` or a transaction) or a transaction where it
writes (PDS writes in progress are the core's: ``app.writes``)."""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, NamedTuple, Sequence

from daemon.plugin import Reader, Row, Transaction
from daemon.plugin.storage import narrowed


# ==================================================================
# Communities: the local index of each profile, app visibility and community search
# ==================================================================

_COLUMNS = ("handle", "display_name", "description", "type", "avatar_cid", "avatar_mime",
            "avatar_size", "banner_cid", "banner_mime", "banner_size", "pds_url", "state")


# ------------------------------------------------------------------ communities


async def get_community(db: Reader, did: str) -> Row | None:
    """By DID: a unique-index lookup, answered on the event-loop thread (`fetchone_now`)."""
    return await db.fetchone_now("SELECT * FROM communities WHERE did = ?", (did,))


async def active_by_handle(db: Reader, handle: str) -> Row | None:
    """The active community with `handle` (lower-case, as indexed), the newest if a handle
    was reused."""
    return await db.fetchone(
        "SELECT * FROM communities WHERE handle = ? AND state = 'active' ORDER BY id DESC LIMIT 1", (handle,))


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
    """Remove a community with its members, requests and app grants (the audit log
    stays; its write intents are the core's, forgotten through ``app.writes``)."""
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


async def list_allowed_apps(db: Reader, community_did: str) -> list[Row]:
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


async def list_communities(db: Reader, *, query: str | None, user_did: str | None,
                           app_id: str | None, limit: int, before_id: int | None,
                           withheld: list[str] | None = None) -> list[Row]:
    """Active, listed communities, newest first, that the app may see; private ones only
    where `user_did` is a member, and then only where the app may see the roster (the
    roster is public, or the app created the community or manages it: listing it would
    say that the user is a member; access.app_sees_roster). With `query`, only those
    matching it. Keyset on `id`. Unlisted ones never appear (they are reached by DID or
    invite), nor those `withheld` (`app.withheld_communities()`: suspended...)."""
    params: list[Any] = [user_did, app_id, app_id, app_id, app_id, app_id, app_id]
    member_join = ("LEFT JOIN members m ON m.community_did = c.did AND m.member_did = ?")
    # Filtered here, not after the page is cut: a page left empty would still say so.
    private_ok = ("(c.type != 'private' OR (m.id IS NOT NULL AND (c.roster_visibility = 'public' OR ? IS NULL "
                  "OR c.creator_app_id = ? OR EXISTS (SELECT 1 FROM community_apps a WHERE a.community_did = c.did "
                  "AND a.app_id = ? AND a.manage = 1))))")
    where = ["c.state = 'active'", "c.listed = 1", _VISIBLE_SQL, private_ok]
    if withheld:
        where.append("c.did NOT IN (SELECT value FROM json_each(?))")
        params.append(json.dumps(withheld))
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


INDEX_ORDER = {"newest": "id DESC", "oldest": "id ASC", "size": "member_count DESC, id DESC"}


async def index_listing(db: Reader, *, fts: str | None, exact: str | None, sort: str, limit: int) -> list[Row]:
    """Active communities of any type or listing, for the instance's operators: matching the
    words `fts` or (`exact`) a DID or handle, in `sort` order (``INDEX_ORDER``)."""
    where, params = ["state = 'active'"], []
    if fts or exact:
        either = []
        if fts:
            either.append("id IN (SELECT rowid FROM communities_fts WHERE communities_fts MATCH ?)")
            params.append(fts)
        if exact:
            either.append("did = ? OR handle = ?")
            params += [exact, exact.lower().lstrip("@")]
        where.append("(" + " OR ".join(either) + ")")
    params.append(limit)
    return await db.fetchall(f"SELECT * FROM communities WHERE {' AND '.join(where)} "
                             f"ORDER BY {INDEX_ORDER[sort]} LIMIT ?", params)


async def all_communities(db: Reader, query: str | None) -> list[Row]:
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


# ==================================================================
# Members, join requests, admins and the user-profile cache of each community.
# ==================================================================

_STATUS_SQL = (
    "SELECT c.did, c.type, c.state, c.creator_app_id, "
    "m.id AS member_id, m.admin_rank, m.roles, m.grants, "
    "(SELECT 1 FROM join_requests r WHERE r.community_did = c.did AND r.member_did = ?) AS pending "
    "FROM communities c LEFT JOIN members m ON m.community_did = c.did AND m.member_did = ? "
    "WHERE c.did = ?")


async def status(db: Reader, community_did: str, user_did: str) -> Row | None:
    """One row: the community's type/state and the user's member/admin/pending status
    (None if the community is unknown). A single indexed lookup per table, answered on the
    event-loop thread (`fetchone_now`)."""
    return await db.fetchone_now(_STATUS_SQL, (user_did, user_did, community_did))


# membership/check in two parts, each a read through one primary key or unique index:
# what the community is to the asking app (the same for every user: cached per app, see
# `steps.checked_status`), and what the user is in the community. Apps call the check on
# every page view; split, a check whose user is not cached runs only the second, ~35 %
# cheaper than the join of both (docs/performance.md).
_CHECK_COMMUNITY_SQL = (
    "SELECT c.state, c.type, c.creator_app_id, c.roster_visibility, "
    "a.app_id IS NOT NULL AS app_allowed, a.manage AS app_manages "
    "FROM communities c LEFT JOIN community_apps a ON a.community_did = c.did AND a.app_id = ? "
    "WHERE c.did = ?")
# Always one row (the LEFT JOIN on a one-row table): member_id NULL for a non-member.
_CHECK_MEMBER_SQL = (
    "SELECT m.id AS member_id, m.admin_rank, m.roles, m.grants, "
    "(SELECT 1 FROM join_requests r WHERE r.community_did = ?1 AND r.member_did = ?2) AS pending "
    "FROM (SELECT 1) LEFT JOIN members m ON m.community_did = ?1 AND m.member_did = ?2")


async def community_for_app(db: Reader, community_did: str, app_id: str | None) -> Row | None:
    """The community's state, type, creator app and ``roster_visibility``, and whether
    `app_id` was allowed to see it (`app_allowed`) or manage it (`app_manages`); None if
    the community is unknown. Answered on the event-loop thread (`fetchone_now`)."""
    return await db.fetchone_now(_CHECK_COMMUNITY_SQL, (app_id or "", community_did))


async def member_row(db: Reader, community_did: str, user_did: str) -> Row:
    """What the user is in the community: ``member_id`` (NULL for a non-member),
    ``admin_rank``, ``roles``, ``grants``, ``pending`` (one row even for a non-member)."""
    return await db.fetchone_now(_CHECK_MEMBER_SQL, (community_did, user_did))


# A ban is in force while `expires_at` is NULL or later than now (ISO 8601 strings of one
# shape compare as times); store/bans.py keeps the bans themselves.
_BAN_IN_FORCE = "(expires_at IS NULL OR expires_at > ?)"


async def active_ban(reader: Reader, community_did: str, member_did: str, now: str) -> Row | None:
    """The user's ban in force now, or None (a database or a transaction reads it)."""
    return await reader.fetchone(
        f"SELECT * FROM community_bans WHERE community_did = ? AND member_did = ? AND {_BAN_IN_FORCE}",
        (community_did, member_did, now))


async def get_member(db: Reader, community_did: str, member_did: str) -> Row | None:
    return await db.fetchone("SELECT * FROM members WHERE community_did = ? AND member_did = ?",
                             (community_did, member_did))


async def get_request(db: Reader, community_did: str, member_did: str) -> Row | None:
    return await db.fetchone(
        "SELECT * FROM join_requests WHERE community_did = ? AND member_did = ?",
        (community_did, member_did))


# ------------------------------------------------------------------ changes


async def insert_member_tx(tx: Transaction, *, community_did: str, member_did: str, now: str,
                           proof_rkey: str, proof_cid: str | None, membership_uri: str | None,
                           membership_cid: str | None, app_id: str | None,
                           admin_rank: int | None = None) -> None:
    await tx.execute(
        "INSERT INTO members (community_did, member_did, admin_rank, admin_since, confirmed_at, "
        "proof_rkey, proof_cid, membership_uri, membership_cid, app_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (community_did, member_did, admin_rank, now if admin_rank is not None else None, now,
         proof_rkey, proof_cid, membership_uri, membership_cid, app_id))


async def delete_member_tx(tx: Transaction, community_did: str, member_did: str) -> bool:
    cur = await tx.execute("DELETE FROM members WHERE community_did = ? AND member_did = ?",
                           (community_did, member_did))
    return cur.rowcount > 0


async def insert_request_tx(tx: Transaction, *, community_did: str, member_did: str, now: str,
                            membership_uri: str | None, membership_cid: str | None,
                            app_id: str | None) -> None:
    await tx.execute(
        "INSERT INTO join_requests (community_did, member_did, requested_at, membership_uri, "
        "membership_cid, app_id) VALUES (?, ?, ?, ?, ?, ?)",
        (community_did, member_did, now, membership_uri, membership_cid, app_id))


async def delete_request_tx(tx: Transaction, community_did: str, member_did: str) -> bool:
    cur = await tx.execute("DELETE FROM join_requests WHERE community_did = ? AND member_did = ?",
                           (community_did, member_did))
    return cur.rowcount > 0


async def set_membership_record_tx(tx: Transaction, community_did: str, member_did: str,
                                   uri: str | None, cid: str | None) -> None:
    await tx.execute(
        "UPDATE members SET membership_uri = ?, membership_cid = ? "
        "WHERE community_did = ? AND member_did = ?", (uri, cid, community_did, member_did))


async def count_tx(tx: Transaction, community_did: str) -> tuple[int, int]:
    """(members with an active account, join requests): what the counts show."""
    members = await tx.fetchval(f"SELECT count(*) FROM members m WHERE community_did = ? AND {_ACTIVE_ACCOUNT}",
                                (community_did,))
    pending = await tx.fetchval("SELECT count(*) FROM join_requests WHERE community_did = ?",
                                (community_did,))
    return int(members), int(pending)


# ------------------------------------------------------------------ admins


async def admins(db: Reader, community_did: str) -> list[Row]:
    """Admins in order (index 0 is the primary admin)."""
    return await db.fetchall(
        "SELECT member_did, admin_rank, admin_since FROM members "
        "WHERE community_did = ? AND admin_rank IS NOT NULL ORDER BY admin_rank", (community_did,))


async def set_admins_tx(tx: Transaction, community_did: str,
                        ordered: Sequence[tuple[str, str]]) -> None:
    """Make exactly `ordered` [(did, added_at)] the admins, in that order."""
    await tx.execute(
        "UPDATE members SET admin_rank = NULL, admin_since = NULL "
        "WHERE community_did = ? AND admin_rank IS NOT NULL", (community_did,))
    await tx.executemany(
        "UPDATE members SET admin_rank = ?, admin_since = ? WHERE community_did = ? AND member_did = ?",
        [(i, added, community_did, did) for i, (did, added) in enumerate(ordered)])


# ------------------------------------------------------------------ lists

#: Members whose account the network reported inactive (the core's account_status, store/sync.py) are hidden.
_ACTIVE_ACCOUNT = "NOT EXISTS (SELECT 1 FROM account_status s WHERE s.did = m.member_did)"


async def list_members(db: Reader, community_did: str, *, limit: int, after_id: int | None,
                       search_like: str | None = None, admins_only: bool = False) -> list[Row]:
    """Members in join order with their cached profile, keyset on `members.id`."""
    where = ["m.community_did = ?", _ACTIVE_ACCOUNT]
    params: list[Any] = [community_did]
    if after_id is not None:
        where.append("m.id > ?")
        params.append(after_id)
    if admins_only:
        where.append("m.admin_rank IS NOT NULL")
    if search_like is not None:
        where.append("(p.handle LIKE ? ESCAPE '\\' OR p.display_name LIKE ? ESCAPE '\\')")
        params += [search_like, search_like]
    params.append(limit)
    return await db.fetchall(
        "SELECT m.*, p.handle, p.display_name, p.avatar_url FROM members m "
        "LEFT JOIN user_profiles p ON p.did = m.member_did "
        f"WHERE {' AND '.join(where)} ORDER BY m.id LIMIT ?", params)


# A page of members as JSON text: each member's object is kept in `members.page_json` by
# triggers (plugins/communities/migrations/0008_member_page_json.sql), the same object,
# keys and order as `plugins.communities.views.member_json`, and SQLite concatenates a
# page of them. No dict per member, no JSON encoder, no profile join at read time: those
# were most of what a page of 100 cost (issue 16, docs/performance.md). A member whose
# object is NULL (roles that are not role names) makes `odd` true, and the caller builds
# that page from rows.
_ADMIN_JSON = ("substr(m.page_json, 1, length(m.page_json) - 1) || ',\"membershipUri\":' || "
               "json_quote(m.membership_uri) || ',\"appId\":' || json_quote(m.app_id) || '}'")


def _member_page_sql(admin_view: bool) -> str:
    member = _ADMIN_JSON if admin_view else "m.page_json"
    # group_concat keeps the order in which the subquery hands it rows (by id).
    return (
        "SELECT '[' || ifnull(group_concat(j, ','), '') || ']' AS members, group_concat(id) AS ids, "
        "count(*) AS n, ifnull(max(odd), 0) AS odd FROM (SELECT m.id, m.page_json IS NULL AS odd, "
        f"{member} AS j "
        # The index names the plan: with statistics that say one community holds most
        # members, SQLite would otherwise walk the whole table by id for a small one.
        # Inactive accounts are left out by an outer join rather than `_ACTIVE_ACCOUNT`'s
        # NOT EXISTS: the same rows, ~7 % fewer instructions for a page of 100 (a
        # correlated subquery per row costs more than a join's probe; issue 34).
        "FROM members m INDEXED BY members_by_community "
        "LEFT JOIN account_status s ON s.did = m.member_did "
        "WHERE m.community_did = ? AND m.id > ? AND s.did IS NULL ORDER BY m.id LIMIT ?)")


_MEMBER_PAGE_SQL = {admin_view: _member_page_sql(admin_view) for admin_view in (False, True)}


class MemberPage(NamedTuple):
    members: str         #: a JSON array of `member_json` objects
    last_id: int | None  #: the keyset cursor after the last of them, if another page follows
    odd: bool            #: a row's roles need the slow way (see above): build the page from rows


async def member_page(db: Reader, community_did: str, *, limit: int, after_id: int | None,
                      admin_view: bool) -> MemberPage:
    """The `limit` members after `after_id`, as JSON text. It reads one row more than it
    answers, to know whether another page follows: a bounded index range read of at most
    `limit` + 1 rows, so it is answered on the event-loop thread (`fetchone_now`)."""
    row = await db.fetchone_now(_MEMBER_PAGE_SQL[admin_view], (community_did, after_id or 0, limit + 1))
    assert row is not None
    members, ids, n, odd = row
    if n <= limit:
        return MemberPage(members, None, bool(odd))
    # Drop the extra member: a JSON string never holds an unescaped quote, so the last
    # `,{"did":` is where the last object begins.
    cut = members.rfind(',{"did":')
    return MemberPage(members[:cut] + "]", int(ids.rsplit(",", 2)[-2]), bool(odd))


async def list_requests(db: Reader, community_did: str, *, limit: int,
                        after_id: int | None) -> list[Row]:
    return await db.fetchall(*narrowed(
        "SELECT r.*, p.handle, p.display_name, p.avatar_url FROM join_requests r "
        "LEFT JOIN user_profiles p ON p.did = r.member_did WHERE r.community_did = ?", [community_did],
        {"r.id > ?": after_id}, "ORDER BY r.id LIMIT ?", limit))


async def memberships_of(db: Reader, user_did: str, *, limit: int,
                         after_id: int | None) -> list[Row]:
    """A user's memberships (newest first) with each community's index row."""
    return await db.fetchall(*narrowed(
        "SELECT m.id AS member_id, m.admin_rank, m.confirmed_at, m.proof_rkey, m.proof_cid, "
        "m.membership_uri, m.membership_cid, c.* FROM members m "
        "JOIN communities c ON c.did = m.community_did AND c.state = 'active' WHERE m.member_did = ?",
        [user_did], {"m.id < ?": after_id}, "ORDER BY m.id DESC LIMIT ?", limit))


async def requests_of(db: Reader, user_did: str) -> list[Row]:
    return await db.fetchall(
        "SELECT r.id AS request_id, r.requested_at, c.* FROM join_requests r "
        "JOIN communities c ON c.did = r.community_did AND c.state = 'active' "
        "WHERE r.member_did = ? ORDER BY r.id DESC LIMIT 100", (user_did,))


async def all_members_tx(tx: Transaction, community_did: str) -> list[Row]:
    return await tx.fetchall("SELECT * FROM members WHERE community_did = ? ORDER BY id",
                             (community_did,))


async def delete_all_members_tx(tx: Transaction, community_did: str) -> None:
    await tx.execute("DELETE FROM members WHERE community_did = ?", (community_did,))


# ------------------------------------------------------------------ profile cache


async def upsert_profile_tx(tx: Transaction, did: str, handle: str | None, display_name: str | None,
                            avatar_url: str | None, now: str) -> None:
    await tx.execute(
        "INSERT INTO user_profiles (did, handle, display_name, avatar_url, fetched_at) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (did) DO UPDATE SET "
        "handle = COALESCE(excluded.handle, user_profiles.handle), "
        "display_name = COALESCE(excluded.display_name, user_profiles.display_name), "
        "avatar_url = COALESCE(excluded.avatar_url, user_profiles.avatar_url), "
        "fetched_at = excluded.fetched_at", (did, handle, display_name, avatar_url, now))


async def did_by_handle(db: Reader, handle: str) -> str | None:
    """The DID the profile cache knows for a person's handle (lower-case), or None."""
    return await db.fetchval("SELECT did FROM user_profiles WHERE handle = ? LIMIT 1", (handle,))


async def get_profile(db: Reader, did: str) -> Row | None:
    return await db.fetchone("SELECT * FROM user_profiles WHERE did = ?", (did,))


async def profiles(db: Reader, dids: Iterable[str]) -> dict[str, Row]:
    dids = list(dict.fromkeys(dids))
    if not dids:
        return {}
    marks = ",".join("?" * len(dids))
    rows = await db.fetchall(f"SELECT * FROM user_profiles WHERE did IN ({marks})", dids)
    return {r["did"]: r for r in rows}


# ==================================================================
# Bans of users from communities (whether one is in force: `active_ban`, read with the status)
# ==================================================================

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


async def list_bans(db: Reader, community_did: str, now: str, *, limit: int,
                    before_id: int | None) -> list[Row]:
    """Bans in force, newest first, with the cached profile of each user; keyset on `id`."""
    return await db.fetchall(*narrowed(
        "SELECT b.*, p.handle, p.display_name FROM community_bans b "
        "LEFT JOIN user_profiles p ON p.did = b.member_did "
        "WHERE b.community_did = ? AND (b.expires_at IS NULL OR b.expires_at > ?)", [community_did, now],
        {"b.id < ?": before_id}, "ORDER BY b.id DESC LIMIT ?", limit))


# ==================================================================
# Invite links of communities (only the codes' hashes are stored).
# ==================================================================

async def insert_invite_tx(tx: Transaction, *, community_did: str, code_hash: str, max_uses: int | None,
                           expires_at: str | None, note: str | None, created_by: str,
                           app_id: str | None, now: str) -> int:
    cur = await tx.execute(
        "INSERT INTO community_invites (community_did, code_hash, max_uses, expires_at, note, created_by, "
        "app_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (community_did, code_hash, max_uses, expires_at, note, created_by, app_id, now))
    return int(cur.lastrowid)


async def get_invite(reader: Reader, *, code_hash: str | None = None,
                     invite_id: int | None = None) -> Row | None:
    """By the code's hash or by id (either a database or a transaction reads it)."""
    if code_hash is not None:
        return await reader.fetchone("SELECT * FROM community_invites WHERE code_hash = ?", (code_hash,))
    return await reader.fetchone("SELECT * FROM community_invites WHERE id = ?", (invite_id,))


async def list_invites(db: Reader, community_did: str, *, limit: int, before_id: int | None) -> list[Row]:
    """Newest first, keyset on `id` (revoked and used-up ones included)."""
    return await db.fetchall(*narrowed("SELECT * FROM community_invites WHERE community_did = ?", [community_did],
                                       {"id < ?": before_id}, "ORDER BY id DESC LIMIT ?", limit))


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


# ==================================================================
# A community's custom roles, and the roles each member holds (`members.roles`, `.grants`)
# ==================================================================

_HOLDERS_SQL = ("SELECT member_did, roles FROM members WHERE community_did = ? AND roles IS NOT NULL "
                "ORDER BY id")


async def definitions(reader: Any, community_did: str) -> list[Row]:
    """The community's custom roles, by name."""
    return await reader.fetchall(
        "SELECT * FROM community_roles WHERE community_did = ? ORDER BY name", (community_did,))


async def definition(reader: Any, community_did: str, name: str) -> Row | None:
    return await reader.fetchone(
        "SELECT * FROM community_roles WHERE community_did = ? AND name = ?", (community_did, name))


async def put_definition_tx(tx: Transaction, community_did: str, name: str, *, description: str,
                            capabilities_json: str, collections_json: str, now: str) -> None:
    await tx.execute(
        "INSERT INTO community_roles (community_did, name, description, capabilities, collections, "
        "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (community_did, name) DO UPDATE "
        "SET description = excluded.description, capabilities = excluded.capabilities, "
        "collections = excluded.collections, updated_at = excluded.updated_at",
        (community_did, name, description, capabilities_json, collections_json, now, now))


async def delete_definition_tx(tx: Transaction, community_did: str, name: str) -> bool:
    cur = await tx.execute("DELETE FROM community_roles WHERE community_did = ? AND name = ?",
                           (community_did, name))
    return cur.rowcount > 0


async def holders(reader: Any, community_did: str) -> list[Row]:
    """(member_did, roles) of every member who holds a role, in join order."""
    return await reader.fetchall(_HOLDERS_SQL, (community_did,))


async def set_member_roles_tx(tx: Transaction, community_did: str,
                              changes: Iterable[tuple[str, str | None, str | None]]) -> None:
    """Set (member_did, roles, grants) of members (space-separated; None: none)."""
    await tx.executemany(
        "UPDATE members SET roles = ?, grants = ? WHERE community_did = ? AND member_did = ?",
        [(roles, grants, community_did, did) for did, roles, grants in changes])


# ==================================================================
# The per-community audit log of admin actions and membership changes.
# ==================================================================

async def insert_entry_tx(tx: Transaction, *, community_did: str, action: str,
                          actor_did: str | None, target_did: str | None, reason: str | None,
                          metadata: dict[str, Any] | None, app_id: str | None, now: str) -> int:
    cur = await tx.execute(
        "INSERT INTO audit_log (community_did, action, actor_did, target_did, reason, metadata, "
        "app_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (community_did, action, actor_did, target_did, reason,
         json.dumps(metadata or {}, separators=(",", ":")), app_id, now))
    return cur.lastrowid


async def list_entries(db: Reader, community_did: str, *, limit: int,
                       before_id: int | None, action: str | None = None) -> list[Row]:
    """Newest first, keyset on `id`."""
    return await db.fetchall(*narrowed(
        "SELECT * FROM audit_log WHERE community_did = ?", [community_did],
        {"id < ?": before_id, "action = ?": action}, "ORDER BY id DESC LIMIT ?", limit))


async def audit_page(db: Reader, community_did: str, *, actions: tuple[str, ...] | None, denied: bool,
                     person: str | None, since: str | None, until: str | None, before_id: int | None,
                     limit: int) -> list[Row]:
    """A page of the history, newest first (keyset on `id`): of some `actions`, refusals
    only (`denied`) or none of them, by or about `person`, from `since` up to `until`."""
    actions = tuple(actions or ())
    select = ("SELECT * FROM audit_log WHERE community_did = ? AND json_extract(metadata, '$.outcome') IS 'denied'"
              if denied else "SELECT * FROM audit_log WHERE community_did = ? AND json_extract(metadata, '$.outcome') IS NULL")
    return await db.fetchall(*narrowed(
        select, [community_did],
        {f"action IN ({', '.join('?' * len(actions))})": actions,
         "(actor_did = ? OR target_did = ?)": (person, person) if person else None,
         "created_at >= ?": since or None, "created_at < ?": until or None, "id < ?": before_id},
        "ORDER BY id DESC LIMIT ?", limit))


async def scan_after(db: Reader, after_id: int, limit: int) -> list[Row]:
    """The next `limit` entries after `after_id`, oldest first (a rowid range: the pruner
    walks the log in `id` order, which is time order), each with whether it records a
    refused action (`denied`), decided by SQLite so the event loop parses no JSON."""
    return await db.fetchall(
        "SELECT id, created_at, json_valid(metadata) AND json_extract(metadata, '$.outcome') = 'denied' AS denied "
        "FROM audit_log WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit))


async def delete_entries_tx(tx: Transaction, ids: list[int]) -> int:
    await tx.executemany("DELETE FROM audit_log WHERE id = ?", [(i,) for i in ids])
    return len(ids)


# ==================================================================
# The network sync: its interest set, what an event touches, profile and handle refresh
# ==================================================================

async def interest_since(db: Reader, mark: tuple[int, int, int]) -> tuple[set[str], tuple[int, int, int]]:
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


async def instance_counts(db: Reader) -> dict[str, int]:
    """Communities in the index (finished creating) and the distinct people who are members of any."""
    communities = await db.fetchval("SELECT count(*) FROM communities WHERE state = 'active'")
    people = await db.fetchval("SELECT count(DISTINCT member_did) FROM members")
    return {"communities": int(communities), "people": int(people)}


async def active_community_dids_tx(tx: Transaction) -> list[str]:
    return [r["did"] for r in await tx.fetchall("SELECT did FROM communities WHERE state = 'active'")]
