"""Rate limits (spec §8): per app on API-key routes, per client address on auth endpoints."""

from __future__ import annotations

import pytest

from daemon.base import FakeClock
from daemon.security.ratelimit import RateLimiter
from tests.helpers import login_as, register_app
from tests.plugin_testroutes import plugin as testroutes


@pytest.fixture
def extra_plugins():
    return (testroutes,)


async def burst(client, n, **kw):
    return [await client.post("/api/v1/apps/verify", **kw) for _ in range(n)]


async def test_request_101_in_a_minute_is_429_and_other_apps_are_unaffected(app, client, clock):
    alice = await login_as(app, "did:plc:alice")
    key_a = (await register_app(client, alice))["apiKey"]
    key_b = (await register_app(client, alice, domain="b.example.com"))["apiKey"]
    first = await burst(client, 100, api_key=key_a)
    assert all(r.status == 200 for r in first)
    assert first[0].headers["RateLimit-Limit"] == "100"
    assert first[0].headers["RateLimit-Remaining"] == "99"
    assert first[-1].headers["RateLimit-Remaining"] == "0"
    limited = await client.post("/api/v1/apps/verify", api_key=key_a)
    assert limited.status == 429
    assert limited.json()["error"] == "rate_limited"
    assert int(limited.headers["Retry-After"]) >= 1
    for h in ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"):
        assert h in limited.headers
    assert limited.headers["RateLimit-Remaining"] == "0"
    # the other app has its own bucket
    assert (await client.post("/api/v1/apps/verify", api_key=key_b)).status == 200
    # after the window, requests pass again
    clock.advance(60)
    again = await burst(client, 100, api_key=key_a)
    assert all(r.status == 200 for r in again)


async def test_custom_per_app_limit_is_honoured(app, client, clock):
    alice = await login_as(app, "did:plc:alice")
    created = await register_app(client, alice)
    resp = await client.put(f"/api/v1/apps/{created['appId']}/rate-limit", session=alice,
                            json={"maxRequests": 5, "windowMs": 10_000})
    assert resp.status == 200 and resp.json() == {"maxRequests": 5, "windowMs": 10000, "custom": True}
    results = await burst(client, 6, api_key=created["apiKey"])
    assert [r.status for r in results] == [200] * 5 + [429]
    assert results[0].headers["RateLimit-Limit"] == "5"
    clock.advance(10)
    assert (await client.post("/api/v1/apps/verify", api_key=created["apiKey"])).status == 200
    # back to the default
    resp = await client.put(f"/api/v1/apps/{created['appId']}/rate-limit", session=alice,
                            json={"maxRequests": None, "windowMs": None})
    assert resp.json()["custom"] is False and resp.json()["maxRequests"] == 100


async def test_custom_limit_is_validated(app, client):
    alice = await login_as(app, "did:plc:alice")
    created = await register_app(client, alice)
    resp = await client.put(f"/api/v1/apps/{created['appId']}/rate-limit", session=alice,
                            json={"maxRequests": 0, "windowMs": 1000})
    assert resp.status == 400


async def test_auth_endpoint_allows_20_per_15_minutes_per_address(app, client, clock):
    results = [await client.post("/test/auth-limited", json={}) for _ in range(21)]
    assert [r.status for r in results] == [200] * 20 + [429]
    assert results[-1].headers["Retry-After"]
    clock.advance(15 * 60)
    assert (await client.post("/test/auth-limited", json={})).status == 200


@pytest.fixture
def config_overrides():
    return {"server": {"trusted_proxies": ["127.0.0.1/32"]}}


async def test_forwarded_for_is_honoured_only_from_trusted_proxies(app, client):
    for _ in range(20):
        assert (await client.post("/test/auth-limited", json={},
                                   headers={"X-Forwarded-For": "203.0.113.7"})).status == 200
    assert (await client.post("/test/auth-limited", json={},
                              headers={"X-Forwarded-For": "203.0.113.7"})).status == 429
    # another client behind the same trusted proxy has its own bucket
    assert (await client.post("/test/auth-limited", json={},
                              headers={"X-Forwarded-For": "203.0.113.8"})).status == 200


def test_idle_buckets_are_evicted_and_keys_are_capped():
    clock = FakeClock()
    limiter = RateLimiter(clock, max_keys=50)
    for i in range(40):
        limiter.hit(f"k{i}", 10, 60)
    assert len(limiter) == 40
    clock.advance(60)  # every bucket has refilled: identical to a fresh one
    assert limiter.sweep() == 40 and len(limiter) == 0
    for i in range(200):
        limiter.hit(f"x{i}", 10, 60)
    assert len(limiter) <= 50


def test_at_the_cap_a_new_key_is_still_limited_and_the_least_recent_key_makes_room():
    clock = FakeClock()
    limiter = RateLimiter(clock, max_keys=3)
    for key in ("a", "b", "c"):
        limiter.hit(key, 5, 60)            # three keys in use, none refilled
    allowed = [limiter.hit("newcomer", 5, 60).allowed for _ in range(20)]
    assert allowed == [True] * 5 + [False] * 15
    assert len(limiter) == 3 and not limiter.hit("newcomer", 5, 60).allowed
    assert limiter.hit("a", 5, 60).remaining == 4   # "a" was the least recent: evicted, a fresh bucket


def test_bucket_refills_gradually():
    clock = FakeClock()
    limiter = RateLimiter(clock)
    for _ in range(10):
        assert limiter.hit("k", 10, 60).allowed
    denied = limiter.hit("k", 10, 60)
    assert not denied.allowed and denied.retry_after_seconds == 6
    clock.advance(6)
    assert limiter.hit("k", 10, 60).allowed


async def test_failed_api_keys_are_limited_per_address_but_valid_keys_still_pass(app, client):
    alice = await login_as(app, "did:plc:alice")
    good = (await register_app(client, alice))["apiKey"]
    budget = app.config.rate_limits.failed_auth.requests
    bad = [await client.post("/api/v1/apps/verify", api_key="cr_" + f"{i:064x}") for i in range(budget + 1)]
    assert [r.status for r in bad] == [401] * budget + [429]
    assert bad[-1].headers["Retry-After"]
    assert (await client.post("/api/v1/apps/verify", api_key=good)).status == 200


async def test_session_requests_are_limited_per_user(app, client, clock):
    alice = await login_as(app, "did:plc:alice")
    bob = await login_as(app, "did:plc:bob")
    n = app.config.rate_limits.session.requests
    results = [await client.get("/api/v1/apps", session=alice) for _ in range(n + 1)]
    assert results[-2].status == 200 and results[-1].status == 429
    assert (await client.get("/api/v1/apps", session=bob)).status == 200
    clock.advance(app.config.rate_limits.session.window_seconds)
    assert (await client.get("/api/v1/apps", session=alice)).status == 200


async def test_owner_cannot_raise_the_limit_but_the_operator_can(app, client):
    import argparse
    from plugins.apikeys.operator import _rate_limit
    alice = await login_as(app, "did:plc:alice")
    created = await register_app(client, alice)
    raised = await client.put(f"/api/v1/apps/{created['appId']}/rate-limit", session=alice,
                              json={"maxRequests": 1_000_000, "windowMs": 1000})
    assert raised.status == 403 and raised.json()["error"] == "limit_above_default"
    assert await _rate_limit(app, argparse.Namespace(app_id=created["appId"], max_requests=500,
                                                     window_seconds=60.0)) == 0
    resp = await client.post("/api/v1/apps/verify", api_key=created["apiKey"])
    assert resp.headers["RateLimit-Limit"] == "500"
