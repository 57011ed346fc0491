"""Community records against the devnet (spec §2.7, §4.7): the round trip visible on the
PDS, validation, who may write and read, and the events."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.fixtures_communities import Api, devnet_module_fixtures

pytestmark = pytest.mark.pds

COLLECTION = "org.example.garden.note"


config_overrides, extra_plugins = devnet_module_fixtures()


async def on_pds(devnet: Any, repo: str, collection: str, rkey: str) -> dict[str, Any] | None:
    """com.atproto.repo.getRecord straight from the PDS."""
    async with httpx.AsyncClient() as http:
        resp = await http.get(f"{devnet.pds_url}/xrpc/com.atproto.repo.getRecord",
                              params={"repo": repo, "collection": collection, "rkey": rkey})
    if resp.status_code == 400 and resp.json().get("error") == "RecordNotFound":
        return None
    assert resp.status_code == 200, resp.text
    return resp.json()


def path(did: str, tail: str = "") -> str:
    return f"/api/v1/communities/{did}/records{tail}"


async def setup(app: Any, client: Any, people: Any, type: str = "open") -> tuple[Api, str, dict, dict]:
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Garden club", type=type))["did"]
    if type == "open":
        assert (await api.join(did, bob["did"])).status == 201
    return api, did, alice, bob


def note(text: str, collection: str = COLLECTION) -> dict[str, Any]:
    return {"$type": collection, "text": text, "createdAt": "2026-11-22T00:00:00.000Z"}


async def test_record_round_trip_is_visible_on_the_pds_and_emits_events(app, client, devnet, people, recorder):
    api, did, alice, bob = await setup(app, client, people)
    created = await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION,
                                         "record": note("first")})
    assert created.status == 201, created.text
    out = created.json()
    rkey = out["rkey"]
    assert out["uri"] == f"at://{did}/{COLLECTION}/{rkey}" and out["cid"]
    on = await on_pds(devnet, did, COLLECTION, rkey)
    assert on["value"]["text"] == "first" and on["cid"] == out["cid"]

    got = (await api.get(path(did, f"/{COLLECTION}/{rkey}"))).json()
    assert got["uri"] == out["uri"] and got["cid"] == out["cid"] and got["rkey"] == rkey
    assert got["value"] == note("first") and got["authorDid"] == bob["did"]

    updated = await client.put(path(did), api_key=api.key, json={
        "userDid": bob["did"], "collection": COLLECTION, "rkey": rkey, "record": note("second")})
    assert updated.status == 200, updated.text
    assert updated.json()["cid"] != out["cid"]
    assert (await on_pds(devnet, did, COLLECTION, rkey))["value"]["text"] == "second"
    listed = (await api.get(path(did, f"/{COLLECTION}"))).json()["records"]
    assert [(r["rkey"], r["value"]["text"]) for r in listed] == [(rkey, "second")]

    deleted = await client.delete(path(did, f"/{COLLECTION}/{rkey}"), api_key=api.key,
                                  params={"userDid": bob["did"]})
    assert deleted.status == 200, deleted.text
    assert await on_pds(devnet, did, COLLECTION, rkey) is None
    assert (await api.get(path(did, f"/{COLLECTION}/{rkey}"))).status == 404

    kinds = [(e.type, e.data) for e in recorder.events if e.type.startswith("record.")]
    assert kinds == [
        ("record.created", {"collection": COLLECTION, "rkey": rkey, "uri": out["uri"],
                            "cid": out["cid"], "userDid": bob["did"]}),
        ("record.updated", {"collection": COLLECTION, "rkey": rkey, "uri": out["uri"],
                            "cid": updated.json()["cid"], "userDid": bob["did"]}),
        ("record.deleted", {"collection": COLLECTION, "rkey": rkey, "uri": out["uri"],
                            "cid": updated.json()["cid"], "userDid": bob["did"]}),
    ]
    assert all(e.community_did == did and e.app_id == api.app_id
               for e in recorder.events if e.type.startswith("record."))


async def test_invalid_records_are_400(app, client, people):
    api, did, alice, bob = await setup(app, client, people)
    cases = [
        ({"collection": COLLECTION, "record": note("x", "org.example.other")}, "record.$type"),
        ({"collection": COLLECTION, "record": {"text": "no type"}}, "record.$type"),
        ({"collection": COLLECTION}, "record"),
        ({"collection": "not an nsid", "record": note("x", "not an nsid")}, "collection"),
        ({"collection": COLLECTION, "record": note("x"), "rkey": "a/b"}, "rkey"),
        ({"collection": COLLECTION, "record": note("x"), "rkey": ".."}, "rkey"),
    ]
    for extra, field in cases:
        resp = await api.post(path(did), {"userDid": bob["did"], **extra})
        assert resp.status == 400, (extra, resp.text)
        assert field in resp.json()["message"], resp.json()
    assert (await api.get(path(did, f"/{COLLECTION}"))).json()["records"] == []


async def test_record_over_the_size_limit_is_413(app, client, people):
    api, did, alice, bob = await setup(app, client, people)
    big = note("x" * 40000)
    resp = await client.post(path(did), api_key=api.key,
                             json={"userDid": bob["did"], "collection": COLLECTION, "record": big})
    assert resp.status == 413


async def test_non_member_may_not_create(app, client, people, devnet):
    api, did, alice, bob = await setup(app, client, people)
    carol = people("carol")
    resp = await api.post(path(did), {"userDid": carol["did"], "collection": COLLECTION,
                                      "record": note("hi"), "rkey": "carolnote"})
    assert resp.status == 403 and resp.json()["error"] == "not_member"
    assert await on_pds(devnet, did, COLLECTION, "carolnote") is None


@pytest.mark.parametrize("name", ["profile", "admins", "membershipProof", "membership", "anything"])
async def test_service_collections_are_403(app, client, people, name):
    api, did, alice, bob = await setup(app, client, people)
    collection = f"{app.config.atproto.namespace}.{name}"
    resp = await api.post(path(did), {"userDid": alice["did"], "collection": collection,
                                      "record": note("x", collection), "rkey": "self"})
    assert resp.status == 403 and resp.json()["error"] == "collection_protected"
    gone = await client.delete(path(did, f"/{collection}/self"), api_key=api.key,
                               params={"userDid": alice["did"]})
    assert gone.status == 403 and gone.json()["error"] == "collection_protected"


async def test_only_author_or_admin_may_change_a_record(app, client, people, devnet):
    api, did, alice, bob = await setup(app, client, people)
    carol = people("carol")
    assert (await api.join(did, carol["did"])).status == 201
    rkey = (await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION,
                                       "record": note("bob's")})).json()["rkey"]
    edit = await client.put(path(did), api_key=api.key, json={
        "userDid": carol["did"], "collection": COLLECTION, "rkey": rkey, "record": note("carol's")})
    assert edit.status == 403 and edit.json()["error"] == "not_author"
    drop = await client.delete(path(did, f"/{COLLECTION}/{rkey}"), api_key=api.key,
                               json={"userDid": carol["did"]})
    assert drop.status == 403
    assert (await on_pds(devnet, did, COLLECTION, rkey))["value"]["text"] == "bob's"
    # an app the community does not trust cannot act as its admin, even naming her
    other = await Api.make(app, client, owner="did:plc:someoneelse")
    assert (await other.post(path(did), {"userDid": carol["did"], "collection": COLLECTION,
                                         "record": note("carol's own")})).status == 201
    posing = await client.delete(path(did, f"/{COLLECTION}/{rkey}"), api_key=other.key,
                                 json={"userDid": alice["did"]})
    assert posing.status == 403 and posing.json()["error"] == "app_not_trusted"
    assert (await on_pds(devnet, did, COLLECTION, rkey))["value"]["text"] == "bob's"
    by_admin = await client.delete(path(did, f"/{COLLECTION}/{rkey}"), api_key=api.key,
                                   json={"userDid": alice["did"]})
    assert by_admin.status == 200
    assert await on_pds(devnet, did, COLLECTION, rkey) is None


async def test_private_community_records_need_a_member_to_read(app, client, people):
    api, did, alice, bob = await setup(app, client, people, type="private")
    rkey = (await api.post(path(did), {"userDid": alice["did"], "collection": COLLECTION,
                                       "record": note("secret")})).json()["rkey"]
    assert (await api.get(path(did, f"/{COLLECTION}"))).status == 403
    assert (await api.get(path(did, f"/{COLLECTION}/{rkey}"))).status == 403
    assert (await api.get(path(did, f"/{COLLECTION}"), userDid=bob["did"])).status == 403
    ok = await api.get(path(did, f"/{COLLECTION}/{rkey}"), userDid=alice["did"])
    assert ok.status == 200 and ok.json()["value"]["text"] == "secret"
    other = await Api.make(app, client, owner="did:plc:otherowner")
    assert (await other.get(path(did, f"/{COLLECTION}"), userDid=alice["did"])).status == 404


async def test_list_is_paginated_newest_first(app, client, people):
    api, did, alice, bob = await setup(app, client, people)
    rkeys = []
    for i in range(5):
        resp = await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION,
                                          "record": note(f"n{i}"), "rkey": f"note{i}"})
        assert resp.status == 201, resp.text
        rkeys.append(resp.json()["rkey"])
    dup = await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION,
                                     "record": note("again"), "rkey": "note0"})
    assert dup.status == 409
    first = (await api.get(path(did, f"/{COLLECTION}"), limit=3)).json()
    second = (await api.get(path(did, f"/{COLLECTION}"), limit=3, cursor=first["cursor"])).json()
    assert [r["rkey"] for r in first["records"] + second["records"]] == rkeys[::-1]
    assert "cursor" not in second


class TestRecordWebhooks:
    @pytest.fixture
    def config_overrides(self, communities_config):
        from tests.conftest import deep_merge
        from tests.fixtures_webhooks import LOOPBACK_TARGETS
        return deep_merge(communities_config, LOOPBACK_TARGETS)

    @pytest.fixture
    def clock(self):
        import time

        from daemon.base import FakeClock
        return FakeClock(start=time.time())

    async def test_record_events_reach_a_verified_webhook(self, app, client, people, receiver):
        from tests.fixtures_webhooks import settle
        api, did, alice, bob = await setup(app, client, people)
        rec = receiver()
        hook = await client.post("/api/v1/webhooks", api_key=api.key, json={
            "url": rec.url, "events": ["record.created", "record.deleted"], "communityDid": did})
        assert hook.status == 201, hook.text
        rec.secrets = [hook.json()["secret"]]
        out = (await api.post(path(did), {"userDid": bob["did"], "collection": COLLECTION,
                                          "record": note("hello")})).json()
        await client.delete(path(did, f"/{COLLECTION}/{out['rkey']}"), api_key=api.key,
                            params={"userDid": bob["did"]})
        await settle(app)
        assert [r.verify_error for r in rec.requests] == [None, None]
        assert [r.verified["type"] for r in rec.requests] == ["record.created", "record.deleted"]
        assert rec.requests[0].verified["data"] == {
            "collection": COLLECTION, "rkey": out["rkey"], "uri": out["uri"], "cid": out["cid"],
            "userDid": bob["did"], "communityDid": did}
