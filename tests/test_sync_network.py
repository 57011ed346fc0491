"""Sync with the network (issue 13 B): the index follows the devnet PDS's real firehose
(``com.atproto.sync.subscribeRepos``). Every change is made directly on the PDS, as another
app or client would, and the test waits (with a deadline) until the service shows it."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.error
import urllib.request
from typing import Any

import httpx
import pytest

from daemon import hookimpl

from tests.fixtures_communities import Api, proofs_on_pds
from tests.helpers import eventually

pytestmark = pytest.mark.pds



class SyncRecorder:
    """Every event the sync hands to plugins."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    @hookimpl
    def cr_sync_events_tx(self, app: Any, tx: Any, events: list[Any]) -> None:
        self.events.extend(events)


@pytest.fixture
def sync_recorder() -> SyncRecorder:
    return SyncRecorder()


class FailOnce:
    """Fails the first batch that holds an event of `did` (a full disk, a bug), as the
    devnet cannot."""

    def __init__(self) -> None:
        self.did: str | None = None

    @hookimpl
    def cr_sync_events_tx(self, app: Any, tx: Any, events: list[Any]) -> None:
        if self.did is not None and any(e.did == self.did for e in events):
            self.did = None
            raise RuntimeError("the batch cannot be applied")


@pytest.fixture
def fail_once() -> FailOnce:
    return FailOnce()


@pytest.fixture
def extra_plugins(recorder: Any, sync_recorder: SyncRecorder, fail_once: FailOnce) -> tuple:
    return (recorder, sync_recorder, fail_once)



@pytest.fixture
def config_overrides(communities_config: dict[str, Any], devnet: Any) -> dict[str, Any]:
    return {**communities_config, "sync": {"source": "firehose", "url": devnet.pds_url}}




async def live(app: Any, people: Any) -> None:
    """Wait until the sync receives the stream (new accounts make frames)."""
    async def ready() -> bool:
        if app.sync.state != "live":
            await asyncio.to_thread(people, "ping")
        return app.sync.state == "live"
    await eventually(ready, "the sync is live")


def pds_call(devnet: Any, nsid: str, body: dict[str, Any] | None = None, *, token: str | None = None,
             admin: bool = False, data: bytes | None = None, content_type: str | None = None) -> dict[str, Any]:
    headers = {"accept": "application/json"}
    raw = data
    if body is not None:
        raw = json.dumps(body).encode()
        headers["content-type"] = "application/json"
    if content_type:
        headers["content-type"] = content_type
    if token:
        headers["authorization"] = f"Bearer {token}"
    if admin:
        headers["authorization"] = "Basic " + base64.b64encode(f"admin:{devnet.admin_password}".encode()).decode()
    req = urllib.request.Request(f"{devnet.pds_url}/xrpc/{nsid}", data=raw, headers=headers,
                                 method="POST" if raw is not None else "GET")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=30) as resp:
            text = resp.read()
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{nsid}: {exc.code} {exc.read().decode(errors='replace')}") from None
    return json.loads(text) if text else {}


async def member_list(api: Api, did: str) -> dict[str, Any]:
    resp = await api.get(api.path(did, "/members"))
    assert resp.status == 200, resp.text
    return resp.json()


async def members_by_did(api: Api, did: str) -> dict[str, dict[str, Any]]:
    return {m["did"]: m for m in (await member_list(api, did))["members"]}


async def community_with_member(app: Any, client: Any, people: Any) -> tuple[Api, str, dict, dict]:
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Synced club"))["did"]
    assert (await api.join(did, bob["did"])).status == 201
    await live(app, people)
    return api, did, alice, bob


async def test_handle_change_on_the_pds_shows_in_the_member_list(app, client, devnet, people, new_handle):
    api, did, _alice, bob = await community_with_member(app, client, people)
    handle = new_handle("renamed")
    await asyncio.to_thread(pds_call, devnet, "com.atproto.identity.updateHandle", {"handle": handle},
                            token=bob["accessJwt"])

    async def shown() -> bool:
        return (await members_by_did(api, did))[bob["did"]]["handle"] == handle
    await eventually(shown, "the new handle in the member list")


async def test_profile_name_and_avatar_change_on_the_pds_are_shown(app, client, devnet, people, png_bytes):
    api, did, _alice, bob = await community_with_member(app, client, people)
    blob = (await asyncio.to_thread(pds_call, devnet, "com.atproto.repo.uploadBlob", data=png_bytes,
                                    content_type="image/png", token=bob["accessJwt"]))["blob"]
    await asyncio.to_thread(pds_call, devnet, "com.atproto.repo.putRecord", {
        "repo": bob["did"], "collection": "app.bsky.actor.profile", "rkey": "self",
        "record": {"$type": "app.bsky.actor.profile", "displayName": "Bob Renamed", "avatar": blob}},
        token=bob["accessJwt"])

    async def shown() -> dict[str, Any] | None:
        member = (await members_by_did(api, did))[bob["did"]]
        return member if member["displayName"] == "Bob Renamed" and member["avatar"] else None
    member = await eventually(shown, "the new display name and avatar")
    assert blob["ref"]["$link"] in member["avatar"]


async def test_deactivated_member_is_hidden_from_list_and_count_and_back_when_reactivated(
        app, client, devnet, people):
    api, did, alice, bob = await community_with_member(app, client, people)
    await asyncio.to_thread(pds_call, devnet, "com.atproto.server.deactivateAccount", {},
                            token=bob["accessJwt"])

    async def hidden() -> bool:
        listed = await member_list(api, did)
        details = (await api.get(api.path(did))).json()["community"]
        return bob["did"] not in {m["did"] for m in listed["members"]} and listed["total"] == 1 \
            and details["memberCount"] == 1
    await eventually(hidden, "the deactivated member hidden from the list and the count")
    assert (await api.check(did, bob["did"]))["isMember"]  # kept

    session = await asyncio.to_thread(devnet.create_session, bob["did"], bob["password"])
    await asyncio.to_thread(pds_call, devnet, "com.atproto.server.activateAccount", data=b"",
                            token=session["accessJwt"])

    async def back() -> bool:
        listed = await member_list(api, did)
        return bob["did"] in {m["did"] for m in listed["members"]} and listed["total"] == 2
    await eventually(back, "the reactivated member back in the list and the count")
    assert (await api.get(api.path(did))).json()["community"]["memberCount"] == 2


async def test_deleted_account_ends_the_membership_with_event_audit_and_no_proof(
        app, client, devnet, people, recorder):
    api, did, alice, bob = await community_with_member(app, client, people)
    assert bob["did"] in await proofs_on_pds(app, did)
    await asyncio.to_thread(pds_call, devnet, "com.atproto.admin.deleteAccount", {"did": bob["did"]}, admin=True)

    async def gone() -> bool:
        return not (await api.check(did, bob["did"]))["isMember"]
    await eventually(gone, "the deleted account's membership ended")
    left = [e for e in recorder.of("member.left", did) if e.data["memberDid"] == bob["did"]]
    assert [e.data for e in left] == [{"memberDid": bob["did"], "reason": "account_deleted"}]
    assert bob["did"] not in await proofs_on_pds(app, did)
    entries = await api.audit(did, alice["did"])
    assert entries[0]["action"] == "member.left" and entries[0]["targetDid"] == bob["did"]
    assert entries[0]["reason"] == "account_deleted"
    assert (await member_list(api, did))["total"] == 1


async def test_membership_record_written_on_the_pds_joins_and_deleting_it_leaves(
        app, client, devnet, people, recorder):
    api = await Api.make(app, client)
    alice, carol = people("alice"), people("carol")
    did = (await api.create(alice, "Open door"))["did"]
    await live(app, people)
    collection = f"{app.config.atproto.namespace}.membership"
    written = await asyncio.to_thread(pds_call, devnet, "com.atproto.repo.createRecord", {
        "repo": carol["did"], "collection": collection, "validate": False,
        "record": {"$type": collection, "community": did, "joinedAt": "2026-11-23T00:00:00.000Z"}},
        token=carol["accessJwt"])

    async def joined() -> bool:
        return (await api.check(did, carol["did"]))["isMember"]
    await eventually(joined, "a member after writing a membership record")
    proof = (await proofs_on_pds(app, did))[carol["did"]]
    assert proof["value"]["membershipUri"] == written["uri"]
    assert [e.data for e in recorder.of("member.joined", did) if e.data["memberDid"] == carol["did"]] == \
        [{"memberDid": carol["did"]}]

    await asyncio.to_thread(pds_call, devnet, "com.atproto.repo.deleteRecord", {
        "repo": carol["did"], "collection": collection, "rkey": written["uri"].rsplit("/", 1)[-1]},
        token=carol["accessJwt"])

    async def left() -> bool:
        return not (await api.check(did, carol["did"]))["isMember"]
    await eventually(left, "not a member after deleting the membership record")
    assert carol["did"] not in await proofs_on_pds(app, did)
    assert [e.data for e in recorder.of("member.left", did) if e.data["memberDid"] == carol["did"]] == \
        [{"memberDid": carol["did"]}]


async def test_membership_record_for_an_admin_approved_community_asks_to_join(app, client, devnet, people):
    api = await Api.make(app, client)
    alice, dan = people("alice"), people("dan")
    did = (await api.create(alice, "Closed door", type="admin-approved"))["did"]
    await live(app, people)
    collection = f"{app.config.atproto.namespace}.membership"
    await asyncio.to_thread(pds_call, devnet, "com.atproto.repo.createRecord", {
        "repo": dan["did"], "collection": collection, "validate": False,
        "record": {"$type": collection, "community": did, "joinedAt": "2026-11-23T00:00:00.000Z"}},
        token=dan["accessJwt"])

    async def pending() -> bool:
        return (await api.check(did, dan["did"]))["isPending"]
    await eventually(pending, "a pending request after writing a membership record")
    assert dan["did"] not in await proofs_on_pds(app, did)


async def test_community_profile_edited_directly_on_the_pds_shows_in_the_details(app, client, devnet, people):
    from daemon.atproto.accounts import _access_token
    api = await Api.make(app, client)
    alice = people("alice")
    created = await api.create(alice, "Before edit", description="old words")
    did = created["did"]
    await live(app, people)
    collection = f"{app.config.atproto.namespace}.profile"
    token = await _access_token(app, did)  # the community's own credentials, another client
    async with httpx.AsyncClient() as http:
        got = (await http.get(f"{devnet.pds_url}/xrpc/com.atproto.repo.getRecord",
                              params={"repo": did, "collection": collection, "rkey": "self"})).json()
        record = {**got["value"], "displayName": "After edit", "description": "new words"}
        resp = await http.post(f"{devnet.pds_url}/xrpc/com.atproto.repo.putRecord",
                               headers={"authorization": f"Bearer {token}"},
                               json={"repo": did, "collection": collection, "rkey": "self", "record": record})
        assert resp.status_code == 200, resp.text

    async def shown() -> bool:
        details = (await api.get(api.path(did))).json()["community"]
        return details["displayName"] == "After edit" and details["description"] == "new words"
    await eventually(shown, "the edited profile in the community's details")
    entries = await api.audit(did, alice["did"])
    assert entries[0]["action"] == "community.refreshed"


async def test_the_services_own_writes_are_recognised_and_left_alone(app, client, devnet, people, sync_recorder):
    api, did, alice, bob = await community_with_member(app, client, people)
    resp = await api.admins(did, "promote", {"adminDid": alice["did"], "memberDid": bob["did"]})
    assert resp.status == 200, resp.text

    async def seen() -> list[Any]:
        return [e for e in sync_recorder.events if e.did == did and e.kind == "commit" and e.ops]
    commits = await eventually(seen, "the promote's commit came back through the stream")
    assert all(e.own for e in commits), commits
    assert [e["action"] for e in await api.audit(did, alice["did"])][0] == "admin.promoted"


async def test_health_reports_the_sync(app, client, people):
    async def connected() -> bool:  # nobody writes meanwhile: a quiet stream is live once connected
        return (await client.get("/health")).json()["sync"]["state"] == "live"
    await eventually(connected, "the sync is live on a quiet stream")
    await live(app, people)
    health = (await client.get("/health")).json()
    assert health["sync"]["state"] == "live"
    assert isinstance(health["sync"]["cursor"], int) or health["sync"]["cursor"] is None
    assert set(health["sync"]) == {"state", "cursor", "lagSeconds"}


async def test_a_batch_that_fails_to_apply_is_retried_after_a_backoff_and_nothing_is_skipped(
        app, client, devnet, people, new_handle, fail_once, clock):
    api, did, _alice, bob = await community_with_member(app, client, people)
    fail_once.did = bob["did"]
    handle = new_handle("retried")
    await asyncio.to_thread(pds_call, devnet, "com.atproto.identity.updateHandle", {"handle": handle},
                            token=bob["accessJwt"])

    async def failed() -> bool:
        return fail_once.did is None and app.sync.state == "backoff"
    await eventually(failed, "the batch failed and waits for its retry")
    cursor = app.sync.cursor
    assert (await members_by_did(api, did))[bob["did"]]["handle"] != handle
    await asyncio.to_thread(people, "more")  # later events wait behind the failed batch
    await asyncio.sleep(0.3)
    assert app.sync.cursor == cursor
    clock.advance(1.0)

    async def shown() -> bool:
        return (await members_by_did(api, did))[bob["did"]]["handle"] == handle
    await eventually(shown, "the retried batch applied")
    # the failed batch may be the first this sync applies (no cursor saved before it)
    assert app.sync.cursor is not None and (cursor is None or app.sync.cursor > cursor)


async def test_a_membership_record_the_users_repo_does_not_hold_makes_nobody_join(app, client, devnet, people):
    """The stream's word is checked against the user's own PDS (a relay could lie)."""
    from daemon.sync import RecordOp, SyncEvent
    from plugins.communities import sync as communities_sync
    api = await Api.make(app, client)
    alice, eve = people("alice"), people("eve")
    did = (await api.create(alice, "No forgeries"))["did"]
    collection = f"{app.config.atproto.namespace}.membership"
    forged = SyncEvent("commit", eve["did"], 10**9, rev="3forged", ops=(
        RecordOp("create", collection, "3forgedrkey", None, {"$type": collection, "community": did}),))
    async with app.db.transaction("test.forged") as tx:
        await communities_sync.apply_tx(app, tx, [forged])
    await communities_sync.run(app)

    async def settled() -> bool:
        return not await app.writes.pending(kind_prefix="communities.sync")
    await eventually(settled, "the forged join settled")
    assert not (await api.check(did, eve["did"]))["isMember"]
    assert eve["did"] not in await proofs_on_pds(app, did)
