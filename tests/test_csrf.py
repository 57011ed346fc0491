"""CSRF on browser sessions (spec §5.2); API-key requests are exempt."""

from __future__ import annotations

import pytest

from tests.helpers import login_as, register_app
from tests.plugin_testroutes import plugin as testroutes


@pytest.fixture
def extra_plugins():
    return (testroutes,)


async def test_session_post_without_csrf_header_is_403(app, client):
    alice = await login_as(app, "did:plc:alice")
    resp = await client.post("/test/echo", json={}, session=alice, csrf=False)
    assert resp.status == 403 and resp.json()["error"] == "csrf_failed"


async def test_session_post_with_wrong_csrf_token_is_403(app, client):
    alice = await login_as(app, "did:plc:alice")
    resp = await client.post("/test/echo", json={}, session=alice, csrf=False,
                             headers={"x-csrf-token": "not-the-token"})
    assert resp.status == 403


async def test_another_sessions_token_does_not_pass(app, client):
    alice = await login_as(app, "did:plc:alice")
    bob = await login_as(app, "did:plc:bob")
    resp = await client.post("/test/echo", json={}, session=alice, csrf=False,
                             headers={"x-csrf-token": bob.csrf})
    assert resp.status == 403


async def test_session_post_with_cookie_value_passes(app, client):
    alice = await login_as(app, "did:plc:alice")
    resp = await client.post("/test/echo", json={}, session=alice)
    assert resp.status == 200 and resp.json()["principal"] == "session"
    # and for real routes too: registering an app is a session POST
    assert (await client.post("/api/v1/apps/register", json={"name": "Xyz", "domain": "x.example.com"},
                              session=alice, csrf=False)).status == 403


async def test_api_key_request_is_not_refused_for_csrf(app, client):
    alice = await login_as(app, "did:plc:alice")
    key = (await register_app(client, alice))["apiKey"]
    # a browser that also carries the sid cookie: the API key decides, no CSRF needed
    resp = await client.post("/test/echo", json={}, api_key=key,
                             headers={"Cookie": f"sid={alice.sid}"})
    assert resp.status == 200 and resp.json()["principal"] == "app"


async def test_get_needs_no_csrf(app, client):
    alice = await login_as(app, "did:plc:alice")
    assert (await client.get("/api/v1/apps", session=alice, csrf=False)).status == 200


async def test_expired_session_is_401(app, client, clock):
    alice = await login_as(app, "did:plc:alice")
    clock.advance(app.config.sessions.idle_timeout_seconds + 1)
    resp = await client.get("/api/v1/apps", session=alice)
    assert resp.status == 401 and resp.json()["error"] == "session_expired"


async def test_expired_sessions_are_removed_from_the_database(app, client, clock):
    from daemon.security.sessions import delete_expired_sessions
    await login_as(app, "did:plc:alice")
    clock.advance(3600)
    await login_as(app, "did:plc:bob")
    assert await delete_expired_sessions(app) == 0
    clock.advance(app.config.sessions.idle_timeout_seconds - 1800)  # alice idle too long, bob not
    assert await delete_expired_sessions(app) == 1
    assert [r["did"] for r in await app.db.fetchall("SELECT did FROM sessions")] == ["did:plc:bob"]
