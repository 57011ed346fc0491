"""Webhook delivery against real HTTP receivers on loopback: Standard Webhooks signatures,
retries with backoff on the app clock, failure and disabling, isolation between apps
and communities, order per webhook, the delivery log, redelivery, and the SSRF guard
at delivery time."""

from __future__ import annotations

import time

import pytest

from daemon.base import FakeClock
from plugins.webhooks.settings import DEFAULT_RETRY_SCHEDULE
from tests.fixtures_webhooks import (LOOPBACK_TARGETS, allow_app, emit_events, make_app_key,
                                     make_community, settle, wait_until)

COMMUNITY = "did:plc:community1"


@pytest.fixture
def clock():
    # Receivers verify webhook-timestamp against the real time (5 minutes' tolerance).
    return FakeClock(start=time.time())


@pytest.fixture
def config_overrides():
    return LOOPBACK_TARGETS


async def subscribe(client, key, url, events=("member.joined",), **extra):
    resp = await client.post("/api/v1/webhooks", api_key=key,
                             json={"url": url, "events": list(events), **extra})
    assert resp.status == 201, resp.text
    return resp.json()


async def deliveries(client, key, wid, **params):
    resp = await client.get(f"/api/v1/webhooks/{wid}/deliveries", api_key=key, params=params)
    assert resp.status == 200, resp.text
    return resp.json()["deliveries"]


async def test_delivery_is_signed_and_verifies_with_standardwebhooks(app, client, receiver):
    created = await make_app_key(app, client)
    await make_community(app, COMMUNITY)
    rec = receiver()
    hook = await subscribe(client, created["apiKey"], rec.url)
    rec.secrets = [hook["secret"]]
    [event_id] = await emit_events(app, "member.joined", COMMUNITY, data={"memberDid": "did:plc:joe"})
    await wait_until(lambda: rec.requests, what="a delivery")
    got = rec.requests[0]
    assert got.verify_error is None
    assert got.verified == {"type": "member.joined", "timestamp": got.verified["timestamp"],
                            "data": {"memberDid": "did:plc:joe", "communityDid": COMMUNITY}}
    assert got.webhook_id == event_id
    assert got.headers["x-webhook-signature"] == got.headers["webhook-signature"]
    assert got.headers["content-type"] == "application/json"
    await settle(app)
    [row] = await deliveries(client, created["apiKey"], hook["webhookId"])
    assert row["status"] == "delivered" and row["attempts"] == 1 and row["statusCode"] == 200
    assert row["eventId"] == event_id and row["eventType"] == "member.joined"


async def test_delivery_reaches_the_receiver_without_waiting_for_a_poll(app, client, receiver):
    created = await make_app_key(app, client)
    await make_community(app, COMMUNITY)
    rec = receiver()
    await subscribe(client, created["apiKey"], rec.url)
    started = time.monotonic()
    await emit_events(app, "member.joined", COMMUNITY)
    await wait_until(lambda: rec.requests, timeout=2, what="a delivery")
    assert time.monotonic() - started < 1.0  # the poll interval is 30 s


@pytest.mark.parametrize("config_overrides", [{"webhooks": {**LOOPBACK_TARGETS["webhooks"],
                                                             "retry_schedule_seconds": [600]}}])
async def test_a_retry_goes_out_once_the_clock_reaches_it_with_no_other_nudge(app, client, clock, receiver):
    created = await make_app_key(app, client)
    await make_community(app, COMMUNITY)
    rec = receiver([503, 200])
    await subscribe(client, created["apiKey"], rec.url)
    await emit_events(app, "member.joined", COMMUNITY)
    await wait_until(lambda: len(rec.requests) == 1, what="the first attempt")
    await settle(app)
    # The dispatcher waits for the retry on the app's clock: moving the clock past the
    # backoff is all it takes (no rescan asked for, no poll interval waited out).
    clock.advance(600 * 1.25)
    await wait_until(lambda: len(rec.requests) == 2, what="the retry")
    assert rec.ids()[0] == rec.ids()[1]


async def test_server_errors_are_retried_with_the_same_webhook_id(app, client, clock, receiver):
    created = await make_app_key(app, client)
    key = created["apiKey"]
    await make_community(app, COMMUNITY)
    rec = receiver([500, 503, 200])
    hook = await subscribe(client, key, rec.url)
    rec.secrets = [hook["secret"]]
    [event_id] = await emit_events(app, "member.joined", COMMUNITY)
    await wait_until(lambda: len(rec.requests) == 1, what="first attempt")
    await settle(app)
    [row] = await deliveries(client, key, hook["webhookId"])
    assert row["status"] == "pending" and row["attempts"] == 1 and row["statusCode"] == 500
    assert row["error"].startswith("HTTP 500") and row["nextAttemptAt"]
    await settle(app)
    assert len(rec.requests) == 1  # no retry before the backoff has passed on the clock
    for n in (2, 3):
        clock.advance(DEFAULT_RETRY_SCHEDULE[n - 2] * 1.25)
        await settle(app)
        assert len(rec.requests) == n
    assert rec.ids() == [event_id] * 3
    assert all(r.verify_error is None for r in rec.requests)
    assert len({r.headers["webhook-timestamp"] for r in rec.requests}) == 3
    [row] = await deliveries(client, key, hook["webhookId"])
    assert row["status"] == "delivered" and row["attempts"] == 3 and row["statusCode"] == 200
    assert row["error"] is None


async def test_gone_is_failed_without_retry(app, client, clock, receiver):
    created = await make_app_key(app, client)
    key = created["apiKey"]
    await make_community(app, COMMUNITY)
    rec = receiver([410])
    hook = await subscribe(client, key, rec.url)
    await emit_events(app, "member.joined", COMMUNITY)
    await wait_until(lambda: rec.requests, what="the attempt")
    await settle(app)
    clock.advance(2 * 86400)
    await settle(app)
    assert len(rec.requests) == 1
    [row] = await deliveries(client, key, hook["webhookId"])
    assert row["status"] == "failed" and row["attempts"] == 1 and row["statusCode"] == 410
    assert row["error"].startswith("HTTP 410")
    state = (await client.get(f"/api/v1/webhooks/{hook['webhookId']}", api_key=key)).json()
    assert state["active"] is True  # one refused delivery does not disable the webhook


async def test_receiver_down_past_the_retry_budget_disables_the_webhook(app, client, clock, receiver):
    created = await make_app_key(app, client)
    key = created["apiKey"]
    await make_community(app, COMMUNITY)
    rec = receiver()
    url = rec.url
    rec.stop()  # nothing listens on the port: connection refused
    hook = await subscribe(client, key, url)
    wid = hook["webhookId"]
    await emit_events(app, "member.joined", COMMUNITY, count=2)
    await settle(app)
    for delay in DEFAULT_RETRY_SCHEDULE:
        row = (await deliveries(client, key, wid))[-1]
        assert row["status"] == "pending", row
        assert "refused" in row["error"]
        clock.advance(delay * 1.25)
        await settle(app)
    first, second = (await deliveries(client, key, wid))[::-1]
    assert first["status"] == "failed" and first["attempts"] == len(DEFAULT_RETRY_SCHEDULE) + 1
    assert "gave up" in first["error"]
    assert second["status"] == "pending" and second["attempts"] == 0  # order: never sent before the first
    state = (await client.get(f"/api/v1/webhooks/{wid}", api_key=key)).json()
    assert state["active"] is False
    assert "failed 11 times" in state["disabledReason"] and "refused" in state["disabledReason"]
    assert state["disabledAt"]
    listed = (await client.get("/api/v1/webhooks", api_key=key)).json()["webhooks"]
    assert listed[0]["disabledReason"] == state["disabledReason"]
    # New events are not queued for a disabled webhook; re-enabling resumes the queue.
    await emit_events(app, "member.joined", COMMUNITY)
    assert len(await deliveries(client, key, wid)) == 2
    again = receiver()
    await client.put(f"/api/v1/webhooks/{wid}", api_key=key, json={"url": again.url, "active": True})
    await settle(app)
    assert len(again.requests) == 1
    state = (await client.get(f"/api/v1/webhooks/{wid}", api_key=key)).json()
    assert state["active"] is True and state["disabledReason"] is None


async def test_order_per_webhook_follows_event_order(app, client, clock, receiver):
    created = await make_app_key(app, client)
    key = created["apiKey"]
    await make_community(app, COMMUNITY)
    rec = receiver([500, 200])
    await subscribe(client, key, rec.url)
    ids = await emit_events(app, "member.joined", COMMUNITY, count=5)
    await wait_until(lambda: rec.requests, what="first attempt")
    await settle(app)
    assert rec.ids() == ids[:1]  # event 2 waits while event 1 is being retried
    clock.advance(60)
    await settle(app)
    assert rec.ids() == [ids[0]] + ids


async def test_app_never_hears_of_another_apps_private_community(app, client, receiver):
    a = await make_app_key(app, client, "did:plc:alice", "a.example.com")
    b = await make_app_key(app, client, "did:plc:bob", "b.example.com")
    c = await make_app_key(app, client, "did:plc:carol", "c.example.com")
    await make_community(app, "did:plc:bprivate", "private", creator_app_id=b["appId"])
    await make_community(app, "did:plc:open", "open", creator_app_id=b["appId"])
    await allow_app(app, "did:plc:bprivate", c["appId"])
    recs = {name: receiver() for name in "abc"}
    for name, made in (("a", a), ("b", b), ("c", c)):
        await subscribe(client, made["apiKey"], recs[name].url)
    private = await emit_events(app, "member.joined", "did:plc:bprivate")
    public = await emit_events(app, "member.joined", "did:plc:open")
    await settle(app)
    assert recs["a"].ids() == public
    assert recs["b"].ids() == private + public
    assert recs["c"].ids() == private + public  # allowed by the community's admins


async def test_scoped_webhook_hears_only_its_community_and_kinds(app, client, receiver):
    created = await make_app_key(app, client)
    key = created["apiKey"]
    await make_community(app, "did:plc:one")
    await make_community(app, "did:plc:two")
    scoped, kinds = receiver(), receiver()
    await subscribe(client, key, scoped.url, events=["member.joined", "member.left"],
                    communityDid="did:plc:one")
    await subscribe(client, key, kinds.url, events=["member.left"])
    one = await emit_events(app, "member.joined", "did:plc:one")
    await emit_events(app, "member.joined", "did:plc:two")
    left_two = await emit_events(app, "member.left", "did:plc:two")
    left_one = await emit_events(app, "member.left", "did:plc:one")
    await settle(app)
    assert scoped.ids() == one + left_one
    assert kinds.ids() == left_two + left_one
    assert {r.json()["data"]["communityDid"] for r in scoped.requests} == {"did:plc:one"}


async def test_a_rolled_back_change_delivers_nothing(app, client, receiver):
    from daemon.runtime.events import emit_tx
    created = await make_app_key(app, client)
    await make_community(app, COMMUNITY)
    rec = receiver()
    await subscribe(client, created["apiKey"], rec.url)
    with pytest.raises(RuntimeError):
        async with app.db.transaction("test.rollback") as tx:
            await emit_tx(app, tx, "member.joined", community_did=COMMUNITY, data={"memberDid": "x"})
            raise RuntimeError("the change failed")
    kept = await emit_events(app, "member.joined", COMMUNITY)
    await settle(app)
    assert rec.ids() == kept


async def test_redeliver_sends_the_same_event_again(app, client, receiver):
    created = await make_app_key(app, client)
    key = created["apiKey"]
    await make_community(app, COMMUNITY)
    rec = receiver([410, 200])
    hook = await subscribe(client, key, rec.url)
    rec.secrets = [hook["secret"]]
    [event_id] = await emit_events(app, "member.joined", COMMUNITY)
    await wait_until(lambda: rec.requests, what="first attempt")
    await settle(app)
    [failed] = await deliveries(client, key, hook["webhookId"])
    assert failed["status"] == "failed"
    resp = await client.post(f"/api/v1/webhooks/{hook['webhookId']}/deliveries/{failed['deliveryId']}"
                             "/redeliver", api_key=key)
    assert resp.status == 202 and resp.json()["redeliveryOf"] == failed["deliveryId"]
    await settle(app)
    assert rec.ids() == [event_id, event_id]
    assert rec.requests[1].verify_error is None
    newest = (await deliveries(client, key, hook["webhookId"], status="delivered"))
    assert [d["deliveryId"] for d in newest] == [resp.json()["deliveryId"]]
    missing = await client.post(f"/api/v1/webhooks/{hook['webhookId']}/deliveries/999999/redeliver",
                                api_key=key)
    assert missing.status == 404


async def test_delivery_log_is_paginated_newest_first(app, client, receiver):
    created = await make_app_key(app, client)
    key = created["apiKey"]
    await make_community(app, COMMUNITY)
    rec = receiver()
    hook = await subscribe(client, key, rec.url)
    ids = await emit_events(app, "member.joined", COMMUNITY, count=5)
    await settle(app)
    page1 = (await client.get(f"/api/v1/webhooks/{hook['webhookId']}/deliveries", api_key=key,
                              params={"limit": 3})).json()
    page2 = (await client.get(f"/api/v1/webhooks/{hook['webhookId']}/deliveries", api_key=key,
                              params={"limit": 3, "cursor": page1["cursor"]})).json()
    assert [d["eventId"] for d in page1["deliveries"] + page2["deliveries"]] == ids[::-1]
    assert "cursor" not in page2


async def test_rotated_secret_and_the_previous_one_both_verify_during_the_overlap(app, client, receiver):
    created = await make_app_key(app, client)
    key = created["apiKey"]
    await make_community(app, COMMUNITY)
    rec = receiver()
    hook = await subscribe(client, key, rec.url)
    new = (await client.post(f"/api/v1/webhooks/{hook['webhookId']}/rotate-secret", api_key=key)).json()
    await emit_events(app, "member.joined", COMMUNITY)
    await settle(app)
    [got] = rec.requests
    for secret in (new["secret"], hook["secret"]):
        rec.secrets = [secret]
        assert rec.verify(got.body, got.headers)[1] is None
    rec.secrets = ["whsec_" + "A" * 43 + "="]
    assert rec.verify(got.body, got.headers)[1] is not None


class TestDefaultTargets:
    """The default config: loopback and private addresses refused at delivery time."""

    @pytest.fixture
    def config_overrides(self):
        return {"webhooks": {"allow_http": True}}  # plain http, but no address allowlist

    async def test_dns_rebinding_to_loopback_is_refused_at_delivery(self, app, client, receiver):
        created = await make_app_key(app, client)
        key = created["apiKey"]
        await make_community(app, COMMUNITY)
        rec = receiver()
        answers = {"rebind.example.com": ["93.184.216.34"]}

        async def resolve(host, port):
            return answers[host]

        app.webhooks.dispatcher.guard.resolver = resolve
        hook = await subscribe(client, key, f"http://rebind.example.com:{rec.port}/hook")
        answers["rebind.example.com"] = ["127.0.0.1"]
        await emit_events(app, "member.joined", COMMUNITY)
        await settle(app)
        answers["rebind.example.com"] = ["10.0.0.1"]
        app.webhooks.dispatcher.kick()
        await settle(app)
        assert rec.requests == []
        [row] = await deliveries(client, key, hook["webhookId"])
        # The app learns that its host is refused, never what the name resolves to (issue 22).
        assert row["status"] == "pending" and "does not resolve to a public address" in row["error"]
        assert "127.0.0.1" not in row["error"] and "10.0.0.1" not in row["error"]

    async def test_loopback_and_private_urls_refused_at_creation(self, app, client, receiver):
        key = (await make_app_key(app, client))["apiKey"]
        for url in ("http://127.0.0.1:9/hook", "http://10.0.0.1/hook"):
            resp = await client.post("/api/v1/webhooks", api_key=key,
                                      json={"url": url, "events": ["member.joined"]})
            assert resp.status == 400 and "refused address" in resp.json()["message"]


async def test_busy_webhooks_get_every_event_once_in_order(app, client, receiver):
    created = await make_app_key(app, client)
    key = created["apiKey"]
    await make_community(app, COMMUNITY)
    recs = [receiver() for _ in range(4)]
    for rec in recs:
        await subscribe(client, key, rec.url)
    ids: list[str] = []
    for _ in range(40):  # commits interleave with deliveries in flight
        ids += await emit_events(app, "member.joined", COMMUNITY, count=10)
    await wait_until(lambda: all(len(r.requests) >= len(ids) for r in recs), timeout=30,
                     what="all deliveries")
    await settle(app)
    for rec in recs:
        assert rec.ids() == ids


async def test_deactivated_apps_webhooks_fall_silent(app, client, clock, receiver):
    from tests.helpers import login_as, register_app
    owner = await login_as(app, "did:plc:owner")
    created = await register_app(client, owner)
    await make_community(app, COMMUNITY)
    rec = receiver([500, 200])
    await subscribe(client, created["apiKey"], rec.url)
    await emit_events(app, "member.joined", COMMUNITY)
    await wait_until(lambda: rec.requests, what="first attempt")
    assert (await client.delete(f"/api/v1/apps/{created['appId']}", session=owner)).status == 200
    await emit_events(app, "member.joined", COMMUNITY)
    clock.advance(3600)
    await settle(app)
    assert len(rec.requests) == 1


async def test_shutdown_lets_the_request_in_flight_finish_and_keeps_the_rest(app, client, receiver):
    created = await make_app_key(app, client)
    key = created["apiKey"]
    await make_community(app, COMMUNITY)
    rec = receiver()
    rec.delay = 0.3
    hook = await subscribe(client, key, rec.url)
    ids = await emit_events(app, "member.joined", COMMUNITY, count=3)
    await wait_until(lambda: rec.started == 1, what="a request in flight")
    await app.webhooks.dispatcher.stop()
    assert rec.ids() == ids[:1]
    rows = {d["eventId"]: d["status"] for d in await deliveries(client, key, hook["webhookId"])}
    assert rows == {ids[0]: "delivered", ids[1]: "pending", ids[2]: "pending"}


class TestShutdownTimeout:
    @pytest.fixture
    def config_overrides(self):
        return {**LOOPBACK_TARGETS, "server": {"shutdown_timeout_seconds": 0.2}}

    async def test_a_request_slower_than_the_shutdown_timeout_stays_pending(self, app, client, receiver):
        created = await make_app_key(app, client)
        await make_community(app, COMMUNITY)
        rec = receiver()
        rec.delay = 2.0
        await subscribe(client, created["apiKey"], rec.url)
        await emit_events(app, "member.joined", COMMUNITY)
        await wait_until(lambda: rec.started == 1, what="a request in flight")
        path = app.db.path
        await app.shutdown()
        from store.db import Database
        db = Database(path)
        await db.open()
        try:
            rows = await db.fetchall("SELECT status, attempts FROM webhook_deliveries")
        finally:
            await db.close()
        assert [tuple(r) for r in rows] == [("pending", 0)]  # sent again after the next start


class TestPureDefaultConfig:
    @pytest.fixture
    def config_overrides(self):
        return {}

    async def test_rebinding_to_loopback_or_private_refused_at_delivery(self, app, client, clock):
        created = await make_app_key(app, client)
        key = created["apiKey"]
        await make_community(app, COMMUNITY)
        answers = {"rebind.example.com": ["93.184.216.34"]}

        async def resolve(host, port):
            return answers[host]

        app.webhooks.dispatcher.guard.resolver = resolve
        hook = await subscribe(client, key, "https://rebind.example.com/hook")
        for address, words in (("127.0.0.1", "loopback"), ("10.0.0.1", "private")):
            answers["rebind.example.com"] = [address]
            if address == "127.0.0.1":
                await emit_events(app, "member.joined", COMMUNITY)
            else:
                clock.advance(60)
            await settle(app)
            [row] = await deliveries(client, key, hook["webhookId"])
            assert row["status"] == "pending"
            assert row["error"] == ("refused to connect to rebind.example.com: "
                                    "rebind.example.com does not resolve to a public address")
            assert address not in row["error"] and words not in row["error"]
