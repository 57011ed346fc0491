"""Retention of the events outbox (`events.retention_days`): old events are pruned in
batches, never one a pending webhook delivery still needs, and a cursor older than what is
kept answers 410 `cursor_expired` naming the oldest cursor (docs/events.md)."""

from __future__ import annotations

import time

import pytest

from daemon.base import FakeClock
from plugins.events.retention import prune_events
from daemon.runtime import events as events_store
from tests.fixtures_webhooks import LOOPBACK_TARGETS, emit_events, make_app_key, make_community, wait_until

COMMUNITY = "did:plc:community1"
DAY = 86400


@pytest.fixture
def clock():
    return FakeClock(start=time.time())


@pytest.fixture
def config_overrides():
    return {**LOOPBACK_TARGETS, "events": {"retention_days": 7}}


async def pull(client, key, expect=200, **params):
    resp = await client.get("/api/v1/events", api_key=key, params=params)
    assert resp.status == expect, resp.text
    return resp.json()


async def test_events_older_than_retention_are_pruned_and_their_cursors_expire(app, client, clock):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    start = (await pull(client, key))["cursor"]
    old = await emit_events(app, "member.joined", COMMUNITY, count=2500)
    clock.advance(5 * DAY)
    kept = await emit_events(app, "member.left", COMMUNITY, count=3)
    middle = (await pull(client, key, cursor=start, limit=1000))["events"][-1]["cursor"]
    clock.advance(3 * DAY)  # the first events are 8 days old, the others 3

    assert await prune_events(app, batch=1000) == 2500
    assert await events_store.get_event(app.db, old[-1]) is None
    assert await events_store.get_event(app.db, kept[0]) is not None

    for cursor in (start, middle):
        body = await pull(client, key, 410, cursor=cursor)
        assert body["error"] == "cursor_expired"
        oldest = body["details"]["oldestCursor"]
        assert oldest in body["message"]
    # The oldest cursor replays everything kept.
    assert [e["id"] for e in (await pull(client, key, cursor=oldest))["events"]] == kept
    # Nothing more to prune.
    assert await prune_events(app) == 0


async def test_an_event_a_pending_webhook_delivery_needs_is_kept_and_so_is_everything_after(
        app, client, clock, receiver):
    created = await make_app_key(app, client)
    await make_community(app, COMMUNITY)
    rec = receiver([500])  # never accepts: the delivery stays pending, waiting for a retry
    resp = await client.post("/api/v1/webhooks", api_key=created["apiKey"],
                             json={"url": rec.url, "events": ["member.left"]})
    assert resp.status == 201, resp.text
    before = await emit_events(app, "member.joined", COMMUNITY, count=5)
    [needed] = await emit_events(app, "member.left", COMMUNITY)
    after = await emit_events(app, "member.joined", COMMUNITY, count=5)
    await wait_until(lambda: rec.requests, what="a first attempt")
    clock.advance(30 * DAY)

    assert await prune_events(app) == 5
    assert [await events_store.get_event(app.db, e) is not None for e in before] == [False] * 5
    for e in [needed, *after]:
        assert await events_store.get_event(app.db, e) is not None


async def test_the_oldest_cursor_is_named_when_everything_was_pruned(app, client, clock):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    start = (await pull(client, key))["cursor"]
    await emit_events(app, "member.joined", COMMUNITY, count=3)
    now = (await pull(client, key))["cursor"]
    clock.advance(8 * DAY)
    assert await prune_events(app) == 3
    body = await pull(client, key, 410, cursor=start)
    assert body["details"]["oldestCursor"] == now
    assert (await pull(client, key, cursor=now))["events"] == []



async def test_a_subscription_with_an_expired_cursor_is_refused_before_the_upgrade(app, client, server, clock):
    import json

    import websockets
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    start = (await pull(client, key))["cursor"]
    await emit_events(app, "member.joined", COMMUNITY, count=3)
    clock.advance(8 * DAY)
    await prune_events(app)
    url = f"ws://127.0.0.1:{server.port}/api/v1/events/subscribe?cursor={start}"
    with pytest.raises(websockets.InvalidStatus) as info:
        async with websockets.connect(url, additional_headers={"X-Api-Key": key}, proxy=None):
            pass
    assert info.value.response.status_code == 410
    assert json.loads(info.value.response.body)["error"] == "cursor_expired"
