"""The reports pages in headless Chromium (issue 24 item 4, acceptance): a member reports
through the form, the moderator resolves from the queue, the reporter reads the outcome;
with JavaScript on and off, axe finds nothing serious or critical, nothing scrolls sideways
at 390 px, every page carries the CSP without 'unsafe-inline', and each page is screenshotted at 1280 and 390 px."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from commonroom_testing.http import login_as
from tests.test_reports import Club, devnet_module_fixtures
from tests.test_web_browser import CHROMIUM_ARGS, Pages

config_overrides, extra_plugins = devnet_module_fixtures()

pytestmark = [pytest.mark.pds, pytest.mark.browser]


@pytest.mark.parametrize("js", [True, False], ids=["js", "nojs"])
async def test_report_resolve_and_read_the_outcome_in_a_browser(app, client, devnet, people, tmp_path, js):
    from playwright.async_api import async_playwright

    club = await Club().make(app, client, devnet, people)
    out = Path(os.environ.get("COMMONROOM_SCREENSHOTS", tmp_path)) / ("reports-js" if js else "reports-nojs")
    out.mkdir(parents=True, exist_ok=True)
    pages = Pages(out, js)
    base = client.base_url
    documents: list = []    # every page the browser loaded, redirects and posts' answers included
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        try:
            async def as_person(person: dict[str, str]):
                session = await login_as(app, person["did"], person["handle"])
                context = await browser.new_context(java_script_enabled=js)
                await context.add_cookies([{"name": "sid", "value": session.sid, "url": base}])
                context.on("response", lambda r: documents.append(r) if r.request.resource_type == "document" else None)
                return await context.new_page()

            carol = await as_person(club.carol)
            await carol.goto(f"{base}/c/{club.handle}/report?subject={club.dave['did']}")
            await pages.check(carol, "report-form")
            await carol.get_by_label("Harassment").check()
            await carol.get_by_label("What happened").fill("Insults in the comments")
            await carol.get_by_role("button", name="Send the report").click()
            await carol.wait_for_load_state()
            assert "your report is with the community's reviewers" in await carol.content()

            bob = await as_person(club.bob)
            await bob.goto(f"{base}/c/{club.handle}/settings/reports")
            assert "Insults in the comments" in await bob.content()
            await pages.check(bob, "report-queue")
            await bob.get_by_label("Remove the member").check()
            await bob.get_by_label("Note").fill("Warned twice before")
            await bob.get_by_role("button", name="Resolve").click()
            await bob.wait_for_load_state()
            assert "The reports are resolved." in await bob.content()
            await pages.check(bob, "report-queue-empty")

            await carol.goto(f"{base}/reports/mine")
            text = await carol.content()
            assert "Acted on: the member was removed" in text and club.bob["did"] not in text
            await pages.check(carol, "my-reports")
            # every page came with the strict CSP: nothing inline allowed
            shown = [r for r in documents if not 300 <= r.status < 400]   # a 303 has no body to police
            assert len(shown) >= 5   # the form, its answer, the queue, the queue after, my reports
            for resp in shown:
                csp = await resp.header_value("content-security-policy") or ""
                assert "default-src 'none'" in csp and "unsafe-inline" not in csp, (resp.url, csp)
        finally:
            await browser.close()
    assert (await club.api.check(club.did, club.dave["did"]))["isMember"] is False


@pytest.mark.parametrize("js", [True, False], ids=["js", "nojs"])
async def test_members_report_people_by_their_row_and_by_handle_and_a_post_by_its_address(
        app, client, devnet, people, tmp_path, js):
    """Nobody knows their neighbours' DIDs: carol reports dave from his row on the community page,
    and erin by typing @handle; a post's web address is accepted, a non-member's handle refused in
    words; the queue names both by handle and shows the reported record's text by its decision."""
    from playwright.async_api import async_playwright

    club = await Club().make(app, client, devnet, people)
    post = await club.record(club.erin, "Buy cheap watches at my shop")
    out = Path(os.environ.get("COMMONROOM_SCREENSHOTS", tmp_path)) / ("report-by-handle-" + ("js" if js else "nojs"))
    out.mkdir(parents=True, exist_ok=True)
    pages = Pages(out, js)
    base = client.base_url
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        try:
            async def as_person(person: dict[str, str]):
                session = await login_as(app, person["did"], person["handle"])
                context = await browser.new_context(java_script_enabled=js)
                await context.add_cookies([{"name": "sid", "value": session.sid, "url": base}])
                return await context.new_page()

            carol = await as_person(club.carol)
            await carol.goto(f"{base}/c/{club.handle}")
            await pages.check(carol, "community-page")
            dave_row = carol.locator("li.member", has_text="@" + club.dave["handle"])
            await dave_row.get_by_role("link", name="Report").click()
            await carol.wait_for_load_state()
            assert await carol.get_by_label("Who or what").input_value() == "@" + club.dave["handle"]
            await carol.get_by_label("Spam").check()
            await carol.get_by_role("button", name="Send the report").click()
            await carol.wait_for_load_state()
            assert "your report is with the community's reviewers" in await carol.content()

            # by typing: a non-member's handle is refused in words, then erin by @handle
            await carol.goto(f"{base}/c/{club.handle}/report")
            await carol.get_by_label("Who or what").fill("@" + club.frank["handle"])
            await carol.get_by_label("Harassment").check()
            await carol.get_by_role("button", name="Send the report").click()
            await carol.wait_for_load_state()
            error = await carol.locator("#subject-error").inner_text()
            assert "@" + club.frank["handle"] in error and "not a member" in error
            await pages.check(carol, "report-not-a-member")
            await carol.get_by_label("Who or what").fill("@" + club.erin["handle"])
            await carol.get_by_role("button", name="Send the report").click()
            await carol.wait_for_load_state()
            assert "your report is with the community's reviewers" in await carol.content()

            # a post's web address, as a Bluesky-style client shows the community's record
            dave = await as_person(club.dave)
            await dave.goto(f"{base}/c/{club.handle}/report")
            await dave.get_by_label("Who or what").fill(f"https://bsky.app/profile/{club.handle}/post/{post['rkey']}")
            await dave.get_by_label("Spam").check()
            await dave.get_by_role("button", name="Send the report").click()
            await dave.wait_for_load_state()
            assert "your report is with the community's reviewers" in await dave.content()

            bob = await as_person(club.bob)
            await bob.goto(f"{base}/c/{club.handle}/settings/reports")
            queue = await bob.locator("main").inner_text()
            assert "@" + club.dave["handle"] in queue and "@" + club.erin["handle"] in queue
            record_group = bob.locator("li.report-group", has_text="Buy cheap watches at my shop")
            assert await record_group.get_by_label("Remove the record").count() == 1
            await pages.check(bob, "report-queue-with-record")
        finally:
            await browser.close()
