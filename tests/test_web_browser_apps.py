"""The app, webhook and picture journeys through the web app in real headless Chromium,
against the devnet PDS, with and without JavaScript:

Alice creates an open community, uploads an avatar (previewed first, with JavaScript),
sees a file that is not a picture refused next to its field, and uses her own Bluesky
banner;
she registers an app, copies its key from the page, and a script (httpx) uses it against
/api/v1; she rotates the key and the old one is refused. She adds a webhook for her
community; a loopback receiver gets a signed delivery when Bob joins; the delivery is in
the page's log, and "Send again" delivers it again; she deletes the webhook and
deactivates the app (its key is refused). With JavaScript the app is registered and its
key copied by keyboard alone. An unknown page is the HTML 404.
Each step is checked through the JSON routes, on the PDS or at the receiver; axe and
screenshots (1280 and 390 px) on every page, as in tests/test_web_browser.py."""

from __future__ import annotations

import io
import os
import re
import time
from typing import Any

import httpx
import pytest
from PIL import Image

from daemon.base import FakeClock
from plugins.communities import store as communities_store
from tests.fixtures_communities import pds_record
from tests.fixtures_webhooks import LOOPBACK_TARGETS, wait_until
from tests.test_web_browser import Pages, chromium, signed_in_context

pytestmark = [pytest.mark.pds, pytest.mark.browser]


@pytest.fixture
def config_overrides(oauth_tls_config: dict[str, Any]) -> dict[str, Any]:
    # as tests/test_web_browser.py, plus webhooks to the loopback receiver
    return {**oauth_tls_config, "oauth": {"after_login_url": "/"},
            "rate_limits": {"api": {"requests": 100000, "window_seconds": 60},
                            "session": {"requests": 100000, "window_seconds": 60}},
            **LOOPBACK_TARGETS}


@pytest.fixture
def clock() -> FakeClock:
    # The receiver checks webhook-timestamp against the real time (5 minutes' tolerance).
    return FakeClock(start=time.time())


def png_file(path: Any, size: tuple[int, int], color: tuple[int, int, int]) -> str:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    path.write_bytes(buf.getvalue())
    return str(path)


async def shown_secret(page: Any, js: bool) -> str:
    """The key or secret as a person takes it from the page: with JavaScript through the
    Copy button and the clipboard, without it from the read-only field."""
    field = page.get_by_label(re.compile(r"^(API key|Signing secret)$"))
    value = await field.input_value()
    assert "shown only this once" in await page.locator(".warning").inner_text()
    if js:
        await page.get_by_role("button", name=re.compile(r"^Copy")).click()
        await page.get_by_text("Copied.").wait_for()
        copied = await page.evaluate("navigator.clipboard.readText()")
        assert copied == value
        return copied
    assert await page.get_by_role("button", name=re.compile(r"^Copy")).count() == 0  # needs the script
    return value


async def tab_to(page: Any, selector: str, most: int = 40) -> None:
    """Press Tab until the element matching `selector` has the focus."""
    for _ in range(most):
        await page.keyboard.press("Tab")
        if await page.evaluate("s => document.activeElement && document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"Tab never reached {selector}")


@pytest.mark.parametrize("js", [True, False], ids=["js", "nojs"])
async def test_apps_webhooks_and_pictures_through_the_pages(
        js, app, client, service, devnet, new_handle, receiver, tmp_path):
    base = app.config.server.base_url
    alice = devnet.create_account(new_handle("alice"))
    bob = devnet.create_account(new_handle("bob"))
    pages = Pages(tmp_path, js)
    name = f"Potters {os.urandom(3).hex()}"
    rec = receiver()
    async with chromium() as browser:
        a_ctx, a_client = await signed_in_context(browser, app, service, alice, js=js)
        if js:
            await a_ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
        a_page = await a_ctx.new_page()
        a_page.on("dialog", lambda dialog: dialog.accept())

        # ---- an unknown page is a page, not JSON
        resp = await a_page.goto(base + "/no-such-page")
        assert resp.status == 404 and await a_page.locator("h1").inner_text() == "Page not found"
        await pages.check(a_page, "not-found")

        # ---- Alice creates an open community and uploads its avatar
        await a_page.goto(base + "/new")
        await a_page.get_by_label("Name", exact=True).fill(name)
        await a_page.get_by_label("Open: anyone can join").check()
        await a_page.get_by_role("button", name="Create the community").click()
        await a_page.wait_for_load_state()
        # the recovery key is shown once (tests/test_web_browser_recovery_key.py), then onwards
        assert await a_page.locator("h1").inner_text() == "Keep the community's recovery key"
        await a_page.get_by_role("link", name="I have stored it: continue").click()
        await a_page.wait_for_url(re.compile(r"/c/[^/?]+\?done=created$"))
        community_path = a_page.url.split(base, 1)[1].split("?")[0]
        did = (await a_client.get("/users/me/memberships")).json()["memberships"][0]["communityDid"]
        handle = (await communities_store.get_community(app.db, did))["handle"]

        await a_page.goto(base + community_path + "/settings/pictures")
        await a_page.get_by_label("Choose a new avatar").set_input_files(
            png_file(tmp_path / "avatar.png", (400, 400), (200, 90, 40)))
        if js:  # the chosen file is shown before it is sent
            preview = a_page.get_by_alt_text("Preview of the new avatar")
            assert (await preview.get_attribute("src")).startswith("blob:")
        await pages.check(a_page, "settings-pictures")
        await a_page.get_by_role("button", name="Upload the avatar").click()
        await a_page.wait_for_url(base + community_path + "/settings/pictures?done=avatar")
        assert "The new avatar is saved" in await a_page.get_by_role("status").inner_text()
        row = await communities_store.get_community(app.db, did)
        assert row["avatar_cid"] and row["avatar_mime"] == "image/png"
        profile = await pds_record(app, did, "profile")
        assert profile["avatar"]["ref"]["$link"] == row["avatar_cid"]
        assert await a_page.get_by_alt_text("Current avatar").count() == 1

        # a file that is not a picture: refused next to its field, nothing changed
        (tmp_path / "notes.png").write_bytes(b"these are notes, not a picture")
        await a_page.get_by_label("Choose a new banner").set_input_files(str(tmp_path / "notes.png"))
        await a_page.get_by_role("button", name="Upload the banner").click()
        assert "must be a PNG or JPEG" in await a_page.locator("#banner-error").inner_text()
        assert await a_page.locator(".error-summary").get_by_role("link").get_attribute("href") == "#banner"
        await pages.check(a_page, "settings-pictures-error")
        assert (await communities_store.get_community(app.db, did))["banner_cid"] is None

        # "use my own banner": the banner of Alice's own Bluesky profile, on her PDS
        banner_png = io.BytesIO()
        Image.new("RGB", (600, 200), (20, 120, 200)).save(banner_png, "PNG")
        auth = {"Authorization": f"Bearer {alice['accessJwt']}"}
        async with httpx.AsyncClient(base_url=devnet.pds_url) as http:
            blob = (await http.post("/xrpc/com.atproto.repo.uploadBlob", content=banner_png.getvalue(),
                                    headers={**auth, "Content-Type": "image/png"})).json()["blob"]
            put = await http.post("/xrpc/com.atproto.repo.putRecord", headers=auth, json={
                "repo": alice["did"], "collection": "app.bsky.actor.profile", "rkey": "self",
                "record": {"$type": "app.bsky.actor.profile", "displayName": "Alice", "banner": blob}})
            assert put.status_code == 200, put.text
        await a_page.goto(base + community_path + "/settings/pictures")
        await a_page.get_by_role("button", name="Use my own Bluesky banner").click()
        await a_page.wait_for_url(base + community_path + "/settings/pictures?done=banner")
        row = await communities_store.get_community(app.db, did)
        assert row["banner_cid"] and (await pds_record(app, did, "profile"))["banner"]["ref"]["$link"] == row["banner_cid"]
        await a_page.goto(base + community_path)
        assert await a_page.locator("img.banner").count() == 1
        await pages.check(a_page, "community-with-pictures")

        # ---- Alice registers an app; a script uses the key she copied
        await a_page.get_by_role("link", name="My apps").click()
        await a_page.wait_for_url(base + "/apps")
        await pages.check(a_page, "apps-empty")
        if js:  # by keyboard alone: Tab to the form, type, Enter; Tab to Copy, Enter
            await tab_to(a_page, "#name")
            await a_page.keyboard.type("Potters bot")
            await a_page.keyboard.press("Tab")
            await a_page.keyboard.type("bot.potters.example")
            await a_page.keyboard.press("Enter")
            await a_page.locator("h1", has_text="Potters bot is registered").wait_for()
            await tab_to(a_page, "button[data-copy]")
            await a_page.keyboard.press("Enter")
            await a_page.get_by_text("Copied.").wait_for()
        else:
            await a_page.get_by_label("Name").fill("Potters bot")
            await a_page.get_by_label("Domain").fill("bot.potters.example")
            await a_page.get_by_role("button", name="Register the app").click()
        assert await a_page.locator("h1").inner_text() == "Potters bot is registered"
        key = await shown_secret(a_page, js)
        await pages.check(a_page, "app-key-shown")
        async with httpx.AsyncClient(base_url=client.base_url) as script:
            got = await script.get(f"/api/v1/communities/{did}", headers={"X-Api-Key": key})
            assert got.status_code == 200, got.text
            assert got.json()["community"]["displayName"] == name
        await a_page.get_by_role("link", name="I have copied it: continue").click()
        await a_page.wait_for_url(re.compile(r"/apps/app_[0-9a-f]{16}$"))
        app_path = a_page.url.split(base, 1)[1]
        await pages.check(a_page, "app")

        # ---- she rotates the key: the old one is refused, the new one works
        await a_page.get_by_role("link", name="Make a new key").click()
        assert "stops working at once" in await a_page.locator("main").inner_text()
        await pages.check(a_page, "app-rotate-confirm")
        await a_page.get_by_role("button", name="Make a new key").click()
        assert await a_page.locator("h1").inner_text() == "A new key for Potters bot"
        new_key = await shown_secret(a_page, js)
        assert new_key != key
        async with httpx.AsyncClient(base_url=client.base_url) as script:
            old = await script.get(f"/api/v1/communities/{did}", headers={"X-Api-Key": key})
            assert old.status_code == 401
            new = await script.get(f"/api/v1/communities/{did}", headers={"X-Api-Key": new_key})
            assert new.status_code == 200

        # ---- she lowers the app's rate limit
        await a_page.goto(base + app_path)
        await a_page.get_by_label("Requests").fill("50")
        await a_page.get_by_label("per (seconds)").fill("60")
        await a_page.get_by_role("button", name="Save the limit").click()
        await a_page.wait_for_url(base + app_path + "?done=limit#limit")
        limit = (await a_client.get(f"/api/v1{app_path}/rate-limit")).json()
        assert limit == {"maxRequests": 50, "windowMs": 60000, "custom": True}

        # ---- a webhook for her community, made in the page
        await a_page.get_by_role("link", name="Add a webhook").click()
        await pages.check(a_page, "webhook-new")
        await a_page.get_by_label("Address (URL)").fill(rec.url)
        await a_page.get_by_label(re.compile("^Someone joined")).check()
        await a_page.get_by_label(re.compile("^Community")).fill(handle)
        await a_page.get_by_role("button", name="Create the webhook").click()
        assert await a_page.locator("h1").inner_text() == "The webhook is ready"
        rec.secrets.append(await shown_secret(a_page, js))
        await pages.check(a_page, "webhook-secret-shown")
        await a_page.get_by_role("link", name="I have copied it: continue").click()
        await a_page.wait_for_url(re.compile(r"/webhooks/wh_[0-9a-f]{16}$"))
        hook_path = a_page.url.split(base, 1)[1]
        hooks = (await a_client.get(f"/api/v1{app_path}/webhooks")).json()["webhooks"]
        assert [(h["events"], h["communityDid"]) for h in hooks] == [(["member.joined"], did)]

        # ---- Bob joins: the receiver gets a signed delivery
        b_ctx, _ = await signed_in_context(browser, app, service, bob, js=js)
        b_page = await b_ctx.new_page()
        await b_page.goto(base + community_path)
        await b_page.get_by_role("button", name="Join", exact=True).click()
        await b_page.wait_for_url(base + community_path + "?done=joined")
        await wait_until(lambda: len(rec.requests) >= 1, what="the delivery of member.joined")
        first = rec.requests[0]
        assert first.verify_error is None, first.verify_error
        assert first.verified["type"] == "member.joined"
        assert first.verified["data"]["memberDid"] == bob["did"]

        # ---- the delivery is in the page's log; "Send again" delivers it again
        async def delivered_in_log() -> bool:
            await a_page.goto(base + hook_path)
            return "Delivered" in await a_page.locator("#deliveries").inner_text()
        await wait_until(delivered_in_log, what="the delivery in the log")
        log = await a_page.locator("#deliveries").inner_text()
        assert "member.joined" in log and "HTTP 200" in log
        await pages.check(a_page, "webhook-log")
        await a_page.get_by_role("button", name=re.compile(r"^Send again")).first.click()
        await a_page.wait_for_url(re.compile(r"\?done=redelivered#deliveries$"))
        await wait_until(lambda: len(rec.requests) >= 2, what="the redelivery")
        again = rec.requests[1]
        assert again.verify_error is None and again.verified["data"]["memberDid"] == bob["did"]
        assert "again of #" in await a_page.locator("#deliveries").inner_text()

        # ---- rotate the signing secret in the page; the receiver verifies with it
        await a_page.get_by_role("link", name="Make a new secret").click()
        await pages.check(a_page, "webhook-rotate-confirm")
        await a_page.get_by_role("button", name="Make a new secret").click()
        rec.secrets.insert(0, await shown_secret(a_page, js))
        await a_page.goto(base + "/apps")
        await pages.check(a_page, "apps")

        # ---- she deletes the webhook and deactivates the app: the key stops working
        await a_page.goto(base + hook_path)
        await a_page.get_by_role("link", name="Delete the webhook").click()
        await pages.check(a_page, "webhook-delete-confirm")
        await a_page.get_by_role("button", name="Delete the webhook").click()
        await a_page.wait_for_url(base + app_path + "?done=webhook_deleted#webhooks")
        assert (await a_client.get(f"/api/v1{app_path}/webhooks")).json()["webhooks"] == []
        await a_page.get_by_role("link", name="Deactivate the app").click()
        await a_page.get_by_role("button", name="Deactivate Potters bot").click()
        await a_page.wait_for_url(base + app_path + "?done=deactivated")
        assert "Deactivated" in await a_page.locator("main").inner_text()
        async with httpx.AsyncClient(base_url=client.base_url) as script:
            gone = await script.get(f"/api/v1/communities/{did}", headers={"X-Api-Key": new_key})
            assert gone.status_code == 401
    # the pages that were checked
    assert {"app-key-shown", "webhook-log", "settings-pictures"} <= set(pages.seen)
