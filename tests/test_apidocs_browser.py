"""The API reference page (/api/v1/docs, issue 25 item 6) in real headless Chromium, at 1280
and 390 px: every operation of the OpenAPI document is on it, grouped by tag with a table of
contents; nothing scrolls sideways at 390 px; the stylesheet is the service's own file under
a CSP without 'unsafe-inline' (the browser applies it: nothing is blocked); axe finds nothing
serious or critical. Screenshots go to $COMMONROOM_SCREENSHOTS (or the test's tmp dir)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.test_web_browser import CHROMIUM_ARGS

pytestmark = [pytest.mark.browser]


async def test_the_reference_page_reads_well_at_1280_and_390_px(app, client, tmp_path):
    from axe_playwright_python.async_playwright import Axe
    from playwright.async_api import async_playwright

    doc = (await client.get("/api/v1/openapi.json")).json()
    operations = [(path, method, op) for path, methods in doc["paths"].items() for method, op in methods.items()]
    tags = sorted({op["tags"][0] for _, _, op in operations})
    out = Path(os.environ.get("COMMONROOM_SCREENSHOTS", tmp_path)) / "apidocs"
    out.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            blocked: list[str] = []
            page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
            answer = await page.goto(client.base_url + "/api/v1/docs")
            assert answer is not None and answer.status == 200
            csp = answer.headers["content-security-policy"]
            assert "unsafe-inline" not in csp and "default-src 'none'" in csp and "style-src 'self'" in csp
            assert await page.locator("[style]").count() == 0 and await page.locator("script, style").count() == 0
            # the stylesheet applied: the method badges have their colours, the CSP blocked nothing
            badge = page.locator(".op .method-post").first
            assert await badge.evaluate("e => getComputedStyle(e).backgroundColor") != "rgba(0, 0, 0, 0)"
            assert blocked == []

            # every operation, in its tag's section, listed in the contents
            assert await page.locator("h1").count() == 1
            for tag in tags:
                assert await page.locator(f"nav.toc a[href='#tag-{tag}']").count() == 1, tag
            for path, method, op in operations:
                section = page.locator(f"section.tag#tag-{op['tags'][0]} section.op[id='{op['operationId']}']")
                assert await section.count() == 1, (method, path)
                head = (await section.locator("h3").inner_text()).replace("\u200b", "")
                assert " ".join(head.split()) == f"{method.upper()} {path}"
                assert "curl" in await section.locator("pre").last.inner_text()
            # a body as a table of fields (nested ones flattened), an answer's enum, the errors
            join = page.locator("section.op[id='communities.api.Join.post']")
            assert await join.locator("td.name", has_text="userDid").count() >= 1
            assert await join.locator("text=One of").count() >= 1     # the answer's status
            apps = page.locator("section.op[id='apikeys.App.get']")
            assert await apps.locator("td.name", has_text="rateLimit.maxRequests").count() == 1
            assert await join.locator(".status-error", has_text="404").count() == 1
            assert "X-Api-Key" in await join.locator("pre").last.inner_text()
            # the XRPC methods with their lexicons, linked from the operations acting for a user
            assert await page.locator("section#xrpc section.op").count() == len(
                [n for n, d in app.lexicons.docs.items() if d["defs"]["main"]["type"] in ("query", "procedure")]
                + [n for n, d in app.declarations.lexicons.items()
                   if n not in app.lexicons.docs and d["defs"]["main"]["type"] in ("query", "procedure")])
            check = app.config.atproto.namespace + ".membership.check"
            assert await page.locator(f"section.op[id='xrpc-{check}'] td.name", has_text="userDid").count() == 1
            assert await join.locator(f"a[href='#xrpc-{app.config.atproto.namespace}.membership.join']").count() == 1
            example = await page.locator(f"section.op[id='xrpc-{check}'] pre").first.inner_text()
            assert f"atproto-proxy: {app.proofs.did}#commonroom" in example and f"/xrpc/{check}?community=did:" in example

            # the event kinds, each with its description and the body a webhook receives
            banned = page.locator("section#events section.op[id='event-member.banned']")
            assert await banned.locator("td.name", has_text="data.bannedBy").count() == 1
            assert await page.locator("section#events section.op").count() == len(app.event_kinds)

            for width, height in ((1280, 900), (390, 844)):
                await page.set_viewport_size({"width": width, "height": height})
                await page.evaluate("window.scrollTo(0, 0)")
                await page.screenshot(path=str(out / f"apidocs-{width}.png"))
                await join.scroll_into_view_if_needed()
                await join.screenshot(path=str(out / f"apidocs-join-{width}.png"))
                await apps.screenshot(path=str(out / f"apidocs-app-{width}.png"))
                await page.locator(f"section.op[id='xrpc-{check}']").screenshot(path=str(out / f"apidocs-xrpc-{width}.png"))
                await page.locator("section.op[id='event-member.banned']").screenshot(
                    path=str(out / f"apidocs-event-{width}.png"))
                overflow = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
                assert overflow <= 0, f"the page scrolls sideways at {width} px ({overflow} px)"
            await page.set_viewport_size({"width": 1280, "height": 900})
            results = await Axe().run(page)
            bad = [(v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
                   for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
            assert not bad, f"axe found {bad}"
        finally:
            await browser.close()


async def test_the_stylesheet_is_served_for_a_year_and_only_under_its_hash(app, client):
    page = (await client.get("/api/v1/docs")).text
    href = page.split("rel=stylesheet href='", 1)[1].split("'", 1)[0]
    resp = await client.get(href)
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/css")
    assert "immutable" in resp.headers["Cache-Control"]
    assert (await client.get("/api/v1/docs/style.000000000000.css")).status == 404
