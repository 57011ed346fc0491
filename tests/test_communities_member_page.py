"""The member list's fast way (JSON text built by SQLite from parts that triggers keep,
store/members.py `member_page`) answers exactly what the row-by-row way
(`views.member_json`) answers, page after page, and stays so as members and profiles
change. Neither reaches a PDS: the communities are seeded into the index."""

from __future__ import annotations

import json
from typing import Any

import pytest

from plugins.communities import views
from plugins.communities import store as members_store
from tests.fixtures_communities import Api, seed_community

ADMIN = "did:plc:seedadmin"
PEOPLE = [f"did:plc:seedmember{i:02d}" for i in range(12)]


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"rate_limits": {"api": {"requests": 100000, "window_seconds": 60}}}


async def _profiles(app: Any) -> None:
    """Profiles a page has to escape: quotes, backslashes, unicode, control characters;
    one member with no profile at all, one with every field empty."""
    rows = [
        (ADMIN, "admin.test", "The \"Admin\" \\ of things", "https://cdn.example/a.jpg"),
        (PEOPLE[0], "zoë.test", "Zoë 🌱 Ünïcode", None),
        (PEOPLE[1], "tab.test", "line\nbreak\tand\x01control", "https://cdn.example/b?x=1&y=\"2\""),
        (PEOPLE[2], None, None, None),
        (PEOPLE[3], "plain.test", "</script><b>", None),
    ]
    async with app.db.transaction("tests.profiles") as tx:
        for did, handle, name, avatar in rows:
            await tx.execute("INSERT INTO user_profiles (did, handle, display_name, avatar_url, fetched_at) "
                             "VALUES (?, ?, ?, ?, '2026-01-01T00:00:00Z')", (did, handle, name, avatar))


async def _community(app: Any, api: Api) -> str:
    did = await seed_community(app, ADMIN, creator_app_id=api.app_id, members=tuple(PEOPLE))
    async with app.db.transaction("tests.shape") as tx:
        # a second admin, built-in and custom roles, a member with a membership record,
        # and one whose account the network reported deleted (hidden from lists)
        await tx.execute("UPDATE members SET admin_rank = 1 WHERE community_did = ? AND member_did = ?",
                         (did, PEOPLE[4]))
        await tx.execute("UPDATE members SET roles = 'moderator' WHERE community_did = ? AND member_did = ?",
                         (did, PEOPLE[5]))
        await tx.execute("UPDATE members SET roles = 'moderator greeter-2' WHERE community_did = ? "
                         "AND member_did = ?", (did, PEOPLE[4]))
        await tx.execute("UPDATE members SET membership_uri = ? WHERE community_did = ? AND member_did = ?",
                         (f"at://{PEOPLE[6]}/community.membership/3abc", did, PEOPLE[6]))
        await tx.execute("INSERT INTO account_status (did, status, since) VALUES (?, 'deleted', '2026')",
                         (PEOPLE[7],))
    await _profiles(app)
    return did


async def _slow(app: Any, did: str, limit: int, after: int | None, admin_view: bool) -> tuple[list, int | None]:
    rows = await members_store.list_members(app.db, did, limit=limit + 1, after_id=after)
    more = rows[limit - 1]["id"] if len(rows) > limit else None
    return [views.member_json(r, admin_view=admin_view) for r in rows[:limit]], more


async def _walk(app: Any, did: str, limit: int, admin_view: bool, fast: bool) -> list[list]:
    pages, after = [], None
    while True:
        if fast:
            page = await members_store.member_page(app.db, did, limit=limit, after_id=after,
                                                   admin_view=admin_view)
            assert not page.odd
            members, after = json.loads(page.members), page.last_id
        else:
            members, after = await _slow(app, did, limit, after, admin_view)
        pages.append(members)
        if after is None:
            return pages


@pytest.mark.parametrize("limit", [1, 3, 11, 12, 100])
@pytest.mark.parametrize("admin_view", [False, True])
async def test_pages_built_by_sqlite_equal_the_row_by_row_pages(app, client, limit, admin_view):
    api = await Api.make(app, client)
    did = await _community(app, api)
    fast = await _walk(app, did, limit, admin_view, fast=True)
    assert fast == await _walk(app, did, limit, admin_view, fast=False)
    everyone = [m for page in fast for m in page]
    # the deleted account is hidden; everyone else is there once, in join order
    assert [m["did"] for m in everyone] == [ADMIN] + [p for p in PEOPLE if p != PEOPLE[7]]
    by_did = {m["did"]: m for m in everyone}
    assert by_did[ADMIN]["isPrimaryAdmin"] and by_did[ADMIN]["displayName"] == "The \"Admin\" \\ of things"
    assert by_did[PEOPLE[4]]["roles"] == ["admin", "member", "moderator", "greeter-2"]
    assert by_did[PEOPLE[1]]["displayName"] == "line\nbreak\tand\x01control"
    assert by_did[PEOPLE[8]]["handle"] is None  # no profile cached
    assert ("membershipUri" in by_did[PEOPLE[6]]) is admin_view


async def test_the_api_answers_the_same_members_either_way_and_follows_changes(app, client):
    api = await Api.make(app, client)
    did = await _community(app, api)

    async def listed(**params: Any) -> list[dict[str, Any]]:
        out, cursor = [], None
        while True:
            resp = await api.get(api.path(did, "/members"), limit=5, cursor=cursor, **params)
            assert resp.status == 200, resp.text
            body = resp.json()
            assert body["total"] == len(PEOPLE)  # the admin and 12, less the deleted account
            out += body["members"]
            cursor = body.get("cursor")
            if not cursor:
                return out

    before = await listed()
    assert before == [m for page in await _walk(app, did, 100, False, fast=False) for m in page]
    # a search takes the row-by-row way and finds the same member objects
    assert await listed(search="zoë") == [m for m in before if m["did"] == PEOPLE[0]]

    # a profile refresh, a promotion, a role change and a new member show on the next read
    async with app.db.transaction("tests.changes") as tx:
        await tx.execute("UPDATE user_profiles SET display_name = 'Renamed', avatar_url = NULL WHERE did = ?",
                         (ADMIN,))
        await tx.execute("INSERT OR REPLACE INTO user_profiles (did, handle, display_name, avatar_url, "
                         "fetched_at) VALUES (?, 'new.test', 'New \"one\"', NULL, '2026')", (PEOPLE[8],))
        await tx.execute("UPDATE members SET admin_rank = 2, roles = NULL WHERE community_did = ? "
                         "AND member_did = ?", (did, PEOPLE[5]))
        await tx.execute("UPDATE members SET roles = 'greeter-2' WHERE community_did = ? AND member_did = ?",
                         (did, PEOPLE[4]))
    after = {m["did"]: m for m in await listed()}
    assert after[ADMIN]["displayName"] == "Renamed" and after[ADMIN]["avatar"] is None
    assert after[PEOPLE[8]]["displayName"] == "New \"one\""
    assert after[PEOPLE[5]]["isAdmin"] and after[PEOPLE[5]]["roles"] == ["admin", "member"]
    assert after[PEOPLE[4]]["roles"] == ["admin", "member", "greeter-2"]
    assert list(after.values()) == [m for page in await _walk(app, did, 100, False, fast=False) for m in page]


@pytest.mark.parametrize("roles", ["Moderator", "moderator ", "a  b", "émoji", "x\"y"])
async def test_roles_that_are_not_role_names_take_the_row_by_row_way(app, client, roles):
    """Role names are [a-z][a-z0-9-]*; anything else (a hand-edited database, say) cannot be
    turned into JSON by the trigger, so that page is built from rows and is still right."""
    api = await Api.make(app, client)
    did = await _community(app, api)
    async with app.db.transaction("tests.odd") as tx:
        await tx.execute("UPDATE members SET roles = ? WHERE community_did = ? AND member_did = ?",
                         (roles, did, PEOPLE[0]))
    page = await members_store.member_page(app.db, did, limit=100, after_id=None, admin_view=False)
    assert page.odd
    resp = await api.get(api.path(did, "/members"), limit=100)
    assert resp.status == 200, resp.text
    got = {m["did"]: m for m in resp.json()["members"]}
    assert got[PEOPLE[0]]["roles"] == ["member", *roles.split()]


async def test_a_client_that_has_the_page_gets_304(app, client):
    api = await Api.make(app, client)
    did = await _community(app, api)
    first = await api.get(api.path(did, "/members"), limit=5)
    etag = first.headers.get("Etag")
    assert first.status == 200 and etag
    again = await client.get(api.path(did, "/members"), params={"limit": 5}, api_key=api.key,
                             headers={"If-None-Match": etag})
    assert again.status == 304 and again.body == b""
    assert again.headers.get("Etag") == etag
    # another page, or a change to this one, is a new version
    other = await client.get(api.path(did, "/members"), params={"limit": 4}, api_key=api.key,
                             headers={"If-None-Match": etag})
    assert other.status == 200 and other.headers.get("Etag") != etag
    async with app.db.transaction("tests.rename") as tx:
        await tx.execute("UPDATE user_profiles SET handle = 'renamed.test' WHERE did = ?", (ADMIN,))
    changed = await client.get(api.path(did, "/members"), params={"limit": 5}, api_key=api.key,
                               headers={"If-None-Match": etag})
    assert changed.status == 200 and changed.json()["members"][0]["handle"] == "renamed.test"
