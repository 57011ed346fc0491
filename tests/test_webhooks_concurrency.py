"""A webhook's `concurrency`: 1 (the default) sends one delivery at a time in event order;
N > 1 has up to N requests in flight at once and never more. The setting is validated,
returned and changeable, and failed attempts are still retried on the clock."""

from __future__ import annotations

import asyncio
import time

import pytest

from daemon.base import FakeClock
from plugins.webhooks.settings import DEFAULT_RETRY_SCHEDULE
from tests.fixtures_webhooks import LOOPBACK_TARGETS, emit_events, make_app_key, make_community, settle, wait_until

COMMUNITY = "did:plc:community1"


@pytest.fixture
def clock():
    return FakeClock(start=time.time())


@pytest.fixture
def config_overrides():
    return LOOPBACK_TARGETS


async def subscribe(client, key, url, **extra):
    resp = await client.post("/api/v1/webhooks", api_key=key,
                             json={"url": url, "events": ["member.joined"], **extra})
    assert resp.status == 201, resp.text
    return resp.json()


async def deliveries(client, key, wid):
    resp = await client.get(f"/api/v1/webhooks/{wid}/deliveries", api_key=key, params={"limit": 100})
    assert resp.status == 200, resp.text
    return resp.json()["deliveries"]


async def hold_until_in_flight(rec, count: int) -> None:
    """Wait until `count` requests wait at the receiver's gate, then let the loop run a few
    more turns: a request beyond `count` would arrive meanwhile."""
    await wait_until(lambda: rec.in_flight >= count, what=f"{count} requests in flight")
    for _ in range(20):
        await asyncio.sleep(0.005)


# ------------------------------------------------------------------ the setting


async def test_concurrency_defaults_to_1_and_can_be_set_and_changed(app, client, receiver):
    key = (await make_app_key(app, client))["apiKey"]
    rec = receiver()
    plain = await subscribe(client, key, rec.url)
    assert plain["concurrency"] == 1
    fast = await subscribe(client, key, rec.url, concurrency=8)
    assert fast["concurrency"] == 8
    got = (await client.get(f"/api/v1/webhooks/{fast['webhookId']}", api_key=key)).json()
    assert got["concurrency"] == 8
    changed = await client.put(f"/api/v1/webhooks/{plain['webhookId']}", api_key=key, json={"concurrency": 32})
    assert changed.status == 200 and changed.json()["concurrency"] == 32
    untouched = await client.put(f"/api/v1/webhooks/{plain['webhookId']}", api_key=key, json={"active": True})
    assert untouched.json()["concurrency"] == 32
    listed = (await client.get("/api/v1/webhooks", api_key=key)).json()["webhooks"]
    assert {w["webhookId"]: w["concurrency"] for w in listed} == {plain["webhookId"]: 32, fast["webhookId"]: 8}


@pytest.mark.parametrize("value", [0, 33, -1, "4", 2.5, True, [2]])
async def test_concurrency_outside_1_to_32_or_not_a_whole_number_is_refused(app, client, receiver, value):
    key = (await make_app_key(app, client))["apiKey"]
    rec = receiver()
    resp = await client.post("/api/v1/webhooks", api_key=key,
                             json={"url": rec.url, "events": ["member.joined"], "concurrency": value})
    assert resp.status == 400 and "concurrency" in resp.text
    hook = await subscribe(client, key, rec.url)
    resp = await client.put(f"/api/v1/webhooks/{hook['webhookId']}", api_key=key, json={"concurrency": value})
    assert resp.status == 400 and "concurrency" in resp.text
    got = (await client.get(f"/api/v1/webhooks/{hook['webhookId']}", api_key=key)).json()
    assert got["concurrency"] == 1


# ------------------------------------------------------------------ sending


async def test_concurrency_1_sends_one_at_a_time_in_event_order_under_a_slow_receiver(app, client, receiver):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    rec = receiver()
    rec.gate = asyncio.Event()
    await subscribe(client, key, rec.url)
    ids = await emit_events(app, "member.joined", COMMUNITY, count=8)
    await hold_until_in_flight(rec, 1)
    assert rec.in_flight == 1 and rec.started == 1
    rec.gate.set()
    rec.delay = 0.02  # slow, but answering
    await wait_until(lambda: len(rec.requests) == len(ids), what="every delivery")
    await settle(app)
    assert rec.ids() == ids
    assert rec.peak == 1


async def test_concurrency_n_overlaps_up_to_n_requests_and_never_more(app, client, receiver):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    rec = receiver()
    rec.gate = asyncio.Event()
    hook = await subscribe(client, key, rec.url, concurrency=4)
    ids = await emit_events(app, "member.joined", COMMUNITY, count=30)
    await hold_until_in_flight(rec, 4)
    assert rec.in_flight == 4 and rec.started == 4
    # The first four are the oldest four: taken in event order.
    rec.gate.set()
    await wait_until(lambda: len(rec.requests) == len(ids), what="every delivery")
    await settle(app)
    assert sorted(rec.ids()) == sorted(ids) and len(set(rec.ids())) == len(ids)
    assert rec.peak == 4
    rows = await deliveries(client, key, hook["webhookId"])
    assert {(r["status"], r["attempts"]) for r in rows} == {("delivered", 1)}


async def test_raising_concurrency_on_a_webhook_applies_to_its_next_batch(app, client, receiver):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    rec = receiver()
    rec.gate = asyncio.Event()
    hook = await subscribe(client, key, rec.url)
    ids = await emit_events(app, "member.joined", COMMUNITY, count=12)
    await hold_until_in_flight(rec, 1)
    assert rec.in_flight == 1
    await client.put(f"/api/v1/webhooks/{hook['webhookId']}", api_key=key, json={"concurrency": 3})
    first_gate, rec.gate = rec.gate, asyncio.Event()  # later requests wait at a new gate
    first_gate.set()
    await hold_until_in_flight(rec, 3)
    assert rec.in_flight == 3
    rec.gate.set()
    await wait_until(lambda: len(set(rec.ids())) == len(ids), what="every delivery")
    await settle(app)
    assert set(rec.ids()) == set(ids)
    assert rec.peak == 3


async def test_with_concurrency_a_failed_attempt_is_retried_and_nothing_is_lost(app, client, clock, receiver):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    rec = receiver([503, 200])  # the first answer is 503, every later one 200
    rec.gate = asyncio.Event()
    hook = await subscribe(client, key, rec.url, concurrency=4)
    ids = await emit_events(app, "member.joined", COMMUNITY, count=10)
    await hold_until_in_flight(rec, 4)
    rec.gate.set()
    await wait_until(lambda: len(rec.requests) >= 4, what="the first answers")
    await settle(app)
    rows = await deliveries(client, key, hook["webhookId"])
    retrying = [r for r in rows if r["status"] == "pending" and r["attempts"] == 1]
    assert len(retrying) == 1 and retrying[0]["statusCode"] == 503
    sent_before_retry = len(rec.requests)
    # The webhook waits for the retry as a whole: no new delivery starts meanwhile.
    assert sent_before_retry < len(ids)
    await settle(app)
    assert len(rec.requests) == sent_before_retry
    clock.advance(DEFAULT_RETRY_SCHEDULE[0] * 1.25)
    await wait_until(lambda: set(rec.ids()) == set(ids), what="every delivery")
    await settle(app)
    rows = await deliveries(client, key, hook["webhookId"])
    assert {r["status"] for r in rows} == {"delivered"} and len(rows) == len(ids)
    retried = next(r for r in rows if r["deliveryId"] == retrying[0]["deliveryId"])
    assert retried["attempts"] == 2 and retried["statusCode"] == 200
    assert rec.ids().count(retried["eventId"]) == 2
    assert rec.peak <= 4
