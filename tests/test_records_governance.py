"""What apps may write in a community's repo through the records API (docs/records.md,
"Writable collections" and "Never replacing a record"): the protocol's, Bluesky's and the
service's namespaces are never writable, the operator's and the community's lists govern
the rest, and a create never replaces a record the service did not write. Against the
devnet: every "unchanged" is read back from the PDS."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from daemon.atproto.syntax import canonical_nsid
from plugins.records.writes import reconcile
from tests.conftest import deep_merge
from tests.fixtures_communities import Api
from tests.test_records_api import COLLECTION, note, on_pds, path, setup

pytestmark = pytest.mark.pds

AFTER = 30.0


@pytest.fixture
def config_overrides(communities_config: dict[str, Any]) -> dict[str, Any]:
    return {**communities_config, "records": {"reconcile_after_seconds": AFTER}}


@pytest.fixture
def extra_plugins(recorder: Any, failer: Any) -> tuple:
    return (recorder, failer)


async def put_directly(app: Any, did: str, collection: str, rkey: str, value: dict[str, Any]) -> dict[str, Any]:
    """Write a record into the community's repo on the PDS, not through the records API
    (as the account's owner could, with another client)."""
    from daemon.atproto.accounts import community_repo
    repo = await community_repo(app, did)
    return await repo.put_record(collection, rkey, value)


async def indexed(app: Any, did: str) -> list[tuple[str, str]]:
    rows = await app.db.fetchall("SELECT collection, rkey FROM records WHERE community_did = ? ORDER BY id",
                                 (did,))
    return [(r["collection"], r["rkey"]) for r in rows]


async def pending(app: Any) -> list[tuple[str, str]]:
    rows = await app.db.fetchall("SELECT operation AS op, rkey FROM write_intents WHERE kind = 'records.write' ORDER BY id")
    return [(r["op"], r["rkey"]) for r in rows]


# ------------------------------------------------------------------ the reproduction


async def xrpc_as(devnet: Any, account: dict[str, str], nsid: str, body: dict[str, Any]) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        resp = await http.post(f"{devnet.pds_url}/xrpc/{nsid}", json=body,
                               headers={"Authorization": f"Bearer {account['accessJwt']}"})
    assert resp.status_code == 200, resp.text
    return resp.json()


async def test_an_unrelated_app_cannot_rewrite_a_brought_accounts_profile_posts_or_follows(
        app, client, devnet, people):
    owner, bob = people("owner"), people("bob")
    profile = {"$type": "app.bsky.actor.profile", "displayName": "Chess Club"}
    await xrpc_as(devnet, owner, "com.atproto.repo.putRecord", {
        "repo": owner["did"], "collection": "app.bsky.actor.profile", "rkey": "self", "record": profile})
    post = await xrpc_as(devnet, owner, "com.atproto.repo.createRecord", {
        "repo": owner["did"], "collection": "app.bsky.feed.post",
        "record": {"$type": "app.bsky.feed.post", "text": "Club night on Friday",
                   "createdAt": "2026-11-20T18:00:00.000Z"}})
    post_rkey = post["uri"].rsplit("/", 1)[1]
    before_profile = await on_pds(devnet, owner["did"], "app.bsky.actor.profile", "self")
    before_post = await on_pds(devnet, owner["did"], "app.bsky.feed.post", post_rkey)

    creator = await Api.make(app, client)
    app_password = devnet.create_app_password(owner, "commonroom")
    did = (await creator.create(owner, "Chess Club", identifier=owner["did"],
                                appPassword=app_password))["did"]
    assert did == owner["did"]

    intruder = await Api.make(app, client, owner="did:plc:unrelatedowner")
    assert (await intruder.join(did, bob["did"])).status == 201
    attempts = [
        ("app.bsky.actor.profile", "self",
         {"$type": "app.bsky.actor.profile", "displayName": "Pwned Club"}),
        ("app.bsky.feed.post", post_rkey,
         {"$type": "app.bsky.feed.post", "text": "pwned", "createdAt": "2026-11-22T00:00:00.000Z"}),
        ("app.bsky.graph.follow", "pwnfollow",
         {"$type": "app.bsky.graph.follow", "subject": bob["did"], "createdAt": "2026-11-22T00:00:00.000Z"}),
    ]
    for collection, rkey, record in attempts:
        resp = await intruder.post(path(did), {"userDid": bob["did"], "collection": collection,
                                               "rkey": rkey, "record": record})
        assert resp.status == 403, (collection, resp.text)
        assert resp.json()["error"] == "collection_protected"
        edit = await client.put(path(did), api_key=intruder.key, json={
            "userDid": bob["did"], "collection": collection, "rkey": rkey, "record": record})
        assert (edit.status, edit.json()["error"]) == (403, "collection_protected"), edit.text

    assert await on_pds(devnet, did, "app.bsky.actor.profile", "self") == before_profile
    assert await on_pds(devnet, did, "app.bsky.feed.post", post_rkey) == before_post
    assert await on_pds(devnet, did, "app.bsky.graph.follow", "pwnfollow") is None
    assert await indexed(app, did) == []


@pytest.mark.parametrize("collection", [
    "Community.Commonroom.profile", "COMMUNITY.commonroom.membershipProof", "App.Bsky.actor.profile",
    "com.ATPROTO.lexicon.schema", "chat.bsky.actor.declaration", "tools.ozone.set.value",
])
async def test_protected_namespaces_are_refused_whatever_the_case_of_the_authority(
        app, client, people, devnet, collection):
    api, did, alice, bob = await setup(app, client, people)
    resp = await api.post(path(did), {"userDid": bob["did"], "collection": collection, "rkey": "self",
                                      "record": note("x", collection)})
    # an authority not in lower case is refused before anything else (issue 22, hole 3)
    want = (403, "collection_protected") if collection == canonical_nsid(collection) else (400, "invalid_request")
    assert (resp.status, resp.json()["error"]) == want, resp.text
    assert await on_pds(devnet, did, collection, "self") is None


# ------------------------------------------------------------------ never replacing a record


@pytest.mark.parametrize("same_value", [False, True], ids=["other-value", "copied-value"])
async def test_create_never_takes_over_a_record_put_on_the_pds_directly(
        app, client, people, devnet, recorder, same_value):
    api, did, alice, bob = await setup(app, client, people)
    direct = await put_directly(app, did, COLLECTION, "direct1", note("the owner's"))
    record = note("the owner's") if same_value else note("an app's")

    created = await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION,
                                         "rkey": "direct1", "record": record})
    assert created.status == 409, created.text
    assert created.json()["error"] == "record_exists"
    updated = await client.put(path(did), api_key=api.key, json={
        "userDid": bob["did"], "collection": COLLECTION, "rkey": "direct1", "record": note("edited")})
    assert (updated.status, updated.json()["error"]) == (404, "record_not_found")
    deleted = await client.delete(path(did, f"/{COLLECTION}/direct1"), api_key=api.key,
                                  params={"userDid": alice["did"]})
    assert (deleted.status, deleted.json()["error"]) == (404, "record_not_found")

    on = await on_pds(devnet, did, COLLECTION, "direct1")
    assert on["cid"] == direct["cid"] and on["value"]["text"] == "the owner's"
    assert await indexed(app, did) == [] and await pending(app) == []
    assert recorder.of("record.created", did) == []


async def test_a_record_that_appears_just_before_the_write_is_not_replaced(
        app, client, people, devnet, recorder, monkeypatch):
    """The check and the write are two calls; putRecord with swapRecord null closes the gap
    (the record is put on the PDS, for real, right before the service's write is sent)."""
    api, did, alice, bob = await setup(app, client, people)
    real_send = app.http.send
    raced: list[dict[str, Any]] = []
    seen: list[dict[str, Any]] = []

    async def racing(request: Any, *args: Any, **kwargs: Any) -> Any:
        if request.url.path.endswith("com.atproto.repo.putRecord") and not seen:
            body = json.loads(request.content)
            if body.get("rkey") == "race1":
                seen.append(body)  # before the racing write, which passes through here too
                raced.append(await put_directly(app, did, COLLECTION, "race1", note("got there first")))
        return await real_send(request, *args, **kwargs)

    monkeypatch.setattr(app.http, "send", racing)
    resp = await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION, "rkey": "race1",
                                      "record": note("the app's")})
    monkeypatch.setattr(app.http, "send", real_send)
    assert raced, "the racing write did not happen"
    assert resp.status == 409, resp.text
    assert resp.json()["error"] == "record_exists"
    on = await on_pds(devnet, did, COLLECTION, "race1")
    assert on["cid"] == raced[0]["cid"] and on["value"]["text"] == "got there first"
    assert await indexed(app, did) == [] and await pending(app) == []
    assert recorder.of("record.created", did) == []


async def test_a_retried_create_does_not_replace_what_someone_put_at_its_key_meanwhile(
        app, client, people, devnet, recorder, failer, monkeypatch):
    """A create whose PDS call failed without writing leaves a pending row at its key. If
    someone else writes there before the retry, the retry settles the row (not ours: dropped)
    and answers 409; the other record stays."""
    api, did, alice, bob = await setup(app, client, people)
    body = {"userDid": bob["did"], "collection": COLLECTION, "rkey": "lost1", "record": note("the app's")}
    real_send = app.http.send

    async def refused(request: Any, *args: Any, **kwargs: Any) -> Any:
        if request.url.path.endswith("com.atproto.repo.putRecord"):
            raise httpx.ConnectError("connection refused", request=request)
        return await real_send(request, *args, **kwargs)

    monkeypatch.setattr(app.http, "send", refused)
    assert (await api.post(path(did), body)).status == 502
    monkeypatch.setattr(app.http, "send", real_send)
    assert await pending(app) == [("create", "lost1")]

    other = await put_directly(app, did, COLLECTION, "lost1", note("someone else's"))
    retried = await api.post(path(did), body)
    assert retried.status == 409, retried.text
    assert retried.json()["error"] == "record_exists"
    on = await on_pds(devnet, did, COLLECTION, "lost1")
    assert on["cid"] == other["cid"] and on["value"]["text"] == "someone else's"
    assert await indexed(app, did) == [] and await pending(app) == []
    assert recorder.of("record.created", did) == []


async def test_a_resumed_create_is_not_finished_over_a_record_someone_replaced_it_with(
        app, client, people, devnet, recorder, failer, clock):
    """The create reached the PDS but was not indexed (500); the record is then replaced on
    the PDS directly. Neither the reconciler nor a retry claims or overwrites the new one."""
    api, did, alice, bob = await setup(app, client, people)
    body = {"userDid": bob["did"], "collection": COLLECTION, "rkey": "crash1", "record": note("the app's")}
    failer.armed = "record.created"
    assert (await api.post(path(did), body)).status == 500
    assert await pending(app) == [("create", "crash1")]
    other = await put_directly(app, did, COLLECTION, "crash1", note("replaced directly"))

    retried = await api.post(path(did), body)
    assert (retried.status, retried.json()["error"]) == (409, "record_exists"), retried.text
    clock.advance(AFTER + 1)
    assert (await reconcile(app))["finished"] == 0
    on = await on_pds(devnet, did, COLLECTION, "crash1")
    assert on["cid"] == other["cid"] and on["value"]["text"] == "replaced directly"
    assert await indexed(app, did) == [] and await pending(app) == []
    assert recorder.of("record.created", did) == []


async def test_a_create_retried_after_a_lost_answer_still_succeeds_once(
        app, client, people, devnet, recorder, failer):
    """The guard against replacing records keeps the service's own retry working: the
    record at the key is the pending create's own (201, the same body, one event)."""
    api, did, alice, bob = await setup(app, client, people)
    body = {"userDid": bob["did"], "collection": COLLECTION, "rkey": "mine1", "record": note("mine")}
    failer.armed = "record.created"
    assert (await api.post(path(did), body)).status == 500
    retried = await api.post(path(did), body)
    assert retried.status == 201, retried.text
    on = await on_pds(devnet, did, COLLECTION, "mine1")
    assert retried.json()["cid"] == on["cid"]
    assert len(recorder.of("record.created", did)) == 1


async def test_delete_does_not_remove_a_version_written_behind_the_services_back(
        app, client, people, devnet, recorder):
    api, did, alice, bob = await setup(app, client, people)
    rkey = (await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION,
                                       "record": note("bob's")})).json()["rkey"]
    changed = await put_directly(app, did, COLLECTION, rkey, note("changed on the PDS"))
    resp = await client.delete(path(did, f"/{COLLECTION}/{rkey}"), api_key=api.key,
                               params={"userDid": bob["did"]})
    assert resp.status == 409, resp.text
    assert resp.json()["error"] == "record_conflict"
    on = await on_pds(devnet, did, COLLECTION, rkey)
    assert on["cid"] == changed["cid"] and on["value"]["text"] == "changed on the PDS"
    assert recorder.of("record.deleted", did) == [] and await pending(app) == []


# ------------------------------------------------------------------ the operator's lists


class TestOperatorLists:
    @pytest.fixture
    def config_overrides(self, communities_config):
        return deep_merge(communities_config, {"records": {
            "allowed_collections": ["org.example.*", "net.example.board.post"],
            "denied_collections": ["org.example.secret.*"],
        }})

    @pytest.mark.parametrize("collection", [
        "org.example.secret.note", "Org.Example.Secret.note", "net.other.note",
        "net.example.board.Post", "net.example.board.postx",
    ])
    async def test_denied_or_unlisted_collections_are_403(self, app, client, people, devnet, collection):
        api, did, alice, bob = await setup(app, client, people)
        resp = await api.post(path(did), {"userDid": bob["did"], "collection": collection, "rkey": "n1",
                                          "record": note("x", collection)})
        want = (403, "collection_not_allowed") if collection == canonical_nsid(collection) else \
            (400, "invalid_request")
        assert (resp.status, resp.json()["error"]) == want, resp.text
        assert await on_pds(devnet, did, collection, "n1") is None

    @pytest.mark.parametrize("collection", ["org.example.garden.note", "net.example.board.post"])
    async def test_allowed_collections_are_written(self, app, client, people, devnet, collection):
        api, did, alice, bob = await setup(app, client, people)
        resp = await api.post(path(did), {"userDid": bob["did"], "collection": collection, "rkey": "n1",
                                          "record": note("ok", collection)})
        assert resp.status == 201, resp.text
        assert (await on_pds(devnet, did, collection, "n1"))["value"]["text"] == "ok"


# ------------------------------------------------------------------ the community's allowlist


def settings_path(did: str) -> str:
    return f"/api/v1/communities/{did}/records-settings"


async def test_admins_limit_the_collections_apps_may_write_in_their_community(
        app, client, people, devnet):
    api, did, alice, bob = await setup(app, client, people)
    before = await api.get(settings_path(did))
    assert before.status == 200 and before.json()["allowedCollections"] is None
    set_ = await client.put(settings_path(did), api_key=api.key, json={
        "adminDid": alice["did"], "allowedCollections": ["org.example.garden.*", "org.example.garden.*"]})
    assert set_.status == 200, set_.text
    assert set_.json()["allowedCollections"] == ["org.example.garden.*"]
    assert set_.json()["updatedBy"] == alice["did"]
    other_app = await Api.make(app, client, owner="did:plc:someoneelse")
    assert (await other_app.get(settings_path(did))).json()["allowedCollections"] == ["org.example.garden.*"]

    ok = await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION, "rkey": "g1",
                                    "record": note("in the garden")})
    assert ok.status == 201, ok.text
    refused = await other_app.post(path(did), {"userDid": bob["did"], "collection": "org.example.chat.msg",
                                               "rkey": "c1", "record": note("x", "org.example.chat.msg")})
    assert (refused.status, refused.json()["error"]) == (403, "collection_not_allowed"), refused.text
    assert await on_pds(devnet, did, "org.example.chat.msg", "c1") is None

    entries = [e for e in await api.audit(did, alice["did"]) if e["action"] == "records.collections_changed"]
    assert len(entries) == 1 and entries[0]["actorDid"] == alice["did"]

    cleared = await client.put(settings_path(did), api_key=api.key,
                               json={"adminDid": alice["did"], "allowedCollections": None})
    assert cleared.status == 200 and cleared.json()["allowedCollections"] is None
    again = await other_app.post(path(did), {"userDid": bob["did"], "collection": "org.example.chat.msg",
                                             "rkey": "c1", "record": note("x", "org.example.chat.msg")})
    assert again.status == 201, again.text


async def test_an_empty_allowlist_freezes_writes_but_deleting_indexed_records_still_works(
        app, client, people, devnet):
    api, did, alice, bob = await setup(app, client, people)
    rkey = (await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION,
                                       "record": note("before")})).json()["rkey"]
    assert (await client.put(settings_path(did), api_key=api.key,
                             json={"adminDid": alice["did"], "allowedCollections": []})).status == 200
    edit = await client.put(path(did), api_key=api.key, json={
        "userDid": bob["did"], "collection": COLLECTION, "rkey": rkey, "record": note("after")})
    assert (edit.status, edit.json()["error"]) == (403, "collection_not_allowed")
    assert (await on_pds(devnet, did, COLLECTION, rkey))["value"]["text"] == "before"
    gone = await client.delete(path(did, f"/{COLLECTION}/{rkey}"), api_key=api.key,
                               params={"userDid": bob["did"]})
    assert gone.status == 200, gone.text
    assert await on_pds(devnet, did, COLLECTION, rkey) is None


async def test_only_an_admin_through_a_trusted_app_may_set_the_allowlist(app, client, people):
    api, did, alice, bob = await setup(app, client, people)
    body = {"allowedCollections": ["org.example.garden.*"]}
    by_member = await client.put(settings_path(did), api_key=api.key, json={"adminDid": bob["did"], **body})
    assert (by_member.status, by_member.json()["error"]) == (403, "not_admin")
    other_app = await Api.make(app, client, owner="did:plc:someoneelse")
    posing = await client.put(settings_path(did), api_key=other_app.key, json={"adminDid": alice["did"], **body})
    assert (posing.status, posing.json()["error"]) == (403, "app_not_trusted")
    assert (await api.get(settings_path(did))).json()["allowedCollections"] is None


@pytest.mark.parametrize("patterns, field", [
    (["app.bsky.feed.*"], "allowedCollections[0]"),
    (["org.example.ok.*", "community.commonroom.profile"], "allowedCollections[1]"),
    (["Tools.Ozone.*"], "allowedCollections[0]"),
    (["org.example.ok.*", "ORG.example.note"], "allowedCollections[1]"),
    (["not a pattern"], "allowedCollections[0]"),
    (["org.example.*.x"], "allowedCollections[0]"),
    ("org.example.*", "allowedCollections"),
    ([f"org.example.n{i}" for i in range(101)], "allowedCollections"),
])
async def test_bad_allowlists_are_400_naming_the_entry(app, client, people, patterns, field):
    api, did, alice, bob = await setup(app, client, people)
    resp = await client.put(settings_path(did), api_key=api.key,
                            json={"adminDid": alice["did"], "allowedCollections": patterns})
    assert resp.status == 400, resp.text
    assert resp.json()["details"][0]["field"] == field
    assert (await api.get(settings_path(did))).json()["allowedCollections"] is None
