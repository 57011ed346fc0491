"""Apps and API keys (spec §2.3, §4.4, §5.3)."""

from __future__ import annotations

import re

from tests.helpers import login_as, register_app


async def test_register_returns_key_in_documented_format(app, client):
    alice = await login_as(app, "did:plc:alice")
    created = await register_app(client, alice)
    assert re.fullmatch(r"cr_[0-9a-f]{64}", created["apiKey"])
    assert re.fullmatch(r"app_[0-9a-f]{16}", created["appId"])
    assert created["name"] == "Test app" and created["domain"] == "app.example.com"
    listed = (await client.get("/api/v1/apps", session=alice)).json()["apps"]
    assert [a["appId"] for a in listed] == [created["appId"]]
    assert "apiKey" not in listed[0]


async def test_database_file_holds_no_plaintext_key(app, client, state_dir):
    alice = await login_as(app, "did:plc:alice")
    key = (await register_app(client, alice))["apiKey"]
    rotated = (await client.post(f"/api/v1/apps/{(await register_app(client, alice, domain='b.example.com'))['appId']}/rotate-key",
                                 session=alice)).json()["apiKey"]
    await app.db.close()  # checkpoint the WAL into the main file
    blob = b"".join(p.read_bytes() for p in state_dir.iterdir() if p.is_file())
    for k in (key, rotated):
        assert k.encode() not in blob
        assert k[3:].encode() not in blob
    app.db.__init__(app.db.path)
    await app.db.open()


async def test_verify_accepts_key_and_refuses_wrong_one(app, client):
    alice = await login_as(app, "did:plc:alice")
    created = await register_app(client, alice)
    ok = await client.post("/api/v1/apps/verify", api_key=created["apiKey"])
    assert ok.status == 200
    assert ok.json() == {"valid": True, "app": {"appId": created["appId"], "name": "Test app",
                                                "domain": "app.example.com"}}
    wrong = await client.post("/api/v1/apps/verify", api_key="cr_" + "0" * 64)
    assert wrong.status == 401 and wrong.json()["error"] == "invalid_api_key"
    malformed = await client.post("/api/v1/apps/verify", api_key="nope")
    assert malformed.status == 401
    missing = await client.post("/api/v1/apps/verify")
    assert missing.status == 401 and missing.json()["error"] == "unauthorized"


async def test_rotation_refuses_old_key_at_once(app, client):
    alice = await login_as(app, "did:plc:alice")
    created = await register_app(client, alice)
    old = created["apiKey"]
    assert (await client.post("/api/v1/apps/verify", api_key=old)).status == 200
    rotated = await client.post(f"/api/v1/apps/{created['appId']}/rotate-key", session=alice)
    assert rotated.status == 200
    new = rotated.json()["apiKey"]
    assert new != old and re.fullmatch(r"cr_[0-9a-f]{64}", new)
    assert (await client.post("/api/v1/apps/verify", api_key=old)).status == 401
    assert (await client.post("/api/v1/apps/verify", api_key=new)).status == 200


async def test_deactivated_app_key_is_refused(app, client):
    alice = await login_as(app, "did:plc:alice")
    created = await register_app(client, alice)
    gone = await client.delete(f"/api/v1/apps/{created['appId']}", session=alice)
    assert gone.status == 200 and gone.json()["active"] is False
    resp = await client.post("/api/v1/apps/verify", api_key=created["apiKey"])
    assert resp.status == 401 and resp.json()["error"] == "app_deactivated"
    again = await client.post(f"/api/v1/apps/{created['appId']}/rotate-key", session=alice)
    assert again.status == 409


async def test_key_changed_by_another_process_is_refused_within_a_second(app, client, clock):
    """Valid keys are cached in the daemon; a change committed from another process (the
    operator CLI has its own connection) counts once the cache rechecks, within 1 s."""
    import sqlite3
    alice = await login_as(app, "did:plc:alice")
    created = await register_app(client, alice)
    for _ in range(2):   # the second answer comes from the cache
        assert (await client.post("/api/v1/apps/verify", api_key=created["apiKey"])).status == 200
    other = sqlite3.connect(app.config.database_path)
    other.execute("UPDATE apps SET active = 0 WHERE id = ?", (created["appId"],))
    other.commit()
    other.close()
    clock.advance(1.0)
    resp = await client.post("/api/v1/apps/verify", api_key=created["apiKey"])
    assert resp.status == 401 and resp.json()["error"] == "app_deactivated"


async def test_other_users_app_is_not_found(app, client):
    alice = await login_as(app, "did:plc:alice")
    bob = await login_as(app, "did:plc:bob")
    created = await register_app(client, alice)
    for method, path in [("GET", ""), ("PUT", ""), ("DELETE", ""), ("POST", "/rotate-key"),
                         ("GET", "/rate-limit")]:
        resp = await client.request(method, f"/api/v1/apps/{created['appId']}{path}", session=bob,
                                    json={} if method == "PUT" else None)
        assert resp.status == 404, (method, path, resp.text)
    assert (await client.get("/api/v1/apps", session=bob)).json() == {"apps": []}
    # and alice's key still works
    assert (await client.post("/api/v1/apps/verify", api_key=created["apiKey"])).status == 200


async def test_register_validates_name_and_domain(app, client):
    alice = await login_as(app, "did:plc:alice")
    cases = [({"name": "ab", "domain": "x.example.com"}, "name"),
             ({"name": "Fine name", "domain": "https://x.example.com/path"}, "domain"),
             ({"name": 12345, "domain": "x.example.com"}, "name"),
             ({"domain": "x.example.com"}, "name")]
    for body, field in cases:
        resp = await client.post("/api/v1/apps/register", json=body, session=alice)
        assert resp.status == 400, body
        assert resp.json()["error"] == "invalid_request"
        assert resp.json()["details"][0]["field"] == field


async def test_same_domain_twice_is_a_conflict(app, client):
    alice = await login_as(app, "did:plc:alice")
    await register_app(client, alice)
    resp = await client.post("/api/v1/apps/register", json={"name": "Again", "domain": "app.example.com"},
                             session=alice)
    assert resp.status == 409


async def test_app_routes_need_a_session_not_a_key(app, client):
    alice = await login_as(app, "did:plc:alice")
    created = await register_app(client, alice)
    resp = await client.get("/api/v1/apps", api_key=created["apiKey"])
    assert resp.status == 401


async def test_update_app_and_list_pagination(app, client):
    alice = await login_as(app, "did:plc:alice")
    ids = []
    for i in range(5):
        ids.append((await register_app(client, alice, name=f"App {i}", domain=f"a{i}.example.com"))["appId"])
    seen, cursor = [], None
    while True:
        page = (await client.get("/api/v1/apps", session=alice, params={"limit": 2, "cursor": cursor})).json()
        seen += [a["appId"] for a in page["apps"]]
        cursor = page.get("cursor")
        if not cursor:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 5
    upd = await client.put(f"/api/v1/apps/{ids[0]}", json={"name": "Renamed"}, session=alice)
    assert upd.status == 200 and upd.json()["name"] == "Renamed"


async def test_operator_can_deactivate_any_app(app, client):
    import argparse
    from plugins.apikeys.operator import _deactivate
    alice = await login_as(app, "did:plc:alice")
    created = await register_app(client, alice)
    assert await _deactivate(app, argparse.Namespace(app_id=created["appId"])) == 0
    assert (await client.post("/api/v1/apps/verify", api_key=created["apiKey"])).status == 401


async def test_apps_per_owner_are_capped(app, client):
    alice = await login_as(app, "did:plc:alice")
    most = app.config.plugin("apikeys").max_apps_per_owner
    for i in range(most):
        await register_app(client, alice, name=f"App {i}", domain=f"a{i}.example.com")
    resp = await client.post("/api/v1/apps/register", json={"name": "One more", "domain": "z.example.com"},
                             session=alice)
    assert resp.status == 409 and resp.json()["error"] == "too_many_apps"
