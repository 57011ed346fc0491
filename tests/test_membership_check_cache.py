"""membership/check reads through the application's cache of checks (issue 27; split into
the community's part and the user's in issue 34):
against the devnet, every change of a person's standing through the API (join, request,
approval, role given and taken, promotion, leave, ban) is seen by the very next check,
with checks in between so that the previous answer is in the cache each time."""

from __future__ import annotations

import pytest

from tests.fixtures_communities import Api, devnet_module_fixtures

pytestmark = pytest.mark.pds

config_overrides, extra_plugins = devnet_module_fixtures()

NOBODY = {"isMember": False, "isAdmin": False, "isPending": False}
MEMBER = {"isMember": True, "isAdmin": False, "isPending": False}


async def test_the_very_next_check_sees_every_change(app, client, people):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Cached club", type="admin-approved"))["did"]

    async def check() -> dict:
        first = await api.check(did, bob["did"])
        assert await api.check(did, bob["did"]) == first   # the second from the cache
        return first

    assert await check() == NOBODY
    assert (await api.join(did, bob["did"])).status == 202
    assert await check() == {**NOBODY, "isPending": True}
    assert (await api.decide(did, "approve", alice["did"], bob["did"])).status == 200
    assert await check() == MEMBER
    given = await api.post(api.path(did, f"/members/{bob['did']}/roles"), {"adminDid": alice["did"], "role": "moderator"})
    assert given.status == 200, given.text
    assert await check() == {**MEMBER, "roles": ["moderator"]}
    taken = await api.delete(api.path(did, f"/members/{bob['did']}/roles/moderator"), {"adminDid": alice["did"]})
    assert taken.status == 200, taken.text
    assert await check() == MEMBER
    assert (await api.admins(did, "promote", {"adminDid": alice["did"], "memberDid": bob["did"]})).status == 200
    assert await check() == {**MEMBER, "isAdmin": True}
    assert (await api.admins(did, "demote", {"adminDid": alice["did"], "memberDid": bob["did"]})).status == 200
    assert await check() == MEMBER
    assert (await api.post(api.path(did, "/members/leave"), {"userDid": bob["did"]})).status == 200
    assert await check() == NOBODY
    assert (await api.join(did, bob["did"])).status == 202
    assert (await api.decide(did, "approve", alice["did"], bob["did"])).status == 200
    assert await check() == MEMBER
    banned = await api.post(api.path(did, "/bans"), {"adminDid": alice["did"], "memberDid": bob["did"]})
    assert banned.status == 201, banned.text
    assert await check() == NOBODY
    cache = app.communities.check_cache
    assert len(cache.statuses) > 0 and len(cache.communities) > 0   # the checks were cached


async def test_a_check_sees_another_process_write_within_a_second(app, client, people):
    """The operator's CLI writes the file from another process: the user's part and the
    community's part of a cached check both follow within a second."""
    import asyncio
    import sqlite3

    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Watched club"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    assert await api.check(did, bob["did"]) == MEMBER
    assert await api.check(did, bob["did"]) == MEMBER   # from the cache

    other = sqlite3.connect(app.config.database_path)
    with other:
        other.execute("UPDATE members SET roles = 'greeter' WHERE community_did = ? AND member_did = ?",
                      (did, bob["did"]))
    await asyncio.sleep(1.1)
    assert await api.check(did, bob["did"]) == {**MEMBER, "roles": ["greeter"]}

    with other:
        other.execute("UPDATE communities SET state = 'creating' WHERE did = ?", (did,))
    other.close()
    await asyncio.sleep(1.1)
    gone = await api.post(api.path(did, "/membership/check"), {"userDid": bob["did"]})
    assert gone.status == 404, gone.text


async def test_the_member_pages_kept_in_the_cache_follow_every_change(app, client, people):
    """The API's pages of members are kept until the next commit (common.members_json): each
    change through the API is on the very next page, and a change another process makes to
    the file (the operator's CLI) within a second."""
    import asyncio
    import sqlite3

    api = await Api.make(app, client)
    alice, bob, carol = people("alice"), people("bob"), people("carol")
    did = (await api.create(alice, "Paged club"))["did"]

    async def page() -> dict:
        first = await api.get(api.path(did, "/members"), params={"limit": 10})
        again = await api.get(api.path(did, "/members"), params={"limit": 10})
        assert first.status == again.status == 200 and first.body == again.body  # the second from the cache
        assert first.headers["Etag"] == again.headers["Etag"]
        return {m["did"]: m["roles"] for m in first.json()["members"]} | {"total": first.json()["total"]}

    assert await page() == {alice["did"]: ["admin", "member"], "total": 1}
    assert (await api.join(did, bob["did"])).status == 201
    assert await page() == {alice["did"]: ["admin", "member"], bob["did"]: ["member"], "total": 2}
    given = await api.post(api.path(did, f"/members/{bob['did']}/roles"), {"adminDid": alice["did"], "role": "moderator"})
    assert given.status == 200, given.text
    assert (await page())[bob["did"]] == ["member", "moderator"]
    assert (await api.join(did, carol["did"])).status == 201
    assert (await api.post(api.path(did, "/members/leave"), {"userDid": bob["did"]})).status == 200
    assert await page() == {alice["did"]: ["admin", "member"], carol["did"]: ["member"], "total": 2}
    assert len(app.communities.member_pages) > 0

    # another process on the same file: seen once the cache next asks SQLite (at most 1 s)
    other = sqlite3.connect(app.config.database_path)
    with other:
        other.execute("UPDATE members SET roles = 'greeter' WHERE community_did = ? AND member_did = ?",
                      (did, carol["did"]))
    other.close()
    await asyncio.sleep(1.1)
    assert (await page())[carol["did"]] == ["member", "greeter"]
