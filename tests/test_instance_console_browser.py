"""The console's Overview, Creation requests, Reports and Apps pages in headless Chromium
(issue 38), on the devnet: an operator approves a person's request, decides about a reported
community and limits an app, with JavaScript on and off; axe finds nothing serious or
critical, nothing scrolls sideways at 390 px; screenshots at 1280 and 390 px of every page,
and of the person's side: the waiting request on their home page, the report form, the
reporter's outcome."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from commonroom_testing.app import deep_merge
from commonroom_testing.communities import Api
from commonroom_testing.http import login_as
from plugins.instance import community_reports, requests
from tests.test_web_browser import CHROMIUM_ARGS, Pages

OPERATOR = "did:plc:operatorbrowser"

pytestmark = [pytest.mark.browser, pytest.mark.pds]


@pytest.fixture
def config_overrides(communities_config: dict[str, Any]) -> dict[str, Any]:
    return deep_merge(communities_config, {"instance": {"operators": [OPERATOR], "creation": "approval"}})


@pytest.mark.parametrize("js", [True, False], ids=["js", "nojs"])
async def test_an_operator_works_the_console(app, client, devnet, people, tmp_path, js):
    from playwright.async_api import async_playwright

    api = await Api.make(app, client)
    ann, alice, carol = people("ann"), people("alice"), people("carol")
    asked = await api.post("/api/v1/communities", {"creatorDid": alice["did"], "displayName": "Watch bargains",
                                                   "description": "Every watch, every day."})
    reported = await requests.approve(app, int(asked.json()["request"]["id"]), OPERATOR)
    await community_reports.create(app, people("dave")["did"], reported["communityDid"], "spam",
                                   "The same advert forty times a day, in every post.", app_id=None)
    wanted = await api.post("/api/v1/communities", {"creatorDid": ann["did"], "displayName": "Leeds allotment club",
                                                    "description": "Growing vegetables together since 2019.",
                                                    "type": "admin-approved"})
    assert wanted.status == 202

    out = Path(os.environ.get("COMMONROOM_SCREENSHOTS", tmp_path)) / ("console-js" if js else "console-nojs")
    out.mkdir(parents=True, exist_ok=True)
    pages = Pages(out, js)
    base = client.base_url
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        try:
            async def as_person(did: str, handle: str) -> Any:
                session = await login_as(app, did, handle)
                context = await browser.new_context(java_script_enabled=js)
                await context.add_cookies([{"name": "sid", "value": session.sid, "url": base}])
                return await context.new_page()

            # the person's side: the form says a creation waits; the request waits, on their home page
            person = await as_person(ann["did"], ann["handle"])
            await person.goto(f"{base}/new")
            assert "operators approve each new community" in await person.content()
            await pages.check(person, "create-under-approval")
            await person.goto(f"{base}/")
            assert "is waiting for the instance" in await person.content()
            await pages.check(person, "home-request-waiting")

            operator = await as_person(OPERATOR, "op.test")
            assert (await operator.goto(f"{base}/admin")).status == 200
            await pages.check(operator, "console-overview-full")

            # creation requests: approve ann's
            await operator.get_by_role("link", name="Creation requests", exact=True).first.click()
            await operator.wait_for_load_state()
            await pages.check(operator, "console-requests")
            await operator.get_by_role("button", name="Approve Leeds allotment club").click()
            await operator.wait_for_load_state()
            assert "The request is approved" in await operator.content()
            await pages.check(operator, "console-requests-approved")
            await person.goto(f"{base}/")
            assert "Leeds allotment club" in await person.content()
            assert "is waiting for the instance" not in await person.content()
            await pages.check(person, "home-request-created")

            # reports: carol reports the community from its page, the operator dismisses
            reporter = await as_person(carol["did"], carol["handle"])
            row = await app.communities.community_row(reported["communityDid"])
            await reporter.goto(f"{base}/c/{row['handle']}")
            await reporter.get_by_role("link", name="Report this community to the instance").click()
            await reporter.wait_for_load_state()
            await pages.check(reporter, "report-community-form")
            await reporter.get_by_label("Spam").check()
            await reporter.get_by_label("What is wrong").fill("Adverts for watches, nothing else.")
            await reporter.get_by_role("button", name="Send the report").click()
            await reporter.wait_for_load_state()
            assert "your report is with the instance" in await reporter.content()

            await operator.get_by_role("link", name="Reports", exact=True).first.click()
            await operator.wait_for_load_state()
            assert "2 open reports" in await operator.content()
            await pages.check(operator, "console-reports")
            await operator.get_by_label("Reason").fill("Selling is allowed here.")
            await operator.get_by_role("button", name="Decide about Watch bargains").click()
            await operator.wait_for_load_state()
            assert "every open report about the community is settled" in await operator.content()
            await pages.check(operator, "console-reports-decided")
            await reporter.goto(f"{base}/reports/communities")
            text = await reporter.content()
            assert "Dismissed: no action was taken" in text and OPERATOR not in text
            await pages.check(reporter, "my-community-reports")

            # apps: a limit above the default, then deactivation
            await operator.get_by_role("link", name="Apps", exact=True).first.click()
            await operator.wait_for_load_state()
            await pages.check(operator, "console-apps")
            await operator.get_by_label("Requests", exact=True).fill("5000")
            await operator.get_by_role("button", name="Set the limit").click()
            await operator.wait_for_load_state()
            assert "5000 requests per 60 s" in await operator.content()
            await operator.get_by_role("button", name="Deactivate").click()   # unconfirmed: refused, kept
            await operator.wait_for_load_state()
            assert "Tick the box to confirm" in await operator.content()
            await operator.get_by_label("for good").check()
            await operator.get_by_role("button", name="Deactivate").click()
            await operator.wait_for_load_state()
            assert "deactivated" in await operator.content()
            await pages.check(operator, "console-apps-deactivated")

            await operator.get_by_role("link", name="Audit log", exact=True).first.click()
            await operator.wait_for_load_state()
            text = await operator.content()
            assert "approved the creation request of" in text and "dismissed the reports about" in text
            assert "deactivated the app" in text

            someone = await as_person(carol["did"], carol["handle"])
            for path in ("/admin/requests", "/admin/reports", "/admin/apps"):
                assert (await someone.goto(base + path)).status == 404
        finally:
            await browser.close()
