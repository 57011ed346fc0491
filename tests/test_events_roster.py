"""The event stream and `rosterVisibility` (issues 22 and 25): where a community hides its
roster, the stream follows the webhooks' rule, decided at the event's commit
(`plugins/communities/steps.py` `event_audience`, asked by the core through the communities service): only apps that see the roster (its creator app,
apps granted management) hear of member events; the others get every other event without
the keys that name a person, in a pull and over the WebSocket alike."""

from __future__ import annotations

import pytest

from tests.fixtures_webhooks import LOOPBACK_TARGETS, allow_app, emit_events, make_app_key, make_community
from tests.test_events_subscribe import connect, receive, start_cursor

COMMUNITY = "did:plc:rosterstream"
RECORD = {"collection": "org.example.note", "rkey": "r1", "uri": "at://x/org.example.note/r1", "cid": "c",
          "userDid": "did:plc:erin"}
RECORD_SHOWN_WITHOUT_PEOPLE = {k: v for k, v in RECORD.items() if k != "userDid"} | {"communityDid": COMMUNITY}


@pytest.fixture
def config_overrides():
    return LOOPBACK_TARGETS


async def set_roster(app, visibility: str) -> None:
    from plugins.communities import store as communities
    async with app.db.transaction("test.roster") as tx:
        await communities.set_visibility_tx(tx, COMMUNITY, None, roster_visibility=visibility)


async def pull(client, key, cursor):
    resp = await client.get("/api/v1/events", api_key=key, params={"cursor": cursor})
    assert resp.status == 200, resp.text
    return resp.json()["events"]


@pytest.mark.parametrize("visibility", ["members", "admins"])
async def test_a_pull_shows_a_hidden_roster_only_to_the_apps_that_may_see_it(app, client, visibility):
    creator = await make_app_key(app, client, "did:plc:alice", "creator.example.com")
    managing = await make_app_key(app, client, "did:plc:bob", "managing.example.com")
    stranger = await make_app_key(app, client, "did:plc:dave", "stranger.example.com")
    await make_community(app, COMMUNITY, "open", creator_app_id=creator["appId"])
    await allow_app(app, COMMUNITY, managing["appId"], manage=True)
    await set_roster(app, visibility)
    starts = {k["apiKey"]: await start_cursor(client, k["apiKey"]) for k in (creator, managing, stranger)}
    joined = await emit_events(app, "member.joined", COMMUNITY, data={"memberDid": "did:plc:erin"})
    record = await emit_events(app, "record.created", COMMUNITY, data=RECORD)

    for made in (creator, managing):
        events = await pull(client, made["apiKey"], starts[made["apiKey"]])
        assert [e["id"] for e in events] == joined + record
        assert events[1]["data"]["userDid"] == "did:plc:erin"
    events = await pull(client, stranger["apiKey"], starts[stranger["apiKey"]])
    assert [e["id"] for e in events] == record
    assert events[0]["data"] == RECORD_SHOWN_WITHOUT_PEOPLE


async def test_a_public_roster_shows_people_to_every_app(app, client):
    stranger = await make_app_key(app, client, "did:plc:dave", "stranger.example.com")
    await make_community(app, COMMUNITY, "open")
    start = await start_cursor(client, stranger["apiKey"])
    joined = await emit_events(app, "member.joined", COMMUNITY, data={"memberDid": "did:plc:erin"})
    events = await pull(client, stranger["apiKey"], start)
    assert [e["id"] for e in events] == joined and events[0]["data"]["memberDid"] == "did:plc:erin"


async def test_a_live_subscriber_gets_the_same_as_a_pull(app, client, server):
    creator = await make_app_key(app, client, "did:plc:alice", "creator.example.com")
    stranger = await make_app_key(app, client, "did:plc:dave", "stranger.example.com")
    await make_community(app, COMMUNITY, "open", creator_app_id=creator["appId"])
    await set_roster(app, "admins")
    cursors = {k["apiKey"]: await start_cursor(client, k["apiKey"]) for k in (creator, stranger)}
    async with connect(server, creator["apiKey"], params={"cursor": cursors[creator["apiKey"]]}) as ws_creator, \
            connect(server, stranger["apiKey"], params={"cursor": cursors[stranger["apiKey"]]}) as ws_stranger:
        await emit_events(app, "member.joined", COMMUNITY, data={"memberDid": "did:plc:erin"})
        [record_id] = await emit_events(app, "record.created", COMMUNITY, data=RECORD)
        got_creator = await receive(ws_creator, 2)
        [got_stranger] = await receive(ws_stranger, 1)
    assert [e["type"] for e in got_creator] == ["member.joined", "record.created"]
    assert got_creator[1]["data"]["userDid"] == "did:plc:erin"
    assert got_stranger["id"] == record_id and got_stranger["data"] == RECORD_SHOWN_WITHOUT_PEOPLE
