"""The login in real headless Chromium: a form post to /login, sign-in and consent on the
devnet PDS's own pages, back to /oauth/callback, ending logged in on the service. The
consent page is saved as consent.png and consent-details.png in the test's tmp dir."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.fixtures_oauth import SERVICE_HOST

pytestmark = [pytest.mark.pds, pytest.mark.browser]

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--host-resolver-rules=MAP {SERVICE_HOST} 127.0.0.1"]


@pytest.fixture
def config_overrides(oauth_tls_config: dict[str, Any]) -> dict[str, Any]:
    return oauth_tls_config


async def test_browser_login_ends_logged_in(app, tls_server, oauth_account, tmp_path):
    from playwright.async_api import async_playwright

    base = app.config.server.base_url
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                           args=CHROMIUM_ARGS)
        try:
            # The test CA is not in Chromium's store; accepting the certificate is fine here.
            context = await browser.new_context(ignore_https_errors=True)
            page = await context.new_page()
            await page.goto(base + "/")  # the service's own sign-in page
            await page.get_by_label("Handle, DID or server address").fill(oauth_account["handle"])
            started = time.perf_counter()
            async with page.expect_navigation(url=lambda u: "/oauth/authorize" in u):
                await page.get_by_role("button", name="Sign in").click()
            # The login is bound to this browser by a cookie only the callback gets.
            flow = [c for c in await context.cookies() if c["name"] == "oauth-flow"]
            assert len(flow) == 1 and flow[0]["path"] == "/oauth/callback"
            assert flow[0]["httpOnly"] and flow[0]["secure"] and flow[0]["sameSite"] == "Lax"
            await page.get_by_placeholder("Enter your password").fill(oauth_account["password"])
            await page.get_by_role("button", name="Sign in").click()
            # The consent screen asks for the membership record only: none of the broad
            # permissions transition:generic brings (Bluesky profile, posts, likes and
            # follows; any public data; authenticated actions towards any service).
            await page.get_by_role("button", name="Authorize").wait_for()
            await page.screenshot(path=str(tmp_path / "consent.png"), full_page=True)
            consent = await page.locator("body").inner_text()
            for broad in ("Bluesky", "Manage your profile", "any public data", "Authenticate",
                          "any service"):
                assert broad not in consent, (broad, consent)
            assert "Repository" in consent and "Publish changes" in consent
            await page.get_by_role("button", name="Expand details").click()
            await page.get_by_role("button", name="Close").wait_for()
            await page.screenshot(path=str(tmp_path / "consent-details.png"), full_page=True)
            details = await page.locator("body").inner_text()
            granted = [line.split()[0] for line in details.splitlines()
                       if line.startswith("community.") or line.startswith("app.bsky.")]
            assert granted == ["community.commonroom.membership"], details
            await page.get_by_role("button", name="Close").click()
            async with page.expect_navigation(url=base + "/users/me", timeout=30_000):
                await page.get_by_role("button", name="Authorize").click()
            elapsed = time.perf_counter() - started

            me = json.loads(await page.locator("body").inner_text())
            assert me["did"] == oauth_account["did"]
            assert me["handle"] == oauth_account["handle"]
            cookies = {c["name"]: c for c in await context.cookies(base)}
            assert cookies["sid"]["httpOnly"] and cookies["sid"]["secure"]
            assert not cookies["csrf-token"]["httpOnly"]
            assert "oauth-flow" not in {c["name"] for c in await context.cookies()}
            print(f"\nbrowser login round trip: {elapsed * 1000:.0f} ms")

            # the home page knows who is signed in, and signing out (a fetch carrying the
            # csrf-token cookie's value in x-csrf-token) ends the session
            await page.goto(base + "/")
            assert await page.locator(".who-handle").inner_text() == oauth_account["handle"]
            await page.get_by_role("button", name="Sign out").click()
            await page.get_by_label("Handle, DID or server address").wait_for()
            resp = await page.goto(base + "/users/me")
            assert resp.status == 401
        finally:
            await browser.close()
