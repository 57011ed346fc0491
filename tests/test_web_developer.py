"""The developer pages without a PDS: registering an app through the form (the key shown
once, on the POST's own answer, never cached), rotating and deactivating it, lowering its
rate limit, and an app's webhooks (create with event checkboxes and a community, edit,
rotate the secret, the delivery log, redeliver, delete), each checked through the JSON
routes with the app's key. Another person's app is a 404 page."""

from __future__ import annotations

import json
import re
import time
from urllib.parse import urlencode

import pytest

from daemon.base import FakeClock

from tests.fixtures_webhooks import LOOPBACK_TARGETS, emit_events, make_community, wait_until
from tests.helpers import login_as, register_app


@pytest.fixture
def config_overrides(request) -> dict:
    return getattr(request, "param", {})


@pytest.fixture
def clock():
    # Receivers verify webhook-timestamp against the real time (5 minutes' tolerance).
    return FakeClock(start=time.time())


def form(session, fields, *, token: bool = True) -> dict:
    """A form post as a browser sends it (repeated fields as a list of pairs)."""
    pairs = list(fields.items()) if isinstance(fields, dict) else list(fields)
    if token:
        pairs.append(("_csrf", session.csrf))
    return {"body": urlencode(pairs), "headers": {
        "Cookie": f"sid={session.sid}; csrf-token={session.csrf}",
        "Content-Type": "application/x-www-form-urlencoded"}}


def cookie(session) -> dict:
    return {"headers": {"Cookie": f"sid={session.sid}"}}


def shown_secret(page: str) -> str:
    return re.search(r'<input id="secret" type="text" readonly value="([^"]+)"', page).group(1)


async def test_register_shows_the_key_once_on_the_posts_own_page(app, client):
    alice = await login_as(app, "did:plc:devalice", "alice.test")
    page = await client.get("/apps", **cookie(alice))
    assert page.status == 200 and "<h1>My apps</h1>" in page.text and 'href="/apps" aria-current="page"' in page.text
    resp = await client.post("/apps", **form(alice, {"name": "Greeter", "domain": "greeter.example.com"}))
    assert resp.status == 200, resp.text          # not a redirect: the key is in this answer only
    assert resp.headers["Cache-Control"] == "no-store"
    assert "unsafe-inline" not in resp.headers["Content-Security-Policy"]
    assert " style=" not in resp.text and not re.search(r"<script(?![^>]*\bsrc=)", resp.text)
    key = shown_secret(resp.text)
    assert "shown only this once" in resp.text and "data-copy=\"secret\"" in resp.text
    verify = await client.post("/api/v1/apps/verify", api_key=key)
    assert verify.status == 200 and verify.json()["app"]["name"] == "Greeter"
    # the list and the app's page show the app, never the key again
    listing = (await client.get("/apps", **cookie(alice))).text
    assert "Greeter" in listing and key not in listing
    app_id = verify.json()["app"]["appId"]
    page = (await client.get(f"/apps/{app_id}", **cookie(alice))).text
    assert key not in page and "greeter.example.com" in page
    assert "requests per" in page


async def test_register_form_errors_are_next_to_the_fields_with_what_was_typed(app, client):
    alice = await login_as(app, "did:plc:devalice2", "alice2.test")
    resp = await client.post("/apps", **form(alice, {"name": "G", "domain": "not a domain"}))
    assert resp.status == 400
    page = resp.text
    assert 'href="#name"' in page and 'href="#domain"' in page
    assert 'value="not a domain"' in page and "<title>Error: My apps" in page
    assert (await client.get("/api/v1/apps", session=alice)).json()["apps"] == []
    await register_app(client, alice, domain="taken.example.com")
    resp = await client.post("/apps", **form(alice, {"name": "Again", "domain": "taken.example.com"}))
    assert resp.status == 409 and "already have an active app for this domain" in resp.text
    # without the form's token nothing is registered
    resp = await client.post("/apps", **form(alice, {"name": "Sneaky", "domain": "s.example.com"}, token=False))
    assert resp.status == 403
    assert len((await client.get("/api/v1/apps", session=alice)).json()["apps"]) == 1


async def test_rotate_after_confirmation_shows_the_new_key_and_refuses_the_old(app, client):
    alice = await login_as(app, "did:plc:devalice3", "alice3.test")
    made = await register_app(client, alice)
    confirm = await client.get(f"/apps/{made['appId']}/rotate", **cookie(alice))
    assert confirm.status == 200 and "stops working at once" in confirm.text
    assert (await client.post("/api/v1/apps/verify", api_key=made["apiKey"])).status == 200  # GET changed nothing
    resp = await client.post(f"/apps/{made['appId']}/rotate", **form(alice, {}))
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
    new = shown_secret(resp.text)
    assert new != made["apiKey"]
    assert (await client.post("/api/v1/apps/verify", api_key=new)).status == 200
    assert (await client.post("/api/v1/apps/verify", api_key=made["apiKey"])).status == 401


async def test_deactivate_stops_the_key(app, client):
    alice = await login_as(app, "did:plc:devalice4", "alice4.test")
    made = await register_app(client, alice)
    assert "cannot be undone" in (await client.get(f"/apps/{made['appId']}/deactivate", **cookie(alice))).text
    resp = await client.post(f"/apps/{made['appId']}/deactivate", **form(alice, {}))
    assert resp.status == 303 and resp.headers["Location"] == f"/apps/{made['appId']}?done=deactivated"
    assert (await client.post("/api/v1/apps/verify", api_key=made["apiKey"])).status == 401
    page = (await client.get(resp.headers["Location"], **cookie(alice))).text
    assert "Deactivated" in page and "Its key no longer works" in page and "/rotate" not in page


async def test_rate_limit_can_be_lowered_not_raised_and_reset(app, client):
    alice = await login_as(app, "did:plc:devalice5", "alice5.test")
    made = await register_app(client, alice)
    api = app.config.rate_limits.api
    path = f"/apps/{made['appId']}/rate-limit"
    resp = await client.post(path, **form(alice, {"maxRequests": "5", "windowSeconds": "60"}))
    assert resp.status == 303
    limit = (await client.get(f"/api/v1/apps/{made['appId']}/rate-limit", session=alice)).json()
    assert limit == {"maxRequests": 5, "windowMs": 60000, "custom": True}
    page = (await client.get(f"/apps/{made['appId']}", **cookie(alice))).text
    assert "5 requests per 60 seconds" in page
    assert 'value="5"' in page and 'value="60"' in page   # the form shows the limit as it is
    resp = await client.post(path, **form(alice, {"maxRequests": str(api.requests * 10),
                                                  "windowSeconds": f"{api.window_seconds:g}"}))
    assert resp.status == 400 and "can only be lower" in resp.text
    assert f'value="{api.requests * 10}"' in resp.text   # what was typed, kept
    resp = await client.post(path, **form(alice, {"maxRequests": "many", "windowSeconds": "0"}))
    assert resp.status == 400 and 'href="#maxRequests"' in resp.text and 'href="#windowSeconds"' in resp.text
    assert (await client.get(f"/api/v1/apps/{made['appId']}/rate-limit", session=alice)).json()["maxRequests"] == 5
    assert (await client.post(path, **form(alice, {"reset": "yes"}))).status == 303
    limit = (await client.get(f"/api/v1/apps/{made['appId']}/rate-limit", session=alice)).json()
    assert limit["custom"] is False and limit["maxRequests"] == api.requests


async def test_another_persons_app_is_a_404_page(app, client):
    alice = await login_as(app, "did:plc:devalice6", "alice6.test")
    bob = await login_as(app, "did:plc:devbob6", "bob6.test")
    made = await register_app(client, alice)
    for path in (f"/apps/{made['appId']}", f"/apps/{made['appId']}/rotate", f"/apps/{made['appId']}/webhooks/new"):
        resp = await client.get(path, **cookie(bob))
        assert resp.status == 404 and "Page not found" in resp.text, path
    resp = await client.post(f"/apps/{made['appId']}/rotate", **form(bob, {}))
    assert resp.status == 404
    assert (await client.post("/api/v1/apps/verify", api_key=made["apiKey"])).status == 200
    # signed out: the sign-in page, which comes back here
    resp = await client.get("/apps")
    assert resp.status == 401 and 'name="returnTo" value="/apps"' in resp.text


@pytest.mark.parametrize("config_overrides", [LOOPBACK_TARGETS], indirect=True)
async def test_webhook_pages_create_edit_deliver_redeliver_rotate_delete(app, client, receiver):
    alice = await login_as(app, "did:plc:devalice7", "alice7.test")
    made = await register_app(client, alice)
    key, base = made["apiKey"], f"/apps/{made['appId']}"
    await make_community(app, "did:plc:bakers")
    rec = receiver()
    page = await client.get(base + "/webhooks/new", **cookie(alice))
    assert page.status == 200 and page.text.count('type="checkbox" id="event-') == len(app.event_kinds)
    # mistakes: no event, unknown community, an address the guard refuses
    resp = await client.post(base + "/webhooks/new", **form(alice, [
        ("url", "http://10.1.2.3/hook"), ("community", "nobody.test")]))
    assert resp.status == 400
    assert 'href="#events"' in resp.text and 'href="#community"' in resp.text and 'href="#url"' in resp.text
    assert 'value="http://10.1.2.3/hook"' in resp.text
    assert (await client.get("/api/v1/webhooks", api_key=key)).json()["webhooks"] == []
    resp = await client.post(base + "/webhooks/new", **form(alice, [
        ("url", rec.url), ("events", "member.joined"), ("events", "member.left"), ("community", "bakers.test")]))
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
    secret = shown_secret(resp.text)
    rec.secrets.append(secret)
    hook = (await client.get("/api/v1/webhooks", api_key=key)).json()["webhooks"][0]
    assert hook["events"] == ["member.joined", "member.left"] and hook["communityDid"] == "did:plc:bakers"
    hook_page = f"{base}/webhooks/{hook['webhookId']}"
    page = (await client.get(hook_page, **cookie(alice))).text
    assert "Nothing has been sent yet" in page
    # the settings form shows the webhook as it is
    assert f'id="url" name="url" type="text" inputmode="url" maxlength="2048" spellcheck="false" ' \
           f'autocapitalize="none" value="{rec.url}"' in page
    assert 'value="member.joined" checked' in page and 'value="member.left" checked' in page
    assert 'value="member.removed" checked' not in page and 'value="bakers.test"' in page
    # an event: a signed delivery, shown in the log
    await emit_events(app, "member.joined", "did:plc:bakers")
    await wait_until(lambda: len(rec.requests) == 1, what="the delivery")
    assert rec.requests[0].verified is not None
    await wait_until(lambda: _delivered(app, hook["webhookId"]), what="the delivery recorded")
    page = (await client.get(hook_page, **cookie(alice))).text
    assert "Delivered" in page and "member.joined" in page and "HTTP 200" in page
    delivery_id = re.search(r"/deliveries/(\d+)/redeliver", page).group(1)
    # the delivery's page: the body that was sent, and the receiver's answer (issue 24)
    detail = (await client.get(f"{hook_page}/deliveries/{delivery_id}", **cookie(alice))).text
    assert "&quot;type&quot;: &quot;member.joined&quot;" in detail and rec.requests[0].body.decode() == \
        json.dumps(json.loads(rec.requests[0].body), separators=(",", ":"), ensure_ascii=False)
    assert "HTTP 200, and (its first 2 KB):" in detail and "<code>ok</code>" in detail
    assert (await client.get(f"{hook_page}/deliveries/999999", **cookie(alice))).status == 404
    resp = await client.post(f"{hook_page}/deliveries/{delivery_id}/redeliver", **form(alice, {}))
    assert resp.status == 303 and "done=redelivered" in resp.headers["Location"]
    await wait_until(lambda: len(rec.requests) == 2, what="the redelivery")
    assert rec.requests[1].json()["type"] == "member.joined" and rec.requests[1].verified is not None
    assert f"again of #{delivery_id}" in (await client.get(hook_page, **cookie(alice))).text
    # edit: pause, another event only; what the API sees
    resp = await client.post(hook_page, **form(alice, [("url", rec.url), ("events", "member.removed"),
                                                       ("community", "")]))
    assert resp.status == 303
    got = (await client.get(f"/api/v1/webhooks/{hook['webhookId']}", api_key=key)).json()
    assert got["events"] == ["member.removed"] and got["communityDid"] is None and got["active"] is False
    # rotate the secret: confirmation, then the new one once
    assert "shown to you once" in (await client.get(hook_page + "/rotate", **cookie(alice))).text
    resp = await client.post(hook_page + "/rotate", **form(alice, {}))
    assert resp.status == 200 and shown_secret(resp.text) not in (secret,)
    # delete
    resp = await client.post(hook_page + "/delete", **form(alice, {}))
    assert resp.status == 303
    assert (await client.get("/api/v1/webhooks", api_key=key)).json()["webhooks"] == []


@pytest.mark.parametrize("config_overrides", [LOOPBACK_TARGETS], indirect=True)
async def test_webhook_pages_set_how_many_requests_go_at_once(app, client, receiver):
    alice = await login_as(app, "did:plc:devalice9", "alice9.test")
    made = await register_app(client, alice)
    key, base = made["apiKey"], f"/apps/{made['appId']}"
    rec = receiver()
    page = (await client.get(base + "/webhooks/new", **cookie(alice))).text
    assert 'id="concurrency" name="concurrency"' in page and 'value="1"' in page  # strict order unless changed
    resp = await client.post(base + "/webhooks/new", **form(alice, [
        ("url", rec.url), ("events", "member.joined"), ("concurrency", "4")]))
    assert resp.status == 200, resp.text
    hook = (await client.get("/api/v1/webhooks", api_key=key)).json()["webhooks"][0]
    assert hook["concurrency"] == 4
    hook_page = f"{base}/webhooks/{hook['webhookId']}"
    assert 'class="input-short" value="4"' in (await client.get(hook_page, **cookie(alice))).text
    # out of range, not a number, another script's digit: the field says so, nothing changes
    for bad in ("0", "33", "abc", "\u0665", ""):
        resp = await client.post(hook_page, **form(alice, [("url", rec.url), ("events", "member.joined"),
                                                           ("active", "yes"), ("concurrency", bad)]))
        assert resp.status == 400, bad
        assert 'href="#concurrency"' in resp.text and "whole number from 1 to 32" in resp.text
        assert 'aria-invalid="true"' in resp.text
    assert (await client.get(f"/api/v1/webhooks/{hook['webhookId']}", api_key=key)).json()["concurrency"] == 4
    resp = await client.post(hook_page, **form(alice, [("url", rec.url), ("events", "member.joined"),
                                                       ("active", "yes"), ("concurrency", "1")]))
    assert resp.status == 303
    got = (await client.get(f"/api/v1/webhooks/{hook['webhookId']}", api_key=key)).json()
    assert got["concurrency"] == 1 and got["active"] is True


async def _delivered(app, webhook_id: str) -> bool:
    from plugins.webhooks import store as webhooks
    return (await webhooks.delivery_counts(app.db, webhook_id)).get("delivered", 0) >= 1


@pytest.mark.parametrize("config_overrides", [LOOPBACK_TARGETS], indirect=True)
async def test_every_developer_page_has_the_strict_csp_and_one_h1(app, client):
    alice = await login_as(app, "did:plc:devalice8", "alice8.test")
    made = await register_app(client, alice)
    hook = (await client.post(f"/api/v1/apps/{made['appId']}/webhooks", session=alice,
                              json={"url": "http://127.0.0.1:9/hook", "events": ["member.joined"]})).json()
    base = f"/apps/{made['appId']}"
    for path in ("/apps", base, base + "/rotate", base + "/deactivate", base + "/webhooks/new",
                 f"{base}/webhooks/{hook['webhookId']}", f"{base}/webhooks/{hook['webhookId']}/rotate",
                 f"{base}/webhooks/{hook['webhookId']}/delete"):
        resp = await client.get(path, **cookie(alice))
        assert resp.status == 200, path
        csp = resp.headers["Content-Security-Policy"]
        assert "unsafe-inline" not in csp and "default-src 'none'" in csp, path
        page = resp.text
        assert page.count("<h1") == 1, path
        assert " style=" not in page and not re.search(r"<script(?![^>]*\bsrc=)", page), path
        assert 'aria-current="page"' in page or 'aria-current="true"' in page, path   # My apps


@pytest.mark.parametrize("config_overrides", [{"plugins": {"disabled": ["webhooks"]}}], indirect=True)
async def test_without_the_webhooks_plugin_the_developer_pages_show_no_webhooks(app, client):
    alice = await login_as(app, "did:plc:devalice", "alice.test")
    registered = await register_app(client, alice, domain="nohooks.example.com")
    page = await client.get(f"/apps/{registered['appId']}", **cookie(alice))
    assert page.status == 200 and registered["appId"] in page.text
    assert "Webhooks" not in page.text and "/webhooks/new" not in page.text
    gone = await client.get(f"/apps/{registered['appId']}/webhooks/new", **cookie(alice))
    assert gone.status == 404 and gone.headers["Content-Type"].startswith("text/html")
