"""A plugin page's form returns to its own page after sign-in (`PageHandler.form_page`'s
default, the page itself), in real headless Chromium against the devnet PDS: a member whose
session has ended posts the noticeboard's form, is asked to sign in, signs in through the
PDS's own pages and lands back on the board, where the form now posts. The board is
checked by axe and saved at 1280 and 390 px."""

from __future__ import annotations

from typing import Any

import pytest

from commonroom_testing.communities import Api
from tests.test_web_browser import Pages, chromium, signed_in_context

pytestmark = [pytest.mark.pds, pytest.mark.browser]


@pytest.fixture
def config_overrides(oauth_tls_config: dict[str, Any]) -> dict[str, Any]:
    return {**oauth_tls_config, "oauth": {"after_login_url": "/"}}


async def test_a_signed_out_visitor_who_posts_a_plugin_pages_form_signs_in_and_lands_back_on_it(
        app, client, service, devnet, new_handle, tmp_path):
    base = app.config.server.base_url
    alice = devnet.create_account(new_handle("alice"))
    bob = devnet.create_account(new_handle("bob"))
    api = await Api.make(app, client)
    community = await api.create(alice, "Board club")
    assert (await api.join(community["did"], bob["did"])).status == 201
    board = f"{base}/c/{community['handle']}/notices"
    pages = Pages(tmp_path, js=True)

    async with chromium() as browser:
        # JavaScript on: the PDS's own sign-in pages need it (ours work without; tests/test_web_browser.py)
        context, _ = await signed_in_context(browser, app, service, bob, js=True)
        page = await context.new_page()
        await page.goto(board)
        await page.get_by_label("Your notice").fill("Jumble sale on Sunday")
        await context.clear_cookies()          # the session ends (expired, or signed out elsewhere)
        await page.get_by_role("button", name="Post the notice").click()
        await page.wait_for_load_state()
        assert await page.get_by_role("heading", name="Sign in to continue").count() == 1
        assert await page.locator('input[name="returnTo"]').get_attribute("value") == \
            f"/c/{community['handle']}/notices"

        await page.get_by_label("Handle, DID or server address").fill(bob["handle"])
        async with page.expect_navigation(url=lambda u: "/oauth/authorize" in u):
            await page.get_by_role("button", name="Sign in").click()
        await page.get_by_placeholder("Enter your password").fill(bob["password"])
        await page.get_by_role("button", name="Sign in").click()
        async with page.expect_navigation(url=board, timeout=30_000):
            await page.get_by_role("button", name="Authorize").click()

        # back on the board, signed in: the form posts now
        await page.get_by_label("Your notice").fill("Jumble sale on Sunday")
        await page.get_by_role("button", name="Post the notice").click()
        await page.wait_for_load_state()
        assert "Your notice is on the board." in await page.content()
        assert await page.get_by_text("Jumble sale on Sunday").count() == 1
        await pages.check(page, "noticeboard")
        await context.close()
