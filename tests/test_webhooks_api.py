"""Webhook routes (spec §2.8, §4.8): create, list, get, update, delete, rotate, the
delivery log; secrets shown once and sealed at rest; targets checked against SSRF."""

from __future__ import annotations

import base64
import re

import pytest

from tests.fixtures_webhooks import LOOPBACK_TARGETS, make_app_key, make_community

HOOK = "https://hooks.example.com/in"


@pytest.fixture
def public_dns(app):
    """Resolve every name to a public address (no network in tests); some names to
    private ones."""
    table = {"ten.example.com": ["10.0.0.1"], "mixed.example.com": ["93.184.216.34", "127.0.0.1"]}

    async def resolve(host, port):
        if host == "localhost":
            return ["127.0.0.1", "::1"]
        return table.get(host, ["93.184.216.34"])

    app.webhooks.dispatcher.guard.resolver = resolve
    return table


async def create(client, key, **body):
    body = {"url": HOOK, "events": ["member.joined"], **body}
    return await client.post("/api/v1/webhooks", json=body, api_key=key)


async def test_create_returns_secret_once_in_standard_webhooks_format(app, client, public_dns):
    key = (await make_app_key(app, client))["apiKey"]
    resp = await create(client, key, events=["member.joined", "record.created"])
    assert resp.status == 201, resp.text
    hook = resp.json()
    assert re.fullmatch(r"wh_[0-9a-f]{16}", hook["webhookId"])
    assert hook["url"] == HOOK and hook["events"] == ["member.joined", "record.created"]
    assert hook["communityDid"] is None and hook["active"] is True
    assert hook["secret"].startswith("whsec_")
    assert len(base64.b64decode(hook["secret"][6:])) == 32
    listed = (await client.get("/api/v1/webhooks", api_key=key)).json()["webhooks"]
    assert [h["webhookId"] for h in listed] == [hook["webhookId"]]
    assert "secret" not in listed[0]
    one = await client.get(f"/api/v1/webhooks/{hook['webhookId']}", api_key=key)
    assert one.status == 200 and "secret" not in one.json()
    assert hook["secret"] not in one.text


async def test_unknown_event_kind_is_400_naming_the_field(app, client, public_dns):
    key = (await make_app_key(app, client))["apiKey"]
    resp = await create(client, key, events=["member.joined", "member.exploded"])
    assert resp.status == 400
    assert "events" in resp.json()["message"] and "member.exploded" in resp.json()["message"]
    assert (await create(client, key, events=[])).status == 400
    assert (await client.get("/api/v1/webhooks", api_key=key)).json()["webhooks"] == []


async def test_webhook_routes_need_an_api_key(app, client):
    assert (await client.get("/api/v1/webhooks")).status == 401
    assert (await client.post("/api/v1/webhooks", json={"url": HOOK, "events": ["member.joined"]})).status == 401


async def test_other_apps_webhook_is_not_found(app, client, public_dns):
    a = (await make_app_key(app, client, "did:plc:alice", "a.example.com"))["apiKey"]
    b = (await make_app_key(app, client, "did:plc:bob", "b.example.com"))["apiKey"]
    hook = (await create(client, a)).json()
    wid = hook["webhookId"]
    for method, path, body in [("GET", "", None), ("PUT", "", {"active": False}), ("DELETE", "", None),
                               ("POST", "/rotate-secret", None), ("GET", "/deliveries", None),
                               ("POST", "/deliveries/1/redeliver", None)]:
        resp = await client.request(method, f"/api/v1/webhooks/{wid}{path}", json=body, api_key=b)
        assert resp.status == 404, (method, path, resp.status)
    assert (await client.get("/api/v1/webhooks", api_key=b)).json()["webhooks"] == []
    still = await client.get(f"/api/v1/webhooks/{wid}", api_key=a)
    assert still.status == 200 and still.json()["active"] is True


async def test_update_changes_url_events_scope_and_active(app, client, public_dns):
    created = await make_app_key(app, client)
    key = created["apiKey"]
    await make_community(app, "did:plc:c1")
    wid = (await create(client, key)).json()["webhookId"]
    resp = await client.put(f"/api/v1/webhooks/{wid}", api_key=key, json={
        "url": "https://other.example.com/x", "events": ["record.deleted"],
        "communityDid": "did:plc:c1", "active": False})
    assert resp.status == 200, resp.text
    got = (await client.get(f"/api/v1/webhooks/{wid}", api_key=key)).json()
    assert got["url"] == "https://other.example.com/x" and got["events"] == ["record.deleted"]
    assert got["communityDid"] == "did:plc:c1" and got["active"] is False
    unscoped = await client.put(f"/api/v1/webhooks/{wid}", api_key=key, json={"communityDid": None})
    assert unscoped.json()["communityDid"] is None
    bad = await client.put(f"/api/v1/webhooks/{wid}", api_key=key, json={"events": ["nope"]})
    assert bad.status == 400


async def test_scope_to_unknown_or_invisible_community_is_404(app, client, public_dns):
    a = await make_app_key(app, client, "did:plc:alice", "a.example.com")
    b = await make_app_key(app, client, "did:plc:bob", "b.example.com")
    await make_community(app, "did:plc:secret", "private", creator_app_id=a["appId"])
    assert (await create(client, b["apiKey"], communityDid="did:plc:nowhere")).status == 404
    assert (await create(client, b["apiKey"], communityDid="did:plc:secret")).status == 404
    assert (await create(client, a["apiKey"], communityDid="did:plc:secret")).status == 201
    assert (await create(client, a["apiKey"], communityDid="not-a-did")).status == 400


async def test_delete_removes_the_webhook(app, client, public_dns):
    key = (await make_app_key(app, client))["apiKey"]
    wid = (await create(client, key)).json()["webhookId"]
    assert (await client.delete(f"/api/v1/webhooks/{wid}", api_key=key)).status == 204
    assert (await client.get(f"/api/v1/webhooks/{wid}", api_key=key)).status == 404
    assert (await client.get("/api/v1/webhooks", api_key=key)).json()["webhooks"] == []


async def test_list_is_paginated_with_a_keyset_cursor(app, client, clock, public_dns):
    key = (await make_app_key(app, client))["apiKey"]
    made = []
    for _ in range(5):
        made.append((await create(client, key)).json()["webhookId"])
        clock.advance(1)
    first = (await client.get("/api/v1/webhooks", api_key=key, params={"limit": 2})).json()
    assert [h["webhookId"] for h in first["webhooks"]] == made[:2]
    second = (await client.get("/api/v1/webhooks", api_key=key,
                               params={"limit": 2, "cursor": first["cursor"]})).json()
    third = (await client.get("/api/v1/webhooks", api_key=key,
                              params={"limit": 2, "cursor": second["cursor"]})).json()
    assert [h["webhookId"] for h in second["webhooks"] + third["webhooks"]] == made[2:]
    assert "cursor" not in third


async def test_rotate_secret_returns_a_new_secret_once(app, client, public_dns):
    key = (await make_app_key(app, client))["apiKey"]
    hook = (await create(client, key)).json()
    resp = await client.post(f"/api/v1/webhooks/{hook['webhookId']}/rotate-secret", api_key=key)
    assert resp.status == 200
    rotated = resp.json()
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != hook["secret"]
    assert rotated["secretRotatedAt"] is not None and rotated["previousSecretValidUntil"]
    again = await client.get(f"/api/v1/webhooks/{hook['webhookId']}", api_key=key)
    assert rotated["secret"] not in again.text


async def test_database_file_holds_no_plaintext_secret(app, client, state_dir, public_dns):
    key = (await make_app_key(app, client))["apiKey"]
    hook = (await create(client, key)).json()
    rotated = (await client.post(f"/api/v1/webhooks/{hook['webhookId']}/rotate-secret",
                                 api_key=key)).json()
    await app.db.close()  # checkpoint the WAL into the main file
    blob = b"".join(p.read_bytes() for p in state_dir.iterdir() if p.is_file())
    for secret in (hook["secret"], rotated["secret"]):
        assert secret.encode() not in blob
        assert secret[6:].encode() not in blob
        assert base64.b64decode(secret[6:]) not in blob
    app.db.__init__(app.db.path)
    await app.db.open()


# ------------------------------------------------------------------ SSRF (default config)


@pytest.mark.parametrize("url, words", [
    ("https://127.0.0.1/hook", "loopback"),
    ("https://10.0.0.1/hook", "private"),
    # a host name's refusal never says what it resolves to (issue 22): the same words for all
    ("https://ten.example.com/hook", "ten.example.com does not resolve to a public address"),
    ("https://localhost:8443/hook", "localhost does not resolve to a public address"),
    ("https://mixed.example.com/hook", "mixed.example.com does not resolve to a public address"),
    ("https://[::1]/hook", "loopback"),
    ("https://169.254.169.254/latest/meta-data", "link-local"),
    ("https://[::ffff:10.0.0.1]/hook", "private"),
    ("https://0.0.0.0/hook", "unspecified"),
    ("https://100.64.0.1/hook", "not a public address"),
    ("http://hooks.example.com/hook", "https"),
    ("ftp://hooks.example.com/hook", "https"),
    ("https://user:pw@hooks.example.com/hook", "password"),
])
async def test_non_public_or_insecure_target_is_refused_at_creation(app, client, public_dns, url, words):
    key = (await make_app_key(app, client))["apiKey"]
    resp = await create(client, key, url=url)
    assert resp.status == 400, (url, resp.text)
    assert "url" in resp.json()["message"] and words in resp.json()["message"], resp.json()
    if "example.com" in url or "localhost" in url:
        assert not any(ip in resp.text for ip in ("10.0.0.1", "127.0.0.1", "::1")), resp.text
    assert (await client.get("/api/v1/webhooks", api_key=key)).json()["webhooks"] == []


async def test_refused_target_also_refused_on_update(app, client, public_dns):
    key = (await make_app_key(app, client))["apiKey"]
    wid = (await create(client, key)).json()["webhookId"]
    resp = await client.put(f"/api/v1/webhooks/{wid}", api_key=key, json={"url": "https://10.0.0.1/"})
    assert resp.status == 400
    assert (await client.get(f"/api/v1/webhooks/{wid}", api_key=key)).json()["url"] == HOOK


class TestOperatorAllowlist:
    @pytest.fixture
    def config_overrides(self):
        return {"webhooks": {"allowed_targets": ["10.0.0.0/8", "intranet.example.com"]}}

    async def test_allowlisted_ranges_and_hosts_are_accepted(self, app, client, public_dns):
        public_dns["intranet.example.com"] = ["192.168.1.5"]
        key = (await make_app_key(app, client))["apiKey"]
        assert (await create(client, key, url="https://10.0.0.1/hook")).status == 201
        assert (await create(client, key, url="https://intranet.example.com/hook")).status == 201
        assert (await create(client, key, url="https://127.0.0.1/hook")).status == 400
        assert (await create(client, key, url="http://10.0.0.1/hook")).status == 400


class TestDevelopmentHttp:
    @pytest.fixture
    def config_overrides(self):
        return LOOPBACK_TARGETS

    async def test_http_loopback_allowed_when_configured(self, app, client):
        key = (await make_app_key(app, client))["apiKey"]
        resp = await create(client, key, url="http://127.0.0.1:9/hook")
        assert resp.status == 201, resp.text


@pytest.mark.parametrize("section, key", [
    ({"max_in_flight": 0}, "webhooks.max_in_flight"),
    ({"request_timeout_seconds": 0}, "webhooks.request_timeout_seconds"),
    ({"retry_jitter": 1.5}, "webhooks.retry_jitter"),
    ({"allowed_targets": ["10.0.0.0/33"]}, "webhooks.allowed_targets[0]"),
])
def test_unusable_webhook_settings_are_refused_naming_the_key(section, key):
    from daemon.runtime.config import ConfigError
    from plugins.webhooks.settings import WebhooksConfig, check
    with pytest.raises(ConfigError) as info:
        check(WebhooksConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in section.items()}))
    assert info.value.path == key
