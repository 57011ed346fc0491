"""A moderator's work in real headless Chromium against the devnet, with and without
JavaScript (issue 24): the admin makes a member a moderator from the members page; the
moderator, signed in, approves a request, bans a third person with a reason and a 7-day
expiry, reads the history, and is refused roles, pictures and delete with a page naming
what is needed; the banned person sees the ban and its end and no join button; after the
admin lifts the ban from the bans list (confirmed on its own page) they can ask again.
Each step is checked through the JSON routes or the index. With JavaScript on, axe checks
every page; screenshots at 1280 and 390 px go to $WEBMOD_SHOTS (default: tmp)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from plugins.communities import store as members_store
from tests.fixtures_communities import Api
from tests.test_web_browser import Pages, chromium, signed_in_context

pytestmark = [pytest.mark.pds, pytest.mark.browser]


@pytest.fixture
def config_overrides(oauth_tls_config: dict[str, Any]) -> dict[str, Any]:
    many = {"requests": 100000, "window_seconds": 60}
    return {**oauth_tls_config, "oauth": {"after_login_url": "/"},
            "rate_limits": {"api": many, "session": many, "auth": many}}


@pytest.mark.parametrize("js", [True, False], ids=["js", "nojs"])
async def test_a_moderator_approves_bans_and_reads_the_history_through_the_pages(
        js, app, client, service, devnet, new_handle, tmp_path):
    base = app.config.server.base_url
    alice, bob, carol, dave = (devnet.create_account(new_handle(n)) for n in ("alice", "bob", "carol", "dave"))
    shots = Path(os.environ.get("WEBMOD_SHOTS") or tmp_path) / ("js" if js else "nojs")
    shots.mkdir(parents=True, exist_ok=True)
    pages = Pages(shots, js)
    api = await Api.make(app, client)
    name = f"Allotment {os.urandom(3).hex()}"
    community = await api.create(alice, name, "admin-approved")
    did, path_of = community["did"], f"/c/{community['handle']}"
    for user in (bob, carol):
        assert (await api.join(did, user["did"])).status == 202
        assert (await api.decide(did, "approve", alice["did"], user["did"])).status == 200
    assert (await api.join(did, dave["did"])).status == 202

    async with chromium() as browser:
        # ---- Alice makes Bob a moderator from his row on the members page
        a_ctx, _ = await signed_in_context(browser, app, service, alice, js=js)
        a_page = await a_ctx.new_page()
        await a_page.goto(base + path_of + "/settings/roles")
        assert "Approve and reject join requests" in await a_page.locator("main").inner_text()
        await pages.check(a_page, "roles")
        await a_page.get_by_role("link", name="New role").click()
        await a_page.get_by_label("Name", exact=True).fill("Not A Name")
        await a_page.get_by_role("button", name="Create the role").click()
        assert "The name must be" in await a_page.locator(".error-summary").inner_text()
        await pages.check(a_page, "role-form-errors")
        await a_page.get_by_role("link", name="Members", exact=True).click()
        row = a_page.locator(".member", has_text=bob["handle"])
        await row.locator("summary").click()
        await row.get_by_label(f"Give {bob['handle']} a role").select_option("moderator")
        await row.get_by_role("button", name=f"Give role to {bob['handle']}").click()
        await a_page.wait_for_url(re.compile(r"/settings/members\?done=role_assigned"))
        assert f"{bob['handle']} now holds the role moderator." in await a_page.get_by_role("status").inner_text()
        assert "Moderator" in await a_page.locator(".member", has_text=bob["handle"]).locator(".badge").all_inner_texts()
        await pages.check(a_page, "members-badges")
        assert (await api.check(did, bob["did"]))["roles"] == ["moderator"]

        # ---- Bob, the moderator: his settings open on the requests; he approves Dave
        b_ctx, _ = await signed_in_context(browser, app, service, bob, js=js)
        b_page = await b_ctx.new_page()
        await b_page.goto(base + path_of)
        await b_page.get_by_role("link", name="Community settings").click()
        await b_page.wait_for_url(base + path_of + "/settings/requests")
        nav = b_page.get_by_role("navigation", name="Settings sections", exact=True)
        if js:  # only the sidebar is shown at this width; the menu's copy is hidden
            assert [t.strip() for t in await nav.get_by_role("link").all_inner_texts()][1:] == \
                ["Requests", "Members", "Bans", "Invites", "Reports", "History"]   # the moderator role holds reports.review
        await pages.check(b_page, "moderator-requests")
        await b_page.get_by_role("button", name=f"Approve {dave['handle']}").click()
        await b_page.wait_for_url(re.compile(r"/settings/requests\?done=approved"))
        assert (await api.check(did, dave["did"]))["isMember"] is True

        # he bans Carol for 7 days with a reason, from her row's menu
        await b_page.get_by_role("link", name="Members", exact=True).click()
        row = b_page.locator(".member", has_text=carol["handle"])
        if js:  # by keyboard: the menu's summary opens with Enter, Tab reaches its actions
            await row.locator("summary").focus()
            await b_page.keyboard.press("Enter")
            assert await row.locator("details").get_attribute("open") is not None
            seen = []   # Tab walks the menu's actions (plugins' links, such as Report, among them)
            for _ in range(5):
                await b_page.keyboard.press("Tab")
                seen.append(" ".join((await b_page.evaluate("document.activeElement.textContent")).split()))
                if seen[-1].startswith("Ban…"):
                    break
            assert seen[-1].startswith("Ban…") and carol["handle"] in seen[-1], seen
            await pages.check(b_page, "moderator-members-menu")
            async with b_page.expect_navigation():
                await b_page.keyboard.press("Enter")
        else:
            await row.locator("summary").click()
            await pages.check(b_page, "moderator-members-menu")
            await row.get_by_role("link", name=f"Ban… {carol['handle']}").click()
        assert await b_page.locator("h1").inner_text() == f"Ban {carol['handle']} from {name}?"
        await b_page.get_by_label("Reason").fill("Selling seeds in every thread")
        await b_page.get_by_label("7 days").check()
        await pages.check(b_page, "ban-form")
        await b_page.get_by_role("button", name=f"Ban {carol['handle']}").click()
        await b_page.wait_for_url(re.compile(r"/settings/bans\?done=banned"))
        listed = await b_page.locator(".ban-list").inner_text()
        assert carol["handle"] in listed and "Until" in listed and "Selling seeds" in listed
        await pages.check(b_page, "bans")
        ban = await members_store.active_ban(app.db, did, carol["did"], app.clock.iso_now())
        assert ban["reason"] == "Selling seeds in every thread" and ban["expires_at"] is not None
        assert (await api.check(did, carol["did"]))["isMember"] is False

        # the history in sentences; roles, pictures and delete are refused by name
        await b_page.get_by_role("link", name="History", exact=True).click()
        history = await b_page.locator(".audit-list").inner_text()
        assert f"banned {carol['handle']} until" in history
        assert f"gave {bob['handle']} the role moderator" in history
        await pages.check(b_page, "history")
        for path in ("roles", "pictures", "delete"):
            resp = await b_page.goto(base + path_of + "/settings/" + path)
            assert resp.status == 403
            assert "You do not have permission for this" in await b_page.locator("h1").inner_text()
            needed = await b_page.locator("main code").all_inner_texts()   # names what is needed
            assert "admin" in needed or "primary" in needed, (path, needed)
        await pages.check(b_page, "forbidden")

        # ---- Carol sees the ban and its end, and no join button
        c_ctx, _ = await signed_in_context(browser, app, service, carol, js=js)
        c_page = await c_ctx.new_page()
        await c_page.goto(base + path_of)
        action = await c_page.locator(".action").inner_text()
        assert "You are banned from this community" in action and "until" in action
        assert "Selling seeds" not in await c_page.locator("main").inner_text()
        assert await c_page.get_by_role("button", name="Request to join").count() == 0
        await pages.check(c_page, "banned")

        # ---- Alice lifts the ban from the bans list, after a confirmation
        await a_page.goto(base + path_of + "/settings/bans")
        await a_page.get_by_role("link", name=f"Unban… {carol['handle']}").click()
        assert await a_page.locator("h1").inner_text() == f"Lift the ban on {carol['handle']}?"
        await pages.check(a_page, "unban-confirm")
        await a_page.get_by_role("button", name=f"Lift the ban on {carol['handle']}").click()
        await a_page.wait_for_url(re.compile(r"/settings/bans\?done=unbanned"))
        assert "Nobody is banned." in await a_page.locator("main").inner_text()

        # ---- Carol can ask again
        await c_page.reload()
        await c_page.get_by_role("button", name="Request to join").click()
        await c_page.wait_for_url(re.compile(r"\?done=requested$"))
        assert (await api.check(did, carol["did"]))["isPending"] is True
