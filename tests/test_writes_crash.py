"""A command that crashes between its PDS write and its local commit leaves a write intent,
and the next start-up settles it like every other write (daemon/atproto/writes.py):
a profile change is put back from the index, and a browser join takes back both the
community's proof and the user's own membership record.

The crash is simulated in process (the local transaction fails, as the index commit
would never happen after a SIGKILL); the "next start-up" is a real second application
built on the same database after the first one is shut down. tests/test_writes_sigkill.py
kills a real daemon process instead."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from daemon.runtime.app import create_app
from tests.fixtures_communities import Api, FailIndexOnce, pds_record, proofs_on_pds
from tests.fixtures_oauth import oauth_login
from tests.helpers import login_as

pytestmark = pytest.mark.pds


@pytest.fixture
def config_overrides(oauth_tls_config: dict[str, Any]) -> dict[str, Any]:
    return {**oauth_tls_config, "rate_limits": {"api": {"requests": 100000, "window_seconds": 60}}}


@pytest.fixture
def extra_plugins(recorder: Any, failer: FailIndexOnce) -> tuple:
    return (recorder, failer)


async def intents(db: Any) -> list[str]:
    return [r["key"] for r in await db.fetchall("SELECT key FROM write_intents ORDER BY id")]


async def restart(app: Any, clock: Any) -> Any:
    """Stop `app` and start the daemon again on the same database; returns once the
    start-up reconciliation pass has run (no intent left)."""
    await app.shutdown()
    again = await create_app(app.config, app.pm, clock=clock)
    for _ in range(300):
        if not await intents(again.db):
            return again
        await asyncio.sleep(0.1)
    await again.shutdown()
    raise AssertionError("the start-up pass left write intents")


async def test_a_profile_change_that_crashed_before_its_commit_is_put_back_at_start_up(
        app, client, people, clock, monkeypatch):
    from plugins.communities import store as communities_store

    api = await Api.make(app, client)
    alice = people("alice")
    did = (await api.create(alice, "Old name"))["did"]
    session = await login_as(app, alice["did"], alice["handle"])
    real_update = communities_store.update_community_tx

    async def crash(tx: Any, did_: str, now: str, **fields: Any) -> None:
        if "display_name" in fields:
            raise RuntimeError("simulated crash before the index commit")
        await real_update(tx, did_, now, **fields)

    monkeypatch.setattr(communities_store, "update_community_tx", crash)
    resp = await client.put(f"/communities/{did}/profile", session=session, json={"displayName": "New name"})
    assert resp.status == 500, resp.text
    monkeypatch.setattr(communities_store, "update_community_tx", real_update)
    # the state a crash leaves: the repo says one thing, the index another
    assert (await pds_record(app, did, "profile"))["displayName"] == "New name"
    assert (await communities_store.get_community(app.db, did))["display_name"] == "Old name"

    again = await restart(app, clock)
    try:
        assert (await pds_record(again, did, "profile"))["displayName"] == "Old name"
        assert (await communities_store.get_community(again.db, did))["display_name"] == "Old name"
        entries = await again.db.fetchall(
            "SELECT metadata FROM audit_log WHERE community_did = ? AND action = 'reconciled'", (did,))
        assert len(entries) == 1 and "community.profile_updated" in entries[0]["metadata"]
    finally:
        await again.shutdown()


async def test_a_browser_join_that_crashed_before_its_commit_is_taken_back_at_start_up(
        app, client, service, oauth_account, people, failer, recorder, clock):
    api = await Api.make(app, client)
    alice = people("alice")
    did = (await api.create(alice, "Crashing door"))["did"]
    user = oauth_account["did"]
    collection = f"{app.config.atproto.namespace}.membership"
    browser = service()
    await oauth_login(browser, oauth_account)

    failer.armed = "member.joined"
    resp = await browser.post(f"/communities/{did}/join")
    assert resp.status == 500, resp.text
    # both repos were written; the index was not
    mine = await _records(app, user, collection)
    assert [r["value"]["community"] for r in mine] == [did]
    assert user in await proofs_on_pds(app, did)
    assert await api.check(did, user) == {"isMember": False, "isAdmin": False, "isPending": False}

    again = await restart(app, clock)
    try:
        assert user not in await proofs_on_pds(again, did)
        mine = await _records(again, user, collection)
        assert mine == []
        assert await again.db.fetchval(
            "SELECT count(*) FROM members WHERE community_did = ? AND member_did = ?", (did, user)) == 0
        assert [e for e in recorder.of("member.joined", did) if e.data["memberDid"] == user] == []
    finally:
        await again.shutdown()


async def _records(app: Any, repo: str, collection: str) -> list[dict[str, Any]]:
    """Every record of `collection` in `repo`, read straight from the devnet PDS."""
    resp = await app.http.get(f"{app.config.atproto.pds_url}/xrpc/com.atproto.repo.listRecords",
                              params={"repo": repo, "collection": collection, "limit": 100})
    assert resp.status_code == 200, resp.text
    return resp.json()["records"]


async def test_a_leave_whose_users_pds_failed_deletes_their_record_at_the_next_start_up(
        app, client, service, oauth_account, people, clock, monkeypatch):
    import plugins.oauth.userrepo as userrepo
    from daemon.http.base import ApiError

    api = await Api.make(app, client)
    alice = people("alice")
    did = (await api.create(alice, "Leaky door"))["did"]
    user = oauth_account["did"]
    collection = f"{app.config.atproto.namespace}.membership"
    browser = service()
    await oauth_login(browser, oauth_account)
    assert (await browser.post(f"/communities/{did}/join")).status == 201
    assert len(await _records(app, user, collection)) == 1

    real_user_repo = userrepo.user_repo

    async def dead_pds(app_: Any, principal: Any) -> Any:
        raise ApiError(502, "pds_error", "The user's PDS is down.")

    monkeypatch.setattr(userrepo, "user_repo", dead_pds)
    resp = await browser.post(f"/communities/{did}/leave")
    assert resp.status == 200, resp.text  # the user's PDS never stops anyone leaving
    assert await api.check(did, user) == {"isMember": False, "isAdmin": False, "isPending": False}
    assert len(await _records(app, user, collection)) == 1
    monkeypatch.setattr(userrepo, "user_repo", real_user_repo)  # the user's PDS is back

    again = await restart(app, clock)
    try:
        assert await _records(again, user, collection) == []
    finally:
        await again.shutdown()


async def test_a_delete_that_failed_half_way_on_the_pds_is_put_back_at_the_next_start_up(
        app, client, people, clock, monkeypatch):
    """The PDS refuses the second deletion (the connection is refused before anything is
    sent: the real PDS cannot be made to fail between two calls)."""
    import httpx

    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Half gone"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    real_send = app.http.send

    async def refuse_profile_delete(request: Any, *args: Any, **kwargs: Any) -> Any:
        if request.url.path.endswith("com.atproto.repo.deleteRecord") and b'"self"' in request.content \
                and b".profile" in request.content:
            raise httpx.ConnectError("connection refused", request=request)
        return await real_send(request, *args, **kwargs)

    monkeypatch.setattr(app.http, "send", refuse_profile_delete)
    resp = await api.delete(api.path(did), {"adminDid": alice["did"]})
    assert resp.status == 502, resp.text
    monkeypatch.setattr(app.http, "send", real_send)
    assert await pds_record(app, did, "admins") is None  # the first deletion happened
    assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}

    again = await restart(app, clock)
    try:
        assert [a["did"] for a in (await pds_record(again, did, "admins"))["admins"]] == [alice["did"]]
        assert (await pds_record(again, did, "profile"))["displayName"] == "Half gone"
    finally:
        await again.shutdown()


async def test_a_creation_that_crashed_before_its_commit_is_taken_off_the_repo_and_can_finish(
        app, client, people, failer, clock, devnet):
    api = await Api.make(app, client)
    alice = people("alice")
    body = {"creatorDid": alice["did"], "displayName": "Half born", "type": "open"}
    failer.armed = "member.joined"  # the creation's commit emits the creator's join
    resp = await api.post("/api/v1/communities", body)
    assert resp.status == 500, resp.text
    did = (await app.db.fetchone("SELECT did FROM communities WHERE state = 'creating'"))["did"]
    assert (await pds_record(app, did, "profile"))["displayName"] == "Half born"

    again = await restart(app, clock)
    try:
        assert await pds_record(again, did, "profile") is None
        assert await pds_record(again, did, "admins") is None
        assert await proofs_on_pds(again, did) == {}
        # the same request still finishes it
        from plugins.communities import lifecycle
        from plugins.communities.steps import Actor
        created = await lifecycle.create(again, Actor(alice["did"], api.app_id), display_name="Half born",
                                         description="", type="open", handle=None, identifier=None,
                                         app_password=None)
        assert created == {"did": did}
        assert (await pds_record(again, did, "profile"))["displayName"] == "Half born"
        assert list(await proofs_on_pds(again, did)) == [alice["did"]]
        assert await intents(again.db) == []
    finally:
        await again.shutdown()
