"""The operators' console pages in headless Chromium on the devnet (issue 38): an operator
suspends and lifts a community and bans and unbans a person and a handle domain from the
Communities and People pages, with JavaScript on and off; a suspended community's page tells
visitors the reason and its admins how to appeal; axe finds nothing serious or critical,
nothing scrolls sideways at 390 px (screenshots at 1280 and 390 px); a non-operator gets 404."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from commonroom_testing.app import deep_merge
from commonroom_testing.http import login_as
from tests.fixtures_communities import Api
from tests.test_web_browser import CHROMIUM_ARGS, Pages

OPERATOR = "did:plc:operatorconsole"

pytestmark = [pytest.mark.browser, pytest.mark.pds]


@pytest.fixture
def config_overrides(communities_config: dict[str, Any]) -> dict[str, Any]:
    return deep_merge(communities_config, {"instance": {"operators": [OPERATOR],
                                                        "appeal_contact": "appeals@instance.test"}})


@pytest.mark.parametrize("js", [True, False], ids=["js", "nojs"])
async def test_an_operator_works_the_communities_and_people_pages(app, client, devnet, people, tmp_path, js):
    from playwright.async_api import async_playwright

    api = await Api.make(app, client)
    alice, bob = people("alice"), people("bob")
    pills = await api.create(alice, "Pill emporium")
    await api.create(bob, "Knitting circle")
    assert (await api.join(pills["did"], bob["did"])).status == 201

    out = Path(os.environ.get("COMMONROOM_SCREENSHOTS", tmp_path)) / ("instance-js" if js else "instance-nojs")
    out.mkdir(parents=True, exist_ok=True)
    pages = Pages(out, js)
    base = client.base_url
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=CHROMIUM_ARGS)
        try:
            async def as_person(did: str | None, handle: str | None = None) -> Any:
                context = await browser.new_context(java_script_enabled=js)
                if did is not None:
                    session = await login_as(app, did, handle)
                    await context.add_cookies([{"name": "sid", "value": session.sid, "url": base}])
                return await context.new_page()

            operator = await as_person(OPERATOR, "op.test")
            assert (await operator.goto(f"{base}/admin")).status == 200
            await operator.get_by_role("link", name="Communities", exact=True).first.click()
            await operator.wait_for_load_state()
            assert "Knitting circle" in await operator.content()
            await pages.check(operator, "console-communities")

            # search, sort, then suspend with a public reason
            await operator.get_by_label("Search by name, handle or DID").fill("emporium")
            await operator.get_by_role("button", name="Search", exact=True).click()
            await operator.wait_for_load_state()
            text = await operator.content()
            assert "Pill emporium" in text and "Knitting circle" not in text
            await operator.locator("summary", has_text="Suspend").first.click()
            await operator.get_by_label("Public reason").fill("Selling counterfeit medicine")
            await operator.get_by_role("button", name="Suspend Pill emporium").click()
            await operator.wait_for_load_state()
            text = await operator.content()
            assert "The community is suspended." in text and "Knitting circle" not in text  # the search is kept
            await pages.check(operator, "console-communities-suspended")

            visitor = await as_person(None)
            await visitor.goto(f"{base}/c/{pills['handle']}")
            text = await visitor.content()
            assert "Selling counterfeit medicine" in text and "appeals@instance.test" not in text
            assert "not taking new members now" in text and "Sign in to join" not in text
            await pages.check(visitor, "community-suspended-visitor")
            admin = await as_person(alice["did"], alice["handle"])
            await admin.goto(f"{base}/c/{pills['handle']}")
            assert "appeals@instance.test" in await admin.content()
            await pages.check(admin, "community-suspended-admin")

            await operator.get_by_role("button", name="Lift the suspension of Pill emporium").click()
            await operator.wait_for_load_state()
            assert "The suspension is lifted." in await operator.content()

            # People: find bob, see his communities and roles, ban him (ending memberships), lift it
            await operator.get_by_role("link", name="People", exact=True).first.click()
            await operator.wait_for_load_state()
            await operator.get_by_label("Find a person by handle or DID").fill(bob["did"])
            await operator.get_by_role("button", name="Find", exact=True).click()
            await operator.wait_for_load_state()
            text = await operator.content()
            assert "Knitting circle" in text and "Primary admin" in text and "Pill emporium" in text
            await pages.check(operator, "console-person")
            await operator.locator("#reason-p").fill("Harassing members of several communities")
            await operator.get_by_label("Also end their memberships").check()
            await operator.get_by_role("button", name=f"Ban {bob['handle']}").click()
            await operator.wait_for_load_state()
            text = await operator.content()
            # the primary admin of Knitting circle stays its member: the page says so
            assert "The ban is in force, but these memberships did not end" in text
            assert "Knitting circle (The primary admin cannot" in text and "Ban again to retry" in text
            assert "Find a person by handle or DID" in text and "Primary admin" in text   # the person is still shown
            await pages.check(operator, "console-person-not-all-ended")
            assert not (await api.check(pills["did"], bob["did"]))["isMember"]
            await operator.goto(f"{base}/admin/people?q={bob['did']}")
            assert "Banned on this instance" in await operator.content()
            await pages.check(operator, "console-person-banned")
            await operator.get_by_role("button", name="Lift the ban", exact=True).click()
            await operator.wait_for_load_state()
            assert "The ban is lifted." in await operator.content()

            # a handle domain
            await operator.locator("summary", has_text="Ban a handle domain").click()
            await operator.get_by_label("Handle domain").fill("*.spam.example")
            await operator.locator("#reason-d").fill("A host of spam accounts")
            await operator.get_by_role("button", name="Ban", exact=True).click()
            await operator.wait_for_load_state()
            text = await operator.content()
            assert "The ban is in force." in text and "*.spam.example" in text
            await pages.check(operator, "console-people-bans")

            someone = await as_person("did:plc:notanoperatorconsole", "someone.test")
            for path in ("/admin", "/admin/communities", "/admin/people", "/admin/audit"):
                answer = await someone.goto(f"{base}{path}")
                assert answer.status == 404 and "spam.example" not in await someone.content(), path
        finally:
            await browser.close()
