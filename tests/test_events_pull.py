"""GET /api/v1/events: the events an app may see, in commit order after a cursor, with the
webhook deliveries' ids and bodies; long-polls; bad input (docs/events.md)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from plugins.webhooks.delivery import payload_body
from daemon.runtime import events as events_store
from tests.fixtures_webhooks import LOOPBACK_TARGETS, allow_app, emit_events, make_app_key, make_community

COMMUNITY = "did:plc:community1"
OTHER = "did:plc:community2"


@pytest.fixture
def config_overrides():
    return LOOPBACK_TARGETS


async def pull(client, key, expect=200, **params):
    resp = await client.get("/api/v1/events", api_key=key, params=params)
    assert resp.status == expect, resp.text
    return resp.json()


async def test_no_cursor_starts_at_now_and_the_cursor_returns_exactly_what_followed(app, client):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    await emit_events(app, "member.joined", COMMUNITY, count=5)  # before the app looked: not replayed
    first = await pull(client, key)
    assert first["events"] == []
    ids = []
    for i in range(50):  # 50 changes, one commit each, while the app is away
        ids += await emit_events(app, "member.joined" if i % 2 else "member.left", COMMUNITY,
                                 data={"memberDid": f"did:plc:m{i}"})
    page = await pull(client, key, cursor=first["cursor"])
    assert [e["id"] for e in page["events"]] == ids
    assert [e["data"]["memberDid"] for e in page["events"]] == [f"did:plc:m{i}" for i in range(50)]
    again = await pull(client, key, cursor=page["cursor"])
    assert again["events"] == [] and again["cursor"] == page["cursor"]


async def test_an_event_is_the_webhook_body_with_its_id_and_cursor(app, client):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    start = (await pull(client, key))["cursor"]
    [event_id] = await emit_events(app, "member.joined", COMMUNITY, data={"memberDid": "did:plc:joe"})
    [event] = (await pull(client, key, cursor=start))["events"]
    row = await events_store.get_event(app.db, event_id)
    webhook_body = json.loads(payload_body({"event_id": row["id"], "type": row["type"],
                                            "community_did": row["community_did"], "data": row["data"],
                                            "event_created_at": row["created_at"], "hide_people": 0}, app.event_kinds))
    assert {k: v for k, v in event.items() if k not in ("id", "cursor")} == webhook_body
    assert event["id"] == event_id
    assert event["data"] == {"memberDid": "did:plc:joe", "communityDid": COMMUNITY}
    # An event's own cursor resumes right after it.
    assert (await pull(client, key, cursor=event["cursor"]))["events"] == []


async def test_pages_of_up_to_1000_in_commit_order(app, client):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    start = (await pull(client, key))["cursor"]
    ids = await emit_events(app, "member.joined", COMMUNITY, count=2300)
    got, cursor, sizes = [], start, []
    while True:
        page = await pull(client, key, cursor=cursor, limit=1000)
        if not page["events"]:
            break
        sizes.append(len(page["events"]))
        got += [e["id"] for e in page["events"]]
        cursor = page["cursor"]
    assert got == ids and sizes == [1000, 1000, 300]


async def test_an_app_hears_only_what_it_could_see_when_the_event_was_committed(app, client):
    creator = await make_app_key(app, client, domain="creator.example.com")
    other = await make_app_key(app, client, owner="did:plc:other", domain="other.example.com")
    await make_community(app, COMMUNITY, type="private", creator_app_id=creator["appId"])
    await make_community(app, OTHER)
    starts = {k: (await pull(client, k))["cursor"] for k in (creator["apiKey"], other["apiKey"])}
    hidden = await emit_events(app, "member.joined", COMMUNITY, count=2)
    public = await emit_events(app, "member.joined", OTHER, count=1)
    await allow_app(app, COMMUNITY, other["appId"])
    after_grant = await emit_events(app, "member.left", COMMUNITY, count=1)
    mine = await emit_events(app, "record.created", None, app_id=creator["appId"])  # outside any community

    seen_by_creator = [e["id"] for e in (await pull(client, creator["apiKey"], cursor=starts[creator["apiKey"]]))["events"]]
    seen_by_other = [e["id"] for e in (await pull(client, other["apiKey"], cursor=starts[other["apiKey"]]))["events"]]
    assert seen_by_creator == hidden + public + after_grant + mine
    # The other app was allowed in after the first two: it never hears of them (nor of the
    # creator's own event outside any community).
    assert seen_by_other == public + after_grant


async def test_kinds_and_community_filters(app, client):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    await make_community(app, OTHER)
    start = (await pull(client, key))["cursor"]
    joined = await emit_events(app, "member.joined", COMMUNITY, count=2)
    left = await emit_events(app, "member.left", COMMUNITY, count=1)
    elsewhere = await emit_events(app, "member.joined", OTHER, count=1)
    ids = lambda page: [e["id"] for e in page["events"]]  # noqa: E731
    assert ids(await pull(client, key, cursor=start, kinds="member.joined")) == joined + elsewhere
    assert ids(await pull(client, key, cursor=start, kinds="member.left,member.joined",
                          communityDid=COMMUNITY)) == joined + left
    assert ids(await pull(client, key, cursor=start, communityDid=OTHER)) == elsewhere


async def test_a_sparse_filter_moves_the_cursor_past_what_it_looked_through(app, client):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    start = (await pull(client, key))["cursor"]
    await emit_events(app, "member.joined", COMMUNITY, count=30_000)
    [wanted] = await emit_events(app, "member.left", COMMUNITY)
    cursor, found, pulls = start, [], 0
    while not found:
        page = await pull(client, key, cursor=cursor, kinds="member.left")
        pulls += 1
        found = page["events"]
        assert page["cursor"] != cursor or found
        cursor = page["cursor"]
    assert [e["id"] for e in found] == [wanted] and pulls <= 2


async def test_wait_long_polls_until_an_event_arrives(app, client):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    start = (await pull(client, key))["cursor"]

    async def later():
        await asyncio.sleep(0.3)
        return await emit_events(app, "member.joined", COMMUNITY)

    began = time.monotonic()
    page, ids = await asyncio.gather(pull(client, key, cursor=start, wait=10), later())
    assert [e["id"] for e in page["events"]] == ids
    assert time.monotonic() - began < 5
    # Nothing comes: the answer comes after `wait`, empty, with the same cursor.
    began = time.monotonic()
    empty = await pull(client, key, cursor=page["cursor"], wait="0.5")
    assert empty == {"events": [], "cursor": page["cursor"]}
    assert 0.4 < time.monotonic() - began < 5


async def test_a_long_poll_answers_at_once_when_the_daemon_stops(app, client):
    key = (await make_app_key(app, client))["apiKey"]
    start = (await pull(client, key))["cursor"]
    waiting = asyncio.ensure_future(pull(client, key, cursor=start, wait=30))
    await asyncio.sleep(0.2)
    began = time.monotonic()
    app.begin_stopping()
    page = await asyncio.wait_for(waiting, 5)
    assert page["events"] == [] and time.monotonic() - began < 2


@pytest.mark.parametrize("params,code,named", [
    ({"cursor": "bm90LWEtY3Vyc29y"}, "invalid_cursor", None),
    ({"cursor": "!!"}, "invalid_cursor", None),
    ({"cursor": "Wzk5OTk5OTk5XQ"}, "invalid_cursor", None),  # [99999999]: ahead of every event
    ({"kinds": "member.joined,member.exploded"}, "unknown_kind", "member.exploded"),
    ({"limit": "1001"}, "invalid_limit", None),
    ({"limit": "0"}, "invalid_limit", None),
    ({"wait": "31"}, "invalid_wait", None),
    ({"wait": "-1"}, "invalid_wait", None),
    ({"communityDid": "not-a-did"}, "invalid_request", "communityDid"),
])
async def test_bad_input_is_a_400_naming_the_problem(app, client, params, code, named):
    key = (await make_app_key(app, client))["apiKey"]
    body = await pull(client, key, 400, **params)
    assert body["error"] == code
    if named:
        assert named in body["message"]


async def test_a_community_the_app_cannot_see_is_unknown(app, client):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY, type="private", creator_app_id="app_someoneelse00")
    body = await pull(client, key, 404, communityDid=COMMUNITY)
    assert body["error"] == "community_not_found"


async def test_without_a_key_it_is_401(client):
    resp = await client.get("/api/v1/events")
    assert resp.status == 401 and resp.json()["error"] == "unauthorized"


async def test_a_pull_of_1000_events_counts_once_against_the_rate_limit(app, client):
    key = (await make_app_key(app, client))["apiKey"]
    await make_community(app, COMMUNITY)
    start = (await pull(client, key))["cursor"]
    await emit_events(app, "member.joined", COMMUNITY, count=1000)
    before = await client.get("/api/v1/events", api_key=key, params={"cursor": start})
    after = await client.get("/api/v1/events", api_key=key, params={"cursor": start, "limit": 1000})
    assert len(after.json()["events"]) == 1000
    assert int(before.headers["RateLimit-Remaining"]) - int(after.headers["RateLimit-Remaining"]) == 1


def test_retention_must_be_a_day_or_more(tmp_path):
    from daemon.runtime.config import ConfigError
    from plugins.events.settings import EventsConfig, check
    with pytest.raises(ConfigError) as info:
        check(EventsConfig(retention_days=0))
    assert "events.retention_days" in str(info.value)


async def test_both_routes_are_in_the_openapi_document(client):
    doc = (await client.get("/api/v1/openapi.json")).json()
    pull_op = doc["paths"]["/api/v1/events"]["get"]
    assert {p["name"] for p in pull_op["parameters"]} == {"cursor", "kinds", "communityDid", "limit", "wait"}
    assert {"200", "400", "401", "404", "410", "429"} <= set(pull_op["responses"])
    sub = doc["paths"]["/api/v1/events/subscribe"]["get"]
    assert {"101", "401", "410", "426"} <= set(sub["responses"])
