"""The event stream's acceptance against the devnet: real joins and leaves through the API,
read back by pull and by a WebSocket subscriber (docs/events.md)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import websockets

from tests.fixtures_communities import Api, devnet_module_fixtures

pytestmark = pytest.mark.pds

config_overrides, extra_plugins = devnet_module_fixtures()


async def test_an_app_that_was_away_pulls_exactly_the_50_changes_in_order(app, client, people, recorder):
    api = await Api.make(app, client)
    alice = people("alice")
    did = (await api.create(alice, "Stream club"))["did"]
    other = (await api.create(alice, "Second club"))["did"]
    resp = await api.get("/api/v1/events")
    assert resp.status == 200, resp.text
    cursor = resp.json()["cursor"]  # the app "disconnects" here

    members = [people(f"m{i}")["did"] for i in range(5)]
    expected = []
    for round in range(5):
        for m in members:
            resp = await (api.join(did, m) if round % 2 == 0 else api.leave(did, m))
            assert resp.status in (200, 201), resp.text
            expected.append(("member.joined" if round % 2 == 0 else "member.left", m))

    # 25 more changes in another community the app may see.
    for round in range(5):
        for m in members:
            resp = await (api.join(other, m) if round % 2 == 0 else api.leave(other, m))
            assert resp.status in (200, 201), resp.text
            expected.append(("member.joined" if round % 2 == 0 else "member.left", m))

    resp = await api.get("/api/v1/events", cursor=cursor, kinds="member.joined,member.left", limit=1000)
    assert resp.status == 200, resp.text
    events = resp.json()["events"]
    assert [(e["type"], e["data"]["memberDid"]) for e in events] == expected
    assert len(events) == 50
    # The same events, with the same ids, as the service emitted them (and webhooks deliver).
    emitted = [e.id for e in recorder.events if e.type in ("member.joined", "member.left")
               and e.community_did in (did, other) and e.data["memberDid"] in members]
    assert [e["id"] for e in events] == emitted
    again = await api.get("/api/v1/events", cursor=resp.json()["cursor"], kinds="member.joined,member.left")
    assert again.json()["events"] == []


async def test_a_subscriber_gets_a_join_within_a_second(app, client, server, people):
    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    did = (await api.create(alice, "Live club"))["did"]
    url = f"ws://127.0.0.1:{server.port}/api/v1/events/subscribe?communityDid={did}"
    async with websockets.connect(url, additional_headers={"X-Api-Key": api.key}, proxy=None) as ws:
        await asyncio.sleep(0.1)
        resp = await api.join(did, bob["did"])
        assert resp.status == 201, resp.text
        answered = time.monotonic()
        event = json.loads(await asyncio.wait_for(ws.recv(), 1))
        assert time.monotonic() - answered < 1
    assert event["type"] == "member.joined"
    assert event["data"] == {"memberDid": bob["did"], "communityDid": did}
