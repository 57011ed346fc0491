"""Moving a community from the web app's Danger zone, in real headless Chromium (with and
without JavaScript), against two real PDSes on one PLC directory: the primary admin opens the
Danger zone, fills the move form (a wrong handle is said next to its field), watches the
progress page and ends on the moved community; a non-primary admin gets the 403 page that says
who may. axe checks the pages with JavaScript on; screenshots at 1280 and 390 px go to
$WEBMOVE_SHOTS (default: the test's tmp directory)."""

from __future__ import annotations

import json
import os
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_communities import Api
from tests.test_web_browser import Pages, chromium, signed_in_context

pytestmark = [pytest.mark.pds, pytest.mark.browser]


@pytest.fixture
def config_overrides(oauth_tls_config: dict[str, Any]) -> dict[str, Any]:
    return {**oauth_tls_config, "oauth": {"after_login_url": "/"}}


@pytest.mark.parametrize("js", [True, False], ids=["js", "nojs"])
async def test_the_primary_admin_moves_the_community_from_the_danger_zone(
        app, client, service, devnet, devnet_b, new_handle, tmp_path, js):
    base = app.config.server.base_url
    alice = devnet.create_account(new_handle("alice"))
    bob = devnet.create_account(new_handle("bob"))
    carol = devnet.create_account(new_handle("carol"))
    shots = Path(os.environ.get("WEBMOVE_SHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    pages = Pages(shots, js=js)
    tag = "js" if js else "nojs"
    api = await Api.make(app, client)
    created = await api.create(alice, f"Travellers {os.urandom(2).hex()}")
    did, handle = created["did"], created["handle"]
    assert (await api.join(did, bob["did"])).status == 201
    assert (await api.post(f"/api/v1/communities/{did}/admins/promote",
                           {"adminDid": alice["did"], "memberDid": bob["did"]})).status == 200
    assert (await api.join(did, carol["did"])).status == 201
    given = await api.post(f"/api/v1/communities/{did}/members/{carol['did']}/roles",
                           {"adminDid": alice["did"], "role": "moderator"})
    assert given.status == 200, given.text
    async with chromium() as browser:
        # a non-primary admin and a moderator: the page says who may
        for person in (bob, carol):
            context, _ = await signed_in_context(browser, app, service, person, js=js)
            page = await context.new_page()
            resp = await page.goto(f"{base}/c/{handle}/settings/move")
            assert resp.status == 403
            said = await page.locator("main").inner_text()
            assert "move the community to another PDS" in said and "primary admin" in said
            await context.close()

        context, _ = await signed_in_context(browser, app, service, alice, js=js)
        page = await context.new_page()
        await page.goto(f"{base}/c/{handle}/settings/danger")
        await page.get_by_role("link", name="Move the community…").click()
        await page.wait_for_load_state()
        await pages.check(page, f"move-form-{tag}")
        await page.get_by_label("The new PDS's address").fill(devnet_b.pds_url)
        await page.get_by_label(re.compile("To confirm, type the community's handle")).fill("wrong.test")
        await page.get_by_role("button", name="Move the community").click()
        await page.wait_for_load_state()
        assert f"Type the community's handle, {handle}, to move it" in await page.locator("main").inner_text()
        await pages.check(page, f"move-error-{tag}")
        await page.get_by_label(re.compile("To confirm, type the community's handle")).fill(handle)
        await page.get_by_role("button", name="Move the community").click()
        await page.wait_for_load_state()
        heading = await page.locator("h1").inner_text()
        if heading.startswith("Moving"):
            await pages.check(page, f"move-progress-{tag}")
        # the page refreshes itself until the move is done
        for _ in range(120):
            if (await page.locator("h1").inner_text()).startswith("Move "):
                break
            await page.wait_for_timeout(500)
            if not js:
                await page.reload()
        assert devnet_b.pds_url in await page.locator("main").inner_text()
        await pages.check(page, f"move-done-{tag}")
        with urllib.request.urlopen(f"{devnet.plc_url}/{did}/data", timeout=10) as resp:
            assert json.loads(resp.read())["services"]["atproto_pds"]["endpoint"] == devnet_b.pds_url
        await context.close()
