"""The app owner's webhook routes (browser session): /api/v1/apps/:appId/webhooks...
give the owner the same webhooks, with the same rules, as the app's own API-key routes;
nobody else's session reaches them."""

from __future__ import annotations

import pytest

from tests.helpers import login_as, register_app

HOOK = "https://hooks.example.com/in"


@pytest.fixture
def public_dns(app):
    async def resolve(host, port):
        return ["93.184.216.34"]

    app.webhooks.dispatcher.guard.resolver = resolve


async def test_owner_session_manages_the_apps_webhooks_like_its_key(app, client, public_dns):
    alice = await login_as(app, "did:plc:alicehooks", "alice.test")
    made = await register_app(client, alice)
    base = f"/api/v1/apps/{made['appId']}/webhooks"
    resp = await client.post(base, json={"url": HOOK, "events": ["member.joined"]}, session=alice)
    assert resp.status == 201, resp.text
    hook = resp.json()
    assert hook["secret"].startswith("whsec_")
    # the app sees the webhook its owner made, through its key
    listed = (await client.get("/api/v1/webhooks", api_key=made["apiKey"])).json()["webhooks"]
    assert [h["webhookId"] for h in listed] == [hook["webhookId"]]
    one = f"{base}/{hook['webhookId']}"
    resp = await client.put(one, json={"events": ["member.joined", "member.left"]}, session=alice)
    assert resp.status == 200 and resp.json()["events"] == ["member.joined", "member.left"]
    # the same rules: a refused target is a 400 on the field
    resp = await client.put(one, json={"url": "http://hooks.example.com/in"}, session=alice)
    assert resp.status == 400 and "url" in resp.json()["message"]
    rotated = await client.post(f"{one}/rotate-secret", session=alice)
    assert rotated.status == 200 and rotated.json()["secret"] != hook["secret"]
    assert (await client.get(f"{one}/deliveries", session=alice)).json() == {"deliveries": []}
    assert (await client.post(f"{one}/deliveries/1/redeliver", session=alice)).status == 404
    # a form post from another site (no CSRF header) changes nothing
    assert (await client.delete(one, session=alice, csrf=False)).status == 403
    assert (await client.delete(one, session=alice)).status == 204
    assert (await client.get("/api/v1/webhooks", api_key=made["apiKey"])).json()["webhooks"] == []


async def test_another_persons_session_finds_no_such_app(app, client, public_dns):
    alice = await login_as(app, "did:plc:alicehooks2", "alice2.test")
    mallory = await login_as(app, "did:plc:mallory", "mallory.test")
    made = await register_app(client, alice)
    base = f"/api/v1/apps/{made['appId']}/webhooks"
    hook = (await client.post("/api/v1/webhooks", json={"url": HOOK, "events": ["member.joined"]},
                              api_key=made["apiKey"])).json()
    for method, path in [("GET", base), ("POST", base), ("GET", f"{base}/{hook['webhookId']}"),
                         ("DELETE", f"{base}/{hook['webhookId']}"),
                         ("POST", f"{base}/{hook['webhookId']}/rotate-secret")]:
        json = {"url": HOOK, "events": ["member.joined"]} if method == "POST" else None
        resp = await client.request(method, path, json=json, session=mallory)
        assert resp.status == 404 and resp.json()["error"] == "app_not_found", (method, path)
    # an API key is not a session: these routes are the owner's
    assert (await client.get(base, api_key=made["apiKey"])).status == 401
    assert (await client.get(f"{base}/{hook['webhookId']}", api_key=made["apiKey"])).status != 200
