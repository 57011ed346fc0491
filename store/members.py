"""Members, join requests, admins and the user-profile cache of each community."""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple, Sequence

from store.db import Database, Reader, Row, Transaction

# ------------------------------------------------------------------ status


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


_CHECK_SQL = (
    "SELECT c.did, c.type, c.state, c.creator_app_id, c.roster_visibility, "
    "(SELECT 1 FROM community_apps a WHERE a.community_did = c.did AND a.app_id = ?) AS app_allowed, "
    "(SELECT a.manage FROM community_apps a WHERE a.community_did = c.did AND a.app_id = ?) AS app_manages, "
    "m.id AS member_id, m.admin_rank, m.roles, m.grants, "
    "(SELECT 1 FROM join_requests r WHERE r.community_did = c.did AND r.member_did = ?) AS pending "
    "FROM communities c LEFT JOIN members m ON m.community_did = c.did AND m.member_did = ? "
    "WHERE c.did = ?")


async def status_for_app(db: Database, community_did: str, user_did: str, app_id: str | None) -> Row | None:
    """`status` plus the community's `roster_visibility` and whether `app_id` was allowed
    to see the community (`app_allowed`) or manage it (`app_manages`), in one query."""
    return await db.fetchone_now(_CHECK_SQL, (app_id or "", app_id or "", user_did, user_did, community_did))


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

#: Members whose account the network reported inactive (store/sync.py) are hidden.
_ACTIVE_ACCOUNT = "NOT EXISTS (SELECT 1 FROM account_status s WHERE s.did = m.member_did)"


async def list_members(db: Database, community_did: str, *, limit: int, after_id: int | None,
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
        "FROM members m INDEXED BY members_by_community "
        "WHERE m.community_did = ? AND m.id > ? AND " + _ACTIVE_ACCOUNT + " ORDER BY m.id LIMIT ?)")


_MEMBER_PAGE_SQL = {admin_view: _member_page_sql(admin_view) for admin_view in (False, True)}


class MemberPage(NamedTuple):
    members: str         #: a JSON array of `member_json` objects
    last_id: int | None  #: the keyset cursor after the last of them, if another page follows
    odd: bool            #: a row's roles need the slow way (see above): build the page from rows


async def member_page(db: Database, community_did: str, *, limit: int, after_id: int | None,
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


async def list_requests(db: Database, community_did: str, *, limit: int,
                        after_id: int | None) -> list[Row]:
    params: list[Any] = [community_did]
    extra = ""
    if after_id is not None:
        extra = "AND r.id > ? "
        params.append(after_id)
    params.append(limit)
    return await db.fetchall(
        "SELECT r.*, p.handle, p.display_name, p.avatar_url FROM join_requests r "
        "LEFT JOIN user_profiles p ON p.did = r.member_did "
        f"WHERE r.community_did = ? {extra}ORDER BY r.id LIMIT ?", params)


async def memberships_of(db: Database, user_did: str, *, limit: int,
                         after_id: int | None) -> list[Row]:
    """A user's memberships (newest first) with each community's index row."""
    params: list[Any] = [user_did]
    extra = ""
    if after_id is not None:
        extra = "AND m.id < ? "
        params.append(after_id)
    params.append(limit)
    return await db.fetchall(
        "SELECT m.id AS member_id, m.admin_rank, m.confirmed_at, m.proof_rkey, m.proof_cid, "
        "m.membership_uri, m.membership_cid, c.* FROM members m "
        "JOIN communities c ON c.did = m.community_did AND c.state = 'active' "
        f"WHERE m.member_did = ? {extra}ORDER BY m.id DESC LIMIT ?", params)


async def requests_of(db: Database, user_did: str) -> list[Row]:
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


async def get_profile(db: Database, did: str) -> Row | None:
    return await db.fetchone("SELECT * FROM user_profiles WHERE did = ?", (did,))


async def profiles(db: Database, dids: Iterable[str]) -> dict[str, Row]:
    dids = list(dict.fromkeys(dids))
    if not dids:
        return {}
    marks = ",".join("?" * len(dids))
    rows = await db.fetchall(f"SELECT * FROM user_profiles WHERE did IN ({marks})", dids)
    return {r["did"]: r for r in rows}
