"""A plugin's events keep people private by default: an `EventKind` declares which keys of
its data name a person (`person_keys`), an app that may not see a community's members gets
the event without them on every way out (webhook, pull, WebSocket), the community's
managing app gets them, and a kind whose schema has a `…Did` field declared neither way
stops start-up naming the kind and the field. The plugins here are throwaway test plugins,
written as an outside author would, on `daemon.plugin` only."""

from __future__ import annotations

import time
from typing import Any

import pytest

from commonroom_testing.app import build_config
from daemon.plugin import DID, STRING, EventKind, emit_tx, hookimpl, obj
from daemon.plugin.events import event_data_for
from daemon.plugin.testing import FakeClock
from daemon.runtime.app import create_app
from daemon.runtime.declarations import DeclarationError, collect
from daemon.runtime.plugins import build_plugin_manager
from tests.fixtures_webhooks import LOOPBACK_TARGETS, allow_app, make_app_key, make_community, settle
from tests.test_events_subscribe import connect, receive, start_cursor

COMMUNITY = "did:plc:pollcommunity"
CREATOR = "did:plc:pollcreator"
POLL_OPENED = EventKind(
    "poll.opened", "A member opened a poll.",
    obj({"pollId": STRING, "question": STRING, "creatorDid": DID, "creatorHandle": STRING, "labellerDid": DID,
         "communityDid": DID}, ["pollId", "question", "creatorDid", "communityDid"]),
    person_keys=("creatorDid", "creatorHandle"), not_person_keys=("labellerDid",))


class Polls:
    """A throwaway plugin with one event kind naming a person."""

    @hookimpl
    def cr_event_kinds(self) -> list[EventKind]:
        return [POLL_OPENED]


@pytest.fixture
def clock():
    return FakeClock(start=time.time())  # receivers check webhook-timestamp against real time


@pytest.fixture
def config_overrides():
    return LOOPBACK_TARGETS


@pytest.fixture
def extra_plugins():
    return (Polls(),)


async def open_poll(app: Any, **more: Any) -> str:
    data = {"pollId": "p1", "question": "Lunch?", "creatorDid": CREATOR, "creatorHandle": "carol.test",
            "labellerDid": "did:plc:labeller",
            "communityDid": COMMUNITY, **more}
    async with app.db.transaction("test.poll") as tx:
        event = await emit_tx(app, tx, "poll.opened", community_did=COMMUNITY, data=data)
    return event.id


async def hide_roster(app: Any) -> None:
    from plugins.communities import store as communities
    async with app.db.transaction("test.roster") as tx:
        await communities.set_visibility_tx(tx, COMMUNITY, None, roster_visibility="admins")


async def test_a_declared_person_key_reaches_only_the_apps_that_may_see_the_members(app, client, server,
                                                                                     webhook_receiver):
    managing = await make_app_key(app, client, "did:plc:alice", "managing.example.com")
    stranger = await make_app_key(app, client, "did:plc:dave", "stranger.example.com")
    await make_community(app, COMMUNITY, "open")
    await allow_app(app, COMMUNITY, managing["appId"], manage=True)
    await hide_roster(app)
    hooks = {}
    for made in (managing, stranger):
        hooks[made["appId"]] = webhook_receiver()
        resp = await client.post("/api/v1/webhooks", api_key=made["apiKey"],
                                 json={"url": hooks[made["appId"]].url, "events": ["poll.opened"]})
        assert resp.status == 201, resp.text
    cursors = {m["appId"]: await start_cursor(client, m["apiKey"]) for m in (managing, stranger)}

    async with connect(server, managing["apiKey"], params={"cursor": cursors[managing["appId"]]}) as ws_m, \
            connect(server, stranger["apiKey"], params={"cursor": cursors[stranger["appId"]]}) as ws_s:
        # `voterDid` is in no schema: it looks like a person, so it is one (private by default)
        event_id = await open_poll(app, voterDid="did:plc:voter")
        [live_m] = await receive(ws_m, 1)
        [live_s] = await receive(ws_s, 1)
    await settle(app)

    whole = {"pollId": "p1", "question": "Lunch?", "creatorDid": CREATOR, "creatorHandle": "carol.test",
             "labellerDid": "did:plc:labeller",
             "communityDid": COMMUNITY, "voterDid": "did:plc:voter"}
    without_people = {"pollId": "p1", "question": "Lunch?", "labellerDid": "did:plc:labeller",
                      "communityDid": COMMUNITY}
    for made, expected in ((managing, whole), (stranger, without_people)):
        [delivered] = hooks[made["appId"]].requests
        resp = await client.get("/api/v1/events", api_key=made["apiKey"], params={"cursor": cursors[made["appId"]]})
        [pulled] = resp.json()["events"]
        live = live_m if made is managing else live_s
        for way, event in (("webhook", delivered.json()), ("pull", pulled), ("websocket", live)):
            assert event["type"] == "poll.opened", way
            assert event["data"] == expected, way
        assert pulled["id"] == live["id"] == event_id
    assert CREATOR.encode() not in hooks[stranger["appId"]].requests[0].body
    assert b"carol.test" not in hooks[stranger["appId"]].requests[0].body


async def test_a_public_roster_shows_the_person_to_every_app(app, client):
    stranger = await make_app_key(app, client, "did:plc:dave", "stranger.example.com")
    await make_community(app, COMMUNITY, "open")
    cursor = await start_cursor(client, stranger["apiKey"])
    await open_poll(app)
    resp = await client.get("/api/v1/events", api_key=stranger["apiKey"], params={"cursor": cursor})
    assert resp.json()["events"][0]["data"]["creatorDid"] == CREATOR


def test_an_undeclared_did_field_stops_start_up_naming_the_kind_and_the_field(tmp_path, io_loop):
    voted = EventKind("poll.voted", "A member voted.",
                      obj({"pollId": STRING, "voterDid": STRING, "communityDid": DID}, ["pollId"]))

    class Votes:
        @hookimpl
        def cr_event_kinds(self) -> list[EventKind]:
            return [voted]

    config, pm = build_config(tmp_path, {}, (Votes(),))
    with pytest.raises(DeclarationError, match=r"event kind 'poll\.voted' whose data has the field 'voterDid'"):
        io_loop.run_sync(lambda: create_app(config, pm, clock=FakeClock()))
    assert not config.database_path.exists()


@pytest.mark.parametrize(("kind", "message"), [
    # a DID by its schema, whatever its name
    (EventKind("poll.closed", "x", obj({"closedBy": DID})), r"'poll\.closed' whose data has the field 'closedBy'"),
    (EventKind("poll.closed", "x", obj({"voters": {"type": "array", "items": DID}})), r"the field 'voters'"),
    (EventKind("poll.closed", "x", obj({"byDid": STRING}), person_keys=("byDid",), not_person_keys=("byDid",)),
     r"'byDid' both a person key and not one"),
    (EventKind("poll.closed", "x", obj({"byDid": STRING}), person_keys="byDid"), r"person_keys='byDid': a tuple"),
])
def test_person_key_declarations_are_checked(kind, message):
    class P:
        @hookimpl
        def cr_event_kinds(self) -> list[EventKind]:
            return [kind]

    pm = build_plugin_manager(load_entry_points=False)
    pm.register(P(), name="P")
    with pytest.raises(DeclarationError, match=message):
        collect(pm)


def test_the_built_ins_declare_their_person_keys():
    declared = collect(build_plugin_manager(load_entry_points=False))
    kinds = declared.event_kinds
    assert kinds["record.created"].person_keys == ("userDid",)
    assert kinds["member.banned"].about_people and "bannedBy" in kinds["member.banned"].person_keys
    assert {"changedBy", "holders"} <= set(kinds["member.roles_changed"].person_keys)
    assert "reporterDid" in kinds["report.created"].person_keys
    import daemon.runtime.events
    assert not hasattr(daemon.runtime.events, "PERSON_KEYS")


def test_an_event_of_a_kind_no_longer_declared_keeps_only_what_cannot_name_a_person():
    data = {"pollId": "p1", "someoneDid": "did:plc:x", "voters": ["did:plc:a"], "communityDid": COMMUNITY}
    assert event_data_for(None, data, sees_people=False) == {"pollId": "p1", "communityDid": COMMUNITY}
    assert event_data_for(None, data, sees_people=True) == data
