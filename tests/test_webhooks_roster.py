"""Webhooks and `rosterVisibility` (issue 22, hole 4): where the roster is hidden
(`members`, `admins`), member events reach only the apps that may see the roster (the
community's creator app and apps its admins granted management,
`CommunitiesService.sees_roster`); other apps get no member events, and the other
events they get carry no member's DID."""

from __future__ import annotations

import time

import pytest

from daemon.base import FakeClock
from tests.fixtures_webhooks import LOOPBACK_TARGETS, emit_events, make_app_key, make_community, settle

COMMUNITY = "did:plc:rostercommunity"


@pytest.fixture
def clock():
    return FakeClock(start=time.time())  # receivers check webhook-timestamp against real time


@pytest.fixture
def config_overrides():
    return LOOPBACK_TARGETS


async def subscribe(client, key, url, events):
    resp = await client.post("/api/v1/webhooks", api_key=key, json={"url": url, "events": events})
    assert resp.status == 201, resp.text
    return resp.json()


async def set_roster(app, visibility: str) -> None:
    from plugins.communities import store as communities
    async with app.db.transaction("test.roster") as tx:
        await communities.set_visibility_tx(tx, COMMUNITY, None, roster_visibility=visibility)


async def grant(app, app_id: str, manage: bool) -> None:
    from plugins.communities import store as communities
    async with app.db.transaction("test.grant") as tx:
        await communities.allow_app_tx(tx, COMMUNITY, app_id, "did:plc:creator", app.clock.iso_now(), manage=manage)


EVENTS = ["member.joined", "member.left", "member.banned", "record.created"]


@pytest.mark.parametrize("visibility", ["members", "admins"])
async def test_a_hidden_roster_reaches_only_the_apps_that_may_see_it(app, client, receiver, visibility):
    creator = await make_app_key(app, client, "did:plc:alice", "creator.example.com")
    managing = await make_app_key(app, client, "did:plc:bob", "managing.example.com")
    watching = await make_app_key(app, client, "did:plc:carol", "watching.example.com")
    stranger = await make_app_key(app, client, "did:plc:dave", "stranger.example.com")
    await make_community(app, COMMUNITY, "open", creator_app_id=creator["appId"])
    await grant(app, managing["appId"], manage=True)
    await grant(app, watching["appId"], manage=False)
    await set_roster(app, visibility)
    recs = {name: receiver() for name in ("creator", "managing", "watching", "stranger")}
    for name, made in (("creator", creator), ("managing", managing), ("watching", watching),
                       ("stranger", stranger)):
        await subscribe(client, made["apiKey"], recs[name].url, EVENTS)

    joined = await emit_events(app, "member.joined", COMMUNITY, data={"memberDid": "did:plc:erin"})
    banned = await emit_events(app, "member.banned", COMMUNITY,
                               data={"memberDid": "did:plc:erin", "bannedBy": "did:plc:alice"})
    record = await emit_events(app, "record.created", COMMUNITY, data={
        "collection": "org.example.note", "rkey": "r1", "uri": "at://x/org.example.note/r1", "cid": "c",
        "userDid": "did:plc:erin"})
    await settle(app)

    for name in ("creator", "managing"):
        assert recs[name].ids() == joined + banned + record
        assert recs[name].requests[-1].json()["data"]["userDid"] == "did:plc:erin"
    for name in ("watching", "stranger"):
        assert recs[name].ids() == record
        delivered = recs[name].requests[0].json()["data"]
        assert delivered == {"collection": "org.example.note", "rkey": "r1", "uri": "at://x/org.example.note/r1",
                             "cid": "c", "communityDid": COMMUNITY}
        assert b"did:plc:erin" not in recs[name].requests[0].body


async def test_a_public_roster_reaches_every_app_that_sees_the_community(app, client, receiver):
    creator = await make_app_key(app, client, "did:plc:alice", "creator.example.com")
    stranger = await make_app_key(app, client, "did:plc:dave", "stranger.example.com")
    await make_community(app, COMMUNITY, "open", creator_app_id=creator["appId"])
    rec = receiver()
    await subscribe(client, stranger["apiKey"], rec.url, EVENTS)
    joined = await emit_events(app, "member.joined", COMMUNITY, data={"memberDid": "did:plc:erin"})
    await settle(app)
    assert rec.ids() == joined and rec.requests[0].json()["data"]["memberDid"] == "did:plc:erin"


async def test_the_roster_rule_for_events_is_one_function(app, client):
    """The rule the events stream shares (`app_sees_roster` + `event_data_for`)."""
    from daemon.plugin.events import event_data_for
    creator = await make_app_key(app, client, "did:plc:alice", "creator.example.com")
    stranger = await make_app_key(app, client, "did:plc:dave", "stranger.example.com")
    await make_community(app, COMMUNITY, "open", creator_app_id=creator["appId"])
    await set_roster(app, "admins")
    assert await app.communities.sees_roster(COMMUNITY, creator["appId"]) is True
    assert await app.communities.sees_roster(COMMUNITY, stranger["appId"]) is False
    assert await app.communities.sees_roster("did:plc:nosuchcommunity", creator["appId"]) is False
    joined, deleted = app.event_kinds["member.joined"], app.event_kinds["record.deleted"]
    assert event_data_for(joined, {"memberDid": "did:plc:x"}, sees_people=False) is None
    assert event_data_for(joined, {"memberDid": "did:plc:x"}, sees_people=True) == {"memberDid": "did:plc:x"}
    assert event_data_for(deleted, {"rkey": "r", "userDid": "did:plc:x"}, sees_people=False) == {"rkey": "r"}
