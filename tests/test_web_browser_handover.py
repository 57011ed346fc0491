"""Handing a community over from the web app's Danger zone, in real headless Chromium (with and
without JavaScript), on the devnet: a non-primary admin and a moderator get the 403 page naming
who may; the primary admin confirms with the handle (a wrong one is said next to its field), sees
the passphrase once with the bundle's download, and the community's page here then says it left
and where it went. The downloaded bundle is then imported back through "bring your own account"
(a wrong passphrase said next to its field first). axe checks the pages with JavaScript on;
screenshots at 1280 and 390 px go to $WEBHANDOVER_SHOTS (default: the test's tmp directory)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from plugins.communities import bundle
from tests.fixtures_communities import Api
from tests.test_web_browser import Pages, chromium, signed_in_context

pytestmark = [pytest.mark.pds, pytest.mark.browser]


@pytest.fixture
def config_overrides(oauth_tls_config: dict[str, Any]) -> dict[str, Any]:
    return {**oauth_tls_config, "oauth": {"after_login_url": "/"}}


@pytest.mark.parametrize("js", [True, False], ids=["js", "nojs"])
async def test_the_primary_admin_hands_the_community_over_and_sees_the_passphrase_once(
        app, client, service, devnet, new_handle, tmp_path, js):
    base = app.config.server.base_url
    alice = devnet.create_account(new_handle("alice"))
    bob = devnet.create_account(new_handle("bob"))
    carol = devnet.create_account(new_handle("carol"))
    shots = Path(os.environ.get("WEBHANDOVER_SHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    pages = Pages(shots, js=js)
    tag = "js" if js else "nojs"
    api = await Api.make(app, client)
    created = await api.create(alice, f"Leavers {os.urandom(2).hex()}")
    did, handle = created["did"], created["handle"]
    path = f"/api/v1/communities/{did}"
    for person in (bob, carol):
        assert (await api.join(did, person["did"])).status == 201
    assert (await api.post(f"{path}/admins/promote", {"adminDid": alice["did"], "memberDid": bob["did"]})).status == 200
    resp = await api.post(f"{path}/members/{carol['did']}/roles", {"adminDid": alice["did"], "role": "moderator"})
    assert resp.status == 200, resp.text
    async with chromium() as browser:
        # another admin and a moderator: the page says who may
        for person, name in ((bob, "admin"), (carol, "moderator")):
            context, _ = await signed_in_context(browser, app, service, person, js=js)
            page = await context.new_page()
            resp = await page.goto(f"{base}/c/{handle}/settings/handover")
            assert resp.status == 403
            text = await page.locator("main").inner_text()
            assert "hand the community over to another Commonroom" in text and "primary admin" in text, text
            await pages.check(page, f"handover-403-{name}-{tag}")
            await context.close()

        context, _ = await signed_in_context(browser, app, service, alice, js=js)
        page = await context.new_page()
        await page.goto(f"{base}/c/{handle}/settings/danger")
        await pages.check(page, f"handover-danger-{tag}")
        await page.get_by_role("link", name="Hand the community over…").click()
        await page.wait_for_load_state()
        await pages.check(page, f"handover-form-{tag}")
        await page.get_by_label(re.compile("The other Commonroom's address")).fill("https://two.example")
        await page.get_by_label(re.compile("To confirm, type the community's handle")).fill("wrong.test")
        await page.get_by_role("button", name="Hand the community over").click()
        await page.wait_for_load_state()
        assert f"Type the community's handle, {handle}, to hand it over" in await page.locator("main").inner_text()
        await pages.check(page, f"handover-error-{tag}")
        assert (await api.get(path)).status == 200  # nothing changed
        await page.get_by_label(re.compile("To confirm, type the community's handle")).fill(handle)
        async with page.expect_navigation():
            await page.get_by_role("button", name="Hand the community over").click()
        main = await page.locator("main").inner_text()
        assert "shown only this once" in main and "https://two.example" in main
        passphrase = await page.locator("#secret").input_value()
        assert re.fullmatch(r"([A-Z2-7]{4}-){7}[A-Z2-7]{4}", passphrase), passphrase
        await pages.check(page, f"handover-done-{tag}")
        async with page.expect_download() as caught:
            await page.get_by_role("link", name=re.compile("Download .*crhandover")).click()
        download = await caught.value
        saved = tmp_path / download.suggested_filename
        await download.save_as(saved)
        assert saved.name.endswith(".crhandover")
        assert bundle.open_bundle(saved.read_bytes(), passphrase)["did"] == did

        # gone from here, saying where it went; the passphrase is never shown again
        assert (await api.get(path)).status == 410
        resp = await page.goto(f"{base}/c/{handle}/settings/handover")
        assert resp.status in (404, 410) and passphrase not in await page.content()
        resp = await page.goto(f"{base}/c/{did}")
        assert resp.status == 410 and "https://two.example" in await page.locator("main").inner_text()
        await pages.check(page, f"handover-gone-{tag}")

        # "bring your own account" takes the bundle back: a wrong passphrase first
        await page.goto(f"{base}/new")
        await page.get_by_role("link", name="Import the handover bundle").click()
        await page.wait_for_load_state()
        await pages.check(page, f"import-form-{tag}")
        await page.locator("#bundle").set_input_files(str(saved))
        await page.get_by_label("Its passphrase").fill(bundle.new_passphrase())
        await page.get_by_role("button", name="Import the community").click()
        await page.wait_for_load_state()
        main = await page.locator("main").inner_text()
        assert "The passphrase is wrong" in main and "Choose the file again" in main
        await pages.check(page, f"import-error-{tag}")
        assert (await api.get(path)).status == 410
        await page.locator("#bundle").set_input_files(str(saved))
        await page.get_by_label("Its passphrase").fill(passphrase.lower().replace("-", " "))
        await page.get_by_role("button", name="Import the community").click()
        await page.wait_for_load_state()
        main = await page.locator("main").inner_text()
        assert "The community is here now" in main, main
        await pages.check(page, f"import-done-{tag}")
        await context.close()
    assert (await api.get(f"/api/v1/communities/{did}/members")).status in (200, 403)
