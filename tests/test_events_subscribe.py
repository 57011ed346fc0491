"""The WebSocket /api/v1/events/subscribe, through the `websockets` client as an app would use
it: refusals before the upgrade, replay then live with no gap and no duplicate, slow
consumers closed with 4008 and resuming without loss, 1001 at shutdown, pings, a restart
(docs/events.md)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
import websockets
from tornado.testing import bind_unused_port

from commonroom_testing.http import serve_app
from daemon.runtime.app import create_app
from tests.conftest import build_config
from tests.fixtures_webhooks import LOOPBACK_TARGETS, emit_events, make_app_key, make_community

COMMUNITY = "did:plc:community1"


@pytest.fixture
def config_overrides():
    return {**LOOPBACK_TARGETS, "events": {"subscriber_buffer_bytes": 65536, "ping_interval_seconds": 5,
                                           "max_subscribers_per_app": 3},
            "metrics": {"allow_from": ["127.0.0.1/32"]}}


def ws_url(server: Any, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"ws://127.0.0.1:{server.port}/api/v1/events/subscribe" + (f"?{query}" if query else "")


def connect(server: Any, key: str | None, **kw: Any) -> Any:
    params = kw.pop("params", {})
    headers = {"X-Api-Key": key} if key else {}
    return websockets.connect(ws_url(server, **params), additional_headers=headers, proxy=None,
                              compression=None, **kw)


async def receive(ws: Any, count: int, timeout: float = 10) -> list[dict[str, Any]]:
    out = []
    async with asyncio.timeout(timeout):
        while len(out) < count:
            out.append(json.loads(await ws.recv()))
    return out


async def start_cursor(client: Any, key: str) -> str:
    resp = await client.get("/api/v1/events", api_key=key)
    return resp.json()["cursor"]


async def refusal(server: Any, key: str | None, **params: str) -> tuple[int, dict[str, Any]]:
    with pytest.raises(websockets.InvalidStatus) as info:
        async with connect(server, key, params=params):
            pass
    response = info.value.response
    return response.status_code, json.loads(response.body)


async def test_refused_before_the_upgrade_without_a_valid_key_or_with_bad_parameters(app, client, server):
    key = (await make_app_key(app, client))["apiKey"]
    assert await refusal(server, None) == (401, {"error": "unauthorized", "message":
                                                 "This route needs an API key in the X-Api-Key header."})
    status, body = await refusal(server, "cr_" + "0" * 64)
    assert (status, body["error"]) == (401, "invalid_api_key")
    status, body = await refusal(server, key, cursor="garbage!")
    assert (status, body["error"]) == (400, "invalid_cursor")
    status, body = await refusal(server, key, kinds="member.vanished")
    assert (status, body["error"]) == (400, "unknown_kind") and "member.vanished" in body["message"]
    plain = await client.get("/api/v1/events/subscribe", api_key=key)
    assert plain.status == 426 and plain.json()["error"] == "upgrade_required"


async def test_a_subscriber_gets_a_live_event_within_a_second(app, client, server):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    async with connect(server, key) as ws:
        await asyncio.sleep(0.1)  # the subscription is open and live (no cursor: from now)
        began = time.monotonic()
        [event_id] = await emit_events(app, "member.joined", COMMUNITY, data={"memberDid": "did:plc:joe"})
        [event] = await receive(ws, 1, timeout=1)
        assert time.monotonic() - began < 1
    assert event["id"] == event_id and event["type"] == "member.joined"
    assert event["data"] == {"memberDid": "did:plc:joe", "communityDid": COMMUNITY}
    assert set(event) == {"id", "type", "timestamp", "data", "cursor"}


async def test_replay_then_live_with_no_gap_and_no_duplicate_while_events_keep_coming(app, client, server):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    cursor = await start_cursor(client, key)
    ids = await emit_events(app, "member.joined", COMMUNITY, count=2500)  # a backlog of 3 reads

    async def keep_emitting() -> None:
        for _ in range(40):
            ids.extend(await emit_events(app, "member.left", COMMUNITY, count=5))
            await asyncio.sleep(0.005)

    async with connect(server, key, params={"cursor": cursor}) as ws:
        emitting = asyncio.ensure_future(keep_emitting())
        got = await receive(ws, 2500 + 200, timeout=20)
        await emitting
        await asyncio.sleep(0.2)
        with pytest.raises(TimeoutError):
            await receive(ws, 1, timeout=0.3)  # nothing more, nothing twice
    assert [e["id"] for e in got] == ids


async def test_filters_apply_to_replay_and_live(app, client, server):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    await make_community(app, "did:plc:elsewhere")
    cursor = await start_cursor(client, key)
    early = await emit_events(app, "member.left", COMMUNITY)
    await emit_events(app, "member.joined", COMMUNITY)
    await emit_events(app, "member.left", "did:plc:elsewhere")
    async with connect(server, key, params={"cursor": cursor, "kinds": "member.left",
                                            "communityDid": COMMUNITY}) as ws:
        replayed = await receive(ws, 1)
        await emit_events(app, "member.joined", COMMUNITY)
        late = await emit_events(app, "member.left", COMMUNITY)
        live = await receive(ws, 1)
    assert [e["id"] for e in replayed + live] == early + late


async def test_a_slow_consumer_is_closed_with_4008_and_resumes_without_loss(app, client, server):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    padding = "x" * 2000
    stream = app.extensions["events"]
    # max_queue=1: the client stops reading from the socket once one message waits in it.
    async with connect(server, key, max_queue=1) as ws:
        await asyncio.sleep(0.1)
        ids: list[str] = []
        # 50 KB a commit, under the 64 KiB bound: a consumer that keeps up is never cut off;
        # this one stops reading, the socket buffers fill, and then the bound is passed.
        while stream.subscribers and len(ids) < 20_000:
            ids += await emit_events(app, "member.joined", COMMUNITY, count=25, data={"padding": padding})
            await asyncio.sleep(0)
        assert not stream.subscribers
        got = []
        with pytest.raises(websockets.ConnectionClosed):
            while True:
                got.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
        assert ws.close_code == 4008
        assert "slow consumer" in ws.close_reason
    assert 0 < len(got) < len(ids)
    assert [e["id"] for e in got] == ids[:len(got)]
    # It reconnects with its last cursor and gets the rest, nothing lost or repeated.
    async with connect(server, key, params={"cursor": got[-1]["cursor"]}) as ws:
        rest = await receive(ws, len(ids) - len(got), timeout=30)
    assert [e["id"] for e in got + rest] == ids
    metrics = (await client.get("/metrics")).text
    assert "commonroom_events_slow_consumer_closes_total 1.0" in metrics
    [sent] = [line.split()[1] for line in metrics.splitlines() if line.startswith("commonroom_events_sent_total ")]
    assert float(sent) >= len(ids)


async def test_shutdown_closes_subscribers_with_1001(app, client, server):
    key = (await make_app_key(app, client))["apiKey"]
    async with connect(server, key) as ws:
        await asyncio.sleep(0.1)
        app.begin_stopping()
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)
        assert ws.close_code == 1001


async def test_a_subscriber_that_never_answers_pings_is_closed(app, client, server):
    key = (await make_app_key(app, client))["apiKey"]
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write((f"GET /api/v1/events/subscribe HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                  f"Sec-WebSocket-Version: 13\r\nX-Api-Key: {key}\r\n\r\n").encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101")
    began = time.monotonic()
    frames = b""
    async with asyncio.timeout(25):
        while chunk := await reader.read(1024):  # a ping arrives (opcode 0x9); no pong goes back
            frames += chunk
    # A ping at 5 s, no pong by 10 s: a close frame (0x88); the connection ends once the
    # close handshake times out too.
    assert frames[:1] == b"\x89" and b"\x88" in frames
    assert 9 <= time.monotonic() - began < 19
    writer.close()
    assert not app.extensions["events"].subscribers


async def test_a_subscriber_resumes_after_a_restart_with_no_gap_and_no_duplicate(
        app, client, server, io_loop, state_dir, clock, config_overrides):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    async with connect(server, key) as ws:
        await asyncio.sleep(0.1)
        before = await emit_events(app, "member.joined", COMMUNITY, count=3)
        got = await receive(ws, 3)
        more = await emit_events(app, "member.joined", COMMUNITY, count=2)  # sent or not: the cursor says
        await app.shutdown()
        async with asyncio.timeout(5):
            async for message in ws:
                got.append(json.loads(message))
        assert ws.close_code == 1001
    # The daemon comes back on the same database; changes happened while it was down.
    config, pm = build_config(state_dir, config_overrides)
    second = await create_app(config, pm, clock=clock, repeat_periodic=False)
    try:
        while_down = await emit_events(second, "member.left", COMMUNITY, count=4)
        sock, port = bind_unused_port()
        serving = serve_app(io_loop, second, sock, port)
        srv = next(serving)
        async with connect(srv, key, params={"cursor": got[-1]["cursor"]}) as ws:
            after = await emit_events(second, "member.joined", COMMUNITY, count=2)
            expected = before + more + while_down + after
            got += await receive(ws, len(expected) - len(got))
            with pytest.raises(TimeoutError):
                await receive(ws, 1, timeout=0.3)
        srv.stop()
        await srv.close_all_connections()
    finally:
        await second.shutdown()
    assert [e["id"] for e in got] == expected


async def test_other_methods_get_the_json_error_shape(app, client):
    key = (await make_app_key(app, client))["apiKey"]
    resp = await client.post("/api/v1/events/subscribe", api_key=key, json={})
    assert resp.status == 405
    assert resp.json()["error"] == "method_not_allowed" and resp.headers["Content-Type"].startswith("application/json")


async def test_an_app_may_hold_only_so_many_subscriptions(app, client, server):
    key = (await make_app_key(app, client))["apiKey"]
    other = (await make_app_key(app, client, owner="did:plc:other", domain="other.example.com"))["apiKey"]
    limit = app.config.plugin("events").max_subscribers_per_app
    stream = app.extensions["events"]
    opened = [await connect(server, key).__aenter__() for _ in range(limit)]
    try:
        status, body = await refusal(server, key)
        assert (status, body["error"]) == (429, "too_many_subscribers")
        async with connect(server, other):  # another app is not affected
            pass
    finally:
        for ws in opened:
            await ws.close()
    await asyncio.sleep(0.2)
    assert stream.per_app == {} and not stream.subscribers


async def test_events_written_by_another_process_reach_subscribers(app, client, server):
    """The operator's CLI writes through its own connection: the hub's once-a-second read
    finds its events without a `cr_event` in this process."""
    import sqlite3
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    async with connect(server, key) as ws:
        await asyncio.sleep(0.1)
        other = sqlite3.connect(app.config.database_path, isolation_level=None)
        try:
            other.execute("INSERT INTO events (id, type, community_did, data, created_at, audience) "
                          "VALUES ('evt_fromthecli000000000000', 'member.removed', ?, '{\"memberDid\":\"did:plc:x\"}', "
                          "'2026-01-01T00:00:00.000Z', '*')", (COMMUNITY,))
        finally:
            other.close()
        [event] = await receive(ws, 1, timeout=3)
    assert event["id"] == "evt_fromthecli000000000000"
    assert event["data"] == {"memberDid": "did:plc:x", "communityDid": COMMUNITY}


def _cursor_of(value: Any) -> str:
    import base64
    return base64.urlsafe_b64encode(json.dumps([value]).encode()).rstrip(b"=").decode()


# Raw query strings (already percent-encoded as a client would send them).
BAD_QUERIES = {
    "cursor not UTF-8": "cursor=%ff%fe",
    "cursor with a control character": "cursor=abc%01def",
    "cursor huge": "cursor=" + "A" * 10000,
    "cursor negative": "cursor=" + _cursor_of(-5),
    "cursor a float": "cursor=" + _cursor_of(1.5),
    "cursor empty": "cursor=",
    "cursor far ahead": "cursor=" + _cursor_of(10 ** 12),
    "kinds not UTF-8": "kinds=%ff",
    "kinds unknown": "kinds=member.vanished",
    "kinds with a control character": "kinds=member.joined%00",
    "communityDid not UTF-8": "communityDid=%c3%28",
    "communityDid not a DID": "communityDid=alice",
    "communityDid huge": "communityDid=did:plc:" + "a" * 5000,
}


@pytest.mark.parametrize("what", sorted(BAD_QUERIES))
async def test_the_subscribe_route_refuses_every_bad_input_of_the_pull_route_the_same_way(app, client, server, what):
    key = (await make_app_key(app, client))["apiKey"]
    query = BAD_QUERIES[what]
    pulled = await client.get("/api/v1/events?" + query, api_key=key)
    assert 400 <= pulled.status < 500, (what, pulled.status, pulled.text)
    with pytest.raises(websockets.InvalidStatus) as info:
        async with websockets.connect(f"ws://127.0.0.1:{server.port}/api/v1/events/subscribe?{query}",
                                      additional_headers={"X-Api-Key": key}, proxy=None, compression=None):
            pass
    response = info.value.response
    body = json.loads(response.body)
    assert (response.status_code, body["error"]) == (pulled.status, pulled.json()["error"]), what
    if what.startswith("cursor") and what not in ("cursor far ahead", "cursor with a control character"):
        assert (response.status_code, body["error"]) == (400, "invalid_cursor"), what
    assert response.headers["Content-Type"].startswith("application/json")
