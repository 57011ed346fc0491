"""The page of a community handed over to another Commonroom, in real headless Chromium at
1280 and 390 px, with and without JavaScript (screenshots in the test's tmp dir)."""

from __future__ import annotations

import pytest

from plugins.communities import handover
from tests.fixtures_communities import seed_community
from tests.test_web_browser import Pages, chromium, config_overrides  # noqa: F401 (fixture)

pytestmark = [pytest.mark.browser]


@pytest.mark.parametrize("js", [True, False], ids=["js", "nojs"])
async def test_a_visitor_sees_the_community_left_and_where_it_went(js, app, service, tmp_path):
    did = await seed_community(app, "did:plc:handoverbrowseradmin")
    await handover.mark_handed_over(app, did, moved_to="https://two.example", actor_did="did:plc:handoverbrowseradmin")
    pages = Pages(tmp_path, js)
    async with chromium() as browser:
        context = await browser.new_context(ignore_https_errors=True, java_script_enabled=js)
        page = await context.new_page()
        resp = await page.goto(app.config.server.base_url + f"/c/{did}")
        assert resp.status == 410
        text = await page.locator("main").inner_text()
        assert "left this instance" in text and "https://two.example" in text
        await pages.check(page, "handed-over")
        await context.close()
