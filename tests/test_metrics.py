"""`/metrics` (docs/operations.md, "Metrics"): closed by default, open by address or bearer
token, in the Prometheus text format, and its counters move with the traffic."""

from __future__ import annotations

import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemon.base import FakeClock
from tests.conftest import deep_merge
from tests.fixtures_communities import seed_community
from tests.fixtures_webhooks import LOOPBACK_TARGETS, allow_app, emit_events, make_app_key, settle, wait_until
from tests.helpers import Client, login_as

OPEN = {"metrics": {"allow_from": ["127.0.0.0/8", "::1"]}}
TOKEN = "t0k3n-" + "x" * 20


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=time.time())  # receivers check webhook timestamps against real time


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return deep_merge(LOOPBACK_TARGETS, OPEN)


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


async def scrape(client: Client, **kw: Any) -> dict[tuple[str, frozenset], float]:
    resp = await client.get("/metrics", **kw)
    assert resp.status == 200, resp.text
    assert resp.headers["Content-Type"].startswith("text/plain")
    return samples(resp.text)


def value(found: dict, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


async def test_request_counters_move_with_the_traffic_by_route_template(app: Any, client: Client) -> None:
    created = await make_app_key(app, client)
    community = await seed_community(app, "did:plc:admin", creator_app_id=created["appId"])
    before = await scrape(client)
    for _ in range(3):
        assert (await client.get("/health")).status == 200
    check = f"/api/v1/communities/{community}/membership/check"
    for _ in range(2):  # the lean route is counted like the others
        resp = await client.post(check, api_key=created["apiKey"], json={"userDid": "did:plc:admin"})
        assert resp.status == 200, resp.text
    assert (await client.post(check, json={"userDid": "did:plc:admin"})).status == 401
    assert (await client.get("/no/such/route")).status == 404
    after = await scrape(client)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("commonroom_http_requests_total", route="/health", method="GET", status="200") == 3
    template = "/api/v1/communities/{did}/membership/check"
    assert moved("commonroom_http_requests_total", route=template, method="POST", status="200") == 2
    assert moved("commonroom_http_requests_total", route=template, method="POST", status="401") == 1
    assert moved("commonroom_http_requests_total", route="unmatched", method="GET", status="404") == 1
    assert moved("commonroom_http_request_duration_seconds_count", route=template) == 3
    assert value(after, "commonroom_database_bytes", file="database") > 0


async def test_the_serving_path_of_each_request_is_counted(app: Any, client: Client, monkeypatch: Any) -> None:
    """A lost fast path shows in /metrics: a check answered at once is ``lean``, one that had
    to wait is ``lean_task``, a RequestHandler route is ``handler``."""
    from plugins.communities import api
    created = await make_app_key(app, client)
    community = await seed_community(app, "did:plc:admin", creator_app_id=created["appId"])
    check = f"/api/v1/communities/{community}/membership/check"
    template = "/api/v1/communities/{did}/membership/check"
    before = await scrape(client)
    for _ in range(3):
        resp = await client.post(check, api_key=created["apiKey"], json={"userDid": "did:plc:admin"})
        assert resp.json()["isAdmin"] is True
    real = api.checked_status

    async def waits(*args: Any, **kwargs: Any) -> Any:
        import asyncio
        await asyncio.sleep(0.001)   # a real suspension: the rest runs in a task
        return await real(*args, **kwargs)

    monkeypatch.setattr(api, "checked_status", waits)
    resp = await client.post(check, api_key=created["apiKey"], json={"userDid": "did:plc:admin"})
    assert resp.status == 200 and resp.json()["isAdmin"] is True
    assert (await client.get("/health")).status == 200
    after = await scrape(client)

    def moved(**labels: str) -> float:
        name = "commonroom_http_serving_path_total"
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved(route=template, path="lean") == 3
    assert moved(route=template, path="lean_task") == 1
    assert moved(route="/health", path="handler") == 1
    assert moved(route=template, path="handler") == 0


async def test_rate_limit_refusals_are_counted(app: Any, client: Client) -> None:
    created = await make_app_key(app, client)
    limit = await client.put(f"/api/v1/apps/{created['appId']}/rate-limit", json={"maxRequests": 2, "windowMs": 60000},
                             session=await login_as(app, "did:plc:owner"))
    assert limit.status == 200, limit.text
    statuses = [(await client.post("/api/v1/apps/verify", api_key=created["apiKey"])).status for _ in range(3)]
    assert statuses == [200, 200, 429]
    found = await scrape(client)
    assert value(found, "commonroom_rate_limited_total", limit="app") == 1


async def test_webhook_queue_and_delivery_outcomes(app: Any, client: Client, receiver: Any) -> None:
    created = await make_app_key(app, client)
    community = "did:plc:metricscommunity"
    from tests.fixtures_webhooks import make_community
    await make_community(app, community)
    await allow_app(app, community, created["appId"])
    rec = receiver([500])  # fails: the delivery waits for its retry
    hook = await client.post("/api/v1/webhooks", api_key=created["apiKey"],
                             json={"url": rec.url, "events": ["member.joined"], "communityDid": community})
    assert hook.status == 201, hook.text
    await emit_events(app, "member.joined", community, count=2)
    await wait_until(lambda: rec.requests, what="a first attempt")
    await settle(app)
    found = await scrape(client)
    assert value(found, "commonroom_webhooks_queue_depth") == 2
    assert value(found, "commonroom_webhooks_deliveries_total", outcome="retry") == 1
    assert value(found, "commonroom_webhooks_queue_oldest_age_seconds") >= 0
    rec.responses = [200]
    app.clock.advance(3600)
    await settle(app)
    assert len(rec.requests) == 3  # the retried first, then the second
    found = await scrape(client)
    assert value(found, "commonroom_webhooks_queue_depth") == 0
    assert value(found, "commonroom_webhooks_deliveries_total", outcome="delivered") == 2


@pytest.mark.parametrize("config_overrides", [{}])
async def test_metrics_are_closed_by_default(app: Any, client: Client) -> None:
    resp = await client.get("/metrics")
    assert resp.status == 404 and resp.json()["error"] == "not_found"


@pytest.mark.parametrize("config_overrides", [{"metrics": {"bearer_token": TOKEN}}])
async def test_a_bearer_token_opens_metrics(app: Any, client: Client) -> None:
    assert (await client.get("/metrics")).status == 404
    assert (await client.get("/metrics", headers={"Authorization": "Bearer wrong-" + "y" * 20})).status == 404
    found = await scrape(client, headers={"Authorization": f"Bearer {TOKEN}"})
    assert any(name == "commonroom_http_requests_total" for name, _ in found)


async def test_refused_connections_and_failed_accepts_are_counted(app: Any, client: Client) -> None:
    """Counted by the daemon's server on `app.connections` (tests/test_probe_network.py
    makes it refuse for real); the scrape reports what it counted since the last one."""
    before = await scrape(client)
    app.connections.refused += 3
    app.connections.accept_failures += 2
    after = await scrape(client)
    assert value(after, "commonroom_connections_refused_total") - \
        value(before, "commonroom_connections_refused_total") == 3
    assert value(after, "commonroom_accept_failures_total") - value(before, "commonroom_accept_failures_total") == 2


async def test_request_metrics_read_as_prometheus_clients_counter_and_histogram(app: Any) -> None:
    """The request counter and latency histogram are kept as plain numbers (a cheaper hot
    path) but must read exactly as prometheus_client's Counter and Histogram would: the
    same names, labels, bucket bounds and values."""
    from types import SimpleNamespace

    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    from daemon.http.base import HealthHandler
    from daemon.http.metrics import _LATENCY_BUCKETS

    reference = CollectorRegistry()
    counter = Counter("commonroom_http_requests", "HTTP requests answered.", ["route", "method", "status"],
                      registry=reference)
    histogram = Histogram("commonroom_http_request_duration_seconds", "Time from the request's arrival to its "
                          "answer.", ["route"], buckets=_LATENCY_BUCKETS, registry=reference)
    handler = HealthHandler.__new__(HealthHandler)
    handler.request = SimpleNamespace(method="GET")
    # bounds exactly, between them, beyond the last
    for seconds, status in ((0.0001, 200), (0.0005, 200), (0.0007, 200), (0.003, 503), (0.25, 200), (20.0, 200)):
        app.metrics.record_request(handler, status, seconds)
        counter.labels("/health", "GET", str(status)).inc()
        histogram.labels("/health").observe(seconds)
    ours = {k: v for k, v in samples((await app.metrics.render()).decode()).items()
            if k[0].startswith("commonroom_http_request") and not k[0].endswith("_created")}
    theirs = {k: v for k, v in samples(generate_latest(reference).decode()).items() if not k[0].endswith("_created")}
    assert ours == theirs
    created = {k[0] for k in samples((await app.metrics.render()).decode()) if k[0].endswith("_created")}
    assert {"commonroom_http_requests_created", "commonroom_http_request_duration_seconds_created"} <= created
