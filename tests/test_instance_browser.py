"""The operators' console in headless Chromium (issue 38): the overview and the audit log
with JavaScript on and off, axe with nothing serious or critical, nothing scrolling
sideways at 390 px, screenshots at 1280 and 390 px; a non-operator gets the 404 page."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from commonroom_testing.http import login_as
from plugins.instance import audit
from tests.test_web_browser import CHROMIUM_ARGS, Pages

OPERATOR = "did:plc:operatorbrowser"

pytestmark = [pytest.mark.browser]


@pytest.mark.parametrize("config_overrides", [{"instance": {"operators": [OPERATOR]}}])
@pytest.mark.parametrize("js", [True, False], ids=["js", "nojs"])
async def test_an_operator_reads_the_console_and_others_get_404(app, client, tmp_path, js):
    from playwright.async_api import async_playwright

    async with app.db.transaction("test.audit") as tx:
        await audit.record_tx(tx, app.clock.iso_now(), OPERATOR, "community.suspend", "did:plc:spamcommunityexample",
                              {"reason": "a spam farm advertising pills in every post"})
        await audit.record_tx(tx, app.clock.iso_now(), OPERATOR, "person.ban", "did:plc:abuserexample", via="cli")
    out = Path(os.environ.get("COMMONROOM_SCREENSHOTS", tmp_path)) / ("instance-js" if js else "instance-nojs")
    out.mkdir(parents=True, exist_ok=True)
    pages = Pages(out, js)
    base = client.base_url
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        try:
            async def as_person(did: str, handle: str):
                session = await login_as(app, did, handle)
                context = await browser.new_context(java_script_enabled=js)
                await context.add_cookies([{"name": "sid", "value": session.sid, "url": base}])
                return await context.new_page()

            operator = await as_person(OPERATOR, "op.test")
            answer = await operator.goto(f"{base}/admin")
            assert answer.status == 200
            await pages.check(operator, "console-overview")
            await operator.get_by_role("link", name="Audit log", exact=True).click()
            await operator.wait_for_load_state()
            assert "from the command line" in await operator.content()
            await pages.check(operator, "console-audit")

            someone = await as_person("did:plc:notanoperator", "someone.test")
            answer = await someone.goto(f"{base}/admin/audit")
            assert answer.status == 404 and "did:plc:abuserexample" not in await someone.content()
        finally:
            await browser.close()


@pytest.mark.parametrize("config_overrides", [{"instance": {"operators": [OPERATOR], "creation": "operators"}}])
@pytest.mark.parametrize("js", [True, False], ids=["js", "nojs"])
async def test_new_explains_the_creation_policy_before_the_form(app, client, tmp_path, js):
    from playwright.async_api import async_playwright

    out = Path(os.environ.get("COMMONROOM_SCREENSHOTS", tmp_path)) / ("instance-js" if js else "instance-nojs")
    out.mkdir(parents=True, exist_ok=True)
    pages = Pages(out, js)
    base = client.base_url
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        try:
            async def as_person(did: str, handle: str):
                session = await login_as(app, did, handle)
                context = await browser.new_context(java_script_enabled=js)
                await context.add_cookies([{"name": "sid", "value": session.sid, "url": base}])
                return await context.new_page()

            someone = await as_person("did:plc:notanoperator", "someone.test")
            answer = await someone.goto(f"{base}/new")
            assert answer.status == 403
            text = await someone.content()
            assert "policy is 'operators'" in text and "<form method=\"post\" action=\"/new\"" not in text
            await pages.check(someone, "create-refused")

            operator = await as_person(OPERATOR, "op.test")
            answer = await operator.goto(f"{base}/new")
            assert answer.status == 200 and await operator.locator("form[action='/new']").count() == 1
        finally:
            await browser.close()
