"""Creating a community in real headless Chromium (with and without JavaScript), against the
devnet: the creator fills the form, gets the recovery key page once (its key heads the DID's
rotation keys on the devnet's PLC), continues to the community, and the key is not shown again.
axe checks the pages with JavaScript on; screenshots at 1280 and 390 px go to $WEBKEY_SHOTS
(default: the test's tmp directory)."""

from __future__ import annotations

import json
import os
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from daemon.atproto.plc import RotationKey
from tests.test_web_browser import Pages, chromium, signed_in_context

pytestmark = [pytest.mark.pds, pytest.mark.browser]


@pytest.fixture
def config_overrides(oauth_tls_config: dict[str, Any]) -> dict[str, Any]:
    return {**oauth_tls_config, "oauth": {"after_login_url": "/"}}


@pytest.mark.parametrize("js", [True, False], ids=["js", "nojs"])
async def test_the_creator_sees_the_recovery_key_once_and_it_heads_the_dids_keys(
        app, service, devnet, new_handle, tmp_path, js):
    base = app.config.server.base_url
    alice = devnet.create_account(new_handle("alice"))
    shots = Path(os.environ.get("WEBKEY_SHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    pages = Pages(shots, js=js)
    name = f"Keepers {os.urandom(2).hex()}"
    async with chromium() as browser:
        context, _ = await signed_in_context(browser, app, service, alice, js=js)
        page = await context.new_page()
        await page.goto(base + "/new")
        await page.get_by_label("Name").first.fill(name)
        await page.get_by_label("Create a new account for it").check()
        await pages.check(page, f"create-{'js' if js else 'nojs'}")
        await page.get_by_role("button", name="Create the community").click()
        await page.wait_for_load_state()
        assert await page.locator("h1").inner_text() == "Keep the community's recovery key"
        assert "shown only this once" in await page.locator(".warning").inner_text()
        private = await page.get_by_label("Recovery key (secp256k1 private key, hex)").input_value()
        await pages.check(page, f"recovery-key-{'js' if js else 'nojs'}")
        did = re.search(r"did:plc:[a-z0-9]+", await page.locator(".secret-card").inner_text()).group(0)
        with urllib.request.urlopen(f"{devnet.plc_url}/{did}/data", timeout=10) as resp:
            keys = json.loads(resp.read())["rotationKeys"]
        assert keys[0] == RotationKey.from_hex(private).did_key
        await page.get_by_role("link", name="I have stored it: continue").click()
        await page.wait_for_load_state()
        assert await page.locator("h1").inner_text() == name
        assert private not in await page.content()
        # the answer page is no-store: Back does not show the key again from a cache
        # (Chromium asks to resend the form instead: ERR_CACHE_MISS)
        try:
            await page.go_back()
            assert private not in await page.content()
        except Exception as exc:
            assert "ERR_CACHE_MISS" in str(exc), exc
        await context.close()
