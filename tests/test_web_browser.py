"""Journeys through the web app in real headless Chromium, against the devnet PDS, with
and without JavaScript: sign in, create a community, see it on the home page as its
primary admin; a second person finds it in Discover, asks to join, withdraws, joins an
open one and leaves it. Each step is checked through the JSON routes / the index and on
the PDS (the membership record in the person's own repo). With JavaScript on, axe-core
checks every page, and each page is saved as a screenshot at 1280 and 390 px."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from daemon.atproto.pds import get_record
from plugins.communities import store as members_store
from tests.fixtures_communities import Api, pds_record, proofs_on_pds
from tests.fixtures_oauth import SERVICE_HOST, oauth_login

pytestmark = [pytest.mark.pds, pytest.mark.browser]

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--host-resolver-rules=MAP {SERVICE_HOST} 127.0.0.1"]


@pytest.fixture
def config_overrides(oauth_tls_config: dict[str, Any]) -> dict[str, Any]:
    return {**oauth_tls_config, "oauth": {"after_login_url": "/"}, "rate_limits": {"api": {"requests": 100000, "window_seconds": 60},
                                                "session": {"requests": 100000, "window_seconds": 60}}}


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                           args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


async def signed_in_context(browser: Any, app: Any, service: Any, account: dict[str, str], *,
                            js: bool) -> Any:
    """A browser context holding a real OAuth session of `account` (logged in through the
    JSON login flow, its cookies handed to the browser)."""
    client = service()
    await oauth_login(client, account)
    context = await browser.new_context(ignore_https_errors=True, java_script_enabled=js)
    base = app.config.server.base_url
    await context.add_cookies([{"name": n, "value": client.cookies[n], "url": base}
                               for n in ("sid", "csrf-token")])
    return context, client


class Pages:
    """Checks every page it is shown: axe (JS on) and screenshots at two widths."""

    def __init__(self, out: Path, js: bool) -> None:
        self.out = out
        self.js = js
        self.seen: list[str] = []

    async def check(self, page: Any, name: str) -> None:
        assert await page.locator("h1").count() == 1, f"{name}: one <h1>"
        for width, height in ((1280, 900), (390, 844)):
            await page.set_viewport_size({"width": width, "height": height})
            await page.screenshot(path=str(self.out / f"{name}-{width}.png"), full_page=True)
            # usable at this width: nothing wider than the window
            if self.js:
                overflow = await page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
                assert overflow <= 0, f"{name} scrolls sideways at {width} px"
        await page.set_viewport_size({"width": 1280, "height": 900})
        if self.js:
            from axe_playwright_python.async_playwright import Axe
            results = await Axe().run(page)
            bad = [(v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
                   for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
            assert not bad, f"{name}: axe found {bad}"
        self.seen.append(name)


async def sign_in_through_the_page(page: Any, base: str, account: dict[str, str]) -> None:
    """The real login: our form, then the PDS's own sign-in and consent pages, back home."""
    await page.goto(base + "/")
    await page.get_by_label("Handle, DID or server address").fill(account["handle"])
    async with page.expect_navigation(url=lambda u: "/oauth/authorize" in u):
        await page.get_by_role("button", name="Sign in").click()
    await page.get_by_placeholder("Enter your password").fill(account["password"])
    await page.get_by_role("button", name="Sign in").click()
    async with page.expect_navigation(url=base + "/", timeout=30_000):
        await page.get_by_role("button", name="Authorize").click()


async def membership_record(app: Any, user_did: str, uri: str | None) -> Any:
    assert uri, "no membership record was written"
    collection = f"{app.config.atproto.namespace}.membership"
    assert uri.startswith(f"at://{user_did}/{collection}/")
    return await get_record(app, app.config.atproto.pds_url, user_did, collection, uri.rsplit("/", 1)[-1])


@pytest.mark.parametrize("js", [True, False], ids=["js", "nojs"])
async def test_create_find_request_join_and_leave_through_the_pages(
        js, app, client, service, devnet, new_handle, tmp_path):
    base = app.config.server.base_url
    alice = devnet.create_account(new_handle("alice"))
    bob = devnet.create_account(new_handle("bob"))
    pages = Pages(tmp_path, js)
    name = f"Bakers {os.urandom(3).hex()}"
    async with chromium() as browser:
        # ---- Alice signs in and creates an admin-approved community
        if js:
            a_ctx = await browser.new_context(ignore_https_errors=True)
            a_page = await a_ctx.new_page()
            await a_page.goto(base + "/")
            await pages.check(a_page, "home-signed-out")
            # keyboard: the first Tab reaches the skip link; every focus stop gets the
            # stylesheet's thick focus ring (not the browser's thin default)
            ring = ("(() => { const e = document.activeElement, s = getComputedStyle(e);"
                    " return [e.textContent.trim(), s.outlineStyle, s.outlineWidth, s.outlineColor]; })()")
            await a_page.keyboard.press("Tab")
            assert await a_page.evaluate(ring) == ["Skip to main content", "solid", "3px", "rgb(255, 191, 71)"]
            for _ in range(3):  # brand, Home, Discover
                await a_page.keyboard.press("Tab")
                assert (await a_page.evaluate(ring))[1:] == ["solid", "3px", "rgb(255, 191, 71)"]
            await sign_in_through_the_page(a_page, base, alice)
            a_client = service()
            a_client.cookies.update({c["name"]: c["value"] for c in await a_ctx.cookies(base)})
        else:
            # The sign-in form needs no script: it posts to /login, which sends the browser
            # on to the PDS (whose own pages do need JavaScript, so the login is finished
            # through the JSON flow and its cookies handed to the browser).
            plain = await browser.new_context(ignore_https_errors=True, java_script_enabled=False)
            p = await plain.new_page()
            await p.goto(base + "/")
            await p.get_by_label("Handle, DID or server address").fill(alice["handle"])
            async with p.expect_navigation(url=lambda u: "/oauth/authorize" in u):
                await p.get_by_role("button", name="Sign in").click()
            await plain.close()
            a_ctx, a_client = await signed_in_context(browser, app, service, alice, js=False)
            a_page = await a_ctx.new_page()
            await a_page.goto(base + "/")
        assert await a_page.locator(".who-handle").inner_text() == alice["handle"]
        assert await a_page.locator("h1").inner_text() == "Your communities"
        await pages.check(a_page, "home-empty")

        await a_page.get_by_role("link", name="Create a community").click()
        await a_page.wait_for_url(base + "/new")
        await pages.check(a_page, "create")
        # a mistake first: the error summary links to the field, what was typed is kept
        await a_page.get_by_label("Description").fill("Bread, every morning.")
        await a_page.get_by_label("Admin-approved").check()
        await a_page.get_by_role("button", name="Create the community").click()
        summary = a_page.locator(".error-summary")
        assert "There is a problem" in await summary.inner_text()
        assert await summary.get_by_role("link").get_attribute("href") == "#displayName"
        assert "Enter a name" in await a_page.locator("#displayName-error").inner_text()
        assert await a_page.get_by_label("Description").input_value() == "Bread, every morning."
        assert await a_page.get_by_label("Admin-approved").is_checked()
        await pages.check(a_page, "create-errors")

        await a_page.get_by_label("Name", exact=True).fill(name)
        await a_page.get_by_role("button", name="Create the community").click()
        await a_page.wait_for_load_state()
        # the recovery key is shown once (tests/test_web_browser_recovery_key.py), then onwards
        assert await a_page.locator("h1").inner_text() == "Keep the community's recovery key"
        await a_page.get_by_role("link", name="I have stored it: continue").click()
        await a_page.wait_for_url(re.compile(r"/c/[^/?]+\?done=created$"))
        assert await a_page.locator("h1").inner_text() == name
        assert "You are its primary admin" in await a_page.get_by_role("status").inner_text()
        assert "hand it to another member" in await a_page.locator(".action").inner_text()
        assert await a_page.get_by_role("button", name="Leave").count() == 0
        await pages.check(a_page, "community-primary-admin")
        community_path = a_page.url.split(base, 1)[1].split("?")[0]

        # checked through the JSON route and on the PDS
        did = (await a_client.get("/users/me/memberships")).json()["memberships"][0]["communityDid"]
        details = (await a_client.get(f"/communities/{did}")).json()
        assert details["community"]["displayName"] == name
        assert details["community"]["type"] == "admin-approved"
        assert details["membership"]["isPrimaryAdmin"] is True
        profile = await pds_record(app, did, "profile")
        assert profile["displayName"] == name and profile["description"] == "Bread, every morning."

        await a_page.goto(base + "/")
        card = a_page.locator(".community-card", has_text=name)
        assert "Primary admin" in await card.inner_text()
        await pages.check(a_page, "home-with-community")

        # ---- Bob finds it in Discover and asks to join
        b_ctx, b_client = await signed_in_context(browser, app, service, bob, js=js)
        b_page = await b_ctx.new_page()
        if js:
            b_page.on("dialog", lambda dialog: dialog.accept())
        await b_page.goto(base + "/discover")
        await b_page.get_by_label("Search by name, handle or description").fill(name)
        await b_page.get_by_role("button", name="Search", exact=True).click()
        await b_page.wait_for_url(re.compile(r"/discover\?q="))
        result = b_page.locator(".community-card", has_text=name)
        assert "Admin-approved" in await result.inner_text() and "1 member" in await result.inner_text()
        await pages.check(b_page, "discover-results")
        await result.get_by_role("link", name=name).click()
        await b_page.wait_for_url(base + community_path)
        await pages.check(b_page, "community-visitor")
        await b_page.get_by_role("button", name="Request to join").click()
        await b_page.wait_for_url(base + community_path + "?done=requested")
        assert "request to join was sent" in await b_page.get_by_role("status").inner_text()
        assert await b_page.get_by_role("button", name="Withdraw request").count() == 1
        await pages.check(b_page, "community-pending")

        status = (await b_client.get(f"/communities/{did}")).json()["membership"]
        assert status["isPending"] is True and status["isMember"] is False
        request = await members_store.get_request(app.db, did, bob["did"])
        record = await membership_record(app, bob["did"], request["membership_uri"])
        assert record is not None and record["value"]["community"] == did

        # Alice sees the request count on her home page
        await a_page.goto(base + "/")
        assert "1 pending request" in await a_page.locator(".community-card", has_text=name).inner_text()

        # Bob withdraws: the request and his record are gone
        await b_page.get_by_role("button", name="Withdraw request").click()
        await b_page.wait_for_url(base + community_path + "?done=withdrawn")
        assert await b_page.get_by_role("button", name="Request to join").count() == 1
        assert (await b_client.get(f"/communities/{did}")).json()["membership"]["isPending"] is False
        assert await membership_record(app, bob["did"], request["membership_uri"]) is None

        # Bob asks again; Alice approves on the settings page her home page links to
        await b_page.get_by_role("button", name="Request to join").click()
        await b_page.wait_for_url(base + community_path + "?done=requested")
        request = await members_store.get_request(app.db, did, bob["did"])
        await a_page.goto(base + "/")
        await a_page.get_by_role("link", name="1 pending request").click()
        await a_page.wait_for_url(base + community_path + "/settings/requests")
        await pages.check(a_page, "settings-requests")
        await a_page.get_by_role("button", name=f"Approve {bob['handle']}").click()
        await a_page.wait_for_url(re.compile(r"/settings/requests\?done=approved"))
        assert f"{bob['handle']} is a member now" in await a_page.get_by_role("status").inner_text()
        assert "No one is waiting to join" in await a_page.locator("#requests").inner_text()
        members = (await a_client.get(f"/communities/{did}/members")).json()["members"]
        assert {m["did"] for m in members} == {alice["did"], bob["did"]}
        proof = (await proofs_on_pds(app, did))[bob["did"]]
        assert proof["value"]["membershipUri"] == request["membership_uri"]
        await b_page.reload()
        assert await b_page.get_by_role("button", name="Leave").count() == 1

        # Alice edits the profile (General): a mistake first, then saved to the index and the PDS
        await a_page.get_by_role("link", name="General").click()
        await pages.check(a_page, "settings")
        await a_page.get_by_label("Name", exact=True).fill("")
        await a_page.get_by_role("button", name="Save the profile").click()
        assert "Enter a name" in await a_page.locator(".error-summary").inner_text()
        await pages.check(a_page, "settings-errors")
        await a_page.get_by_label("Name", exact=True).fill(name)
        await a_page.get_by_label("Description").fill("Bread and cakes, every morning.")
        await a_page.get_by_role("button", name="Save the profile").click()
        await a_page.wait_for_url(re.compile(r"/settings\?done=profile$"))
        assert (await pds_record(app, did, "profile"))["description"] == "Bread and cakes, every morning."
        assert (await a_client.get(f"/communities/{did}")).json()["community"]["description"] == \
            "Bread and cakes, every morning."

        await a_page.get_by_role("link", name="Trusted apps").click()
        assert "No app has been granted access." in await a_page.locator("main").inner_text()
        await pages.check(a_page, "apps")

        # Alice makes Bob an admin, hands him the primary admin role; Bob removes Alice
        # (each member's actions are in one menu, a <details> that works without scripts)
        await a_page.get_by_role("link", name="Members", exact=True).click()
        row = a_page.locator(".member", has_text=bob["handle"])
        await row.locator("summary").click()
        await pages.check(a_page, "members-menu")
        await row.get_by_role("button", name=f"Make admin ({bob['handle']})").click()
        await a_page.wait_for_url(re.compile(r"/settings/members\?done=promoted&who="))
        assert f"{bob['handle']} is now an admin." in await a_page.get_by_role("status").inner_text()
        row = a_page.locator(".member", has_text=bob["handle"])
        assert "Admin" in await row.locator(".badge").all_inner_texts()
        await pages.check(a_page, "members")
        await row.locator("summary").click()
        await row.get_by_role("link", name=f"Make primary admin… ({bob['handle']})").click()
        assert await a_page.locator("h1").inner_text() == f"Make {bob['handle']} the primary admin?"
        await pages.check(a_page, "transfer-confirm")
        await a_page.get_by_role("button", name=f"Make {bob['handle']} the primary admin").click()
        await a_page.wait_for_url(base + community_path + "?done=transferred")
        assert await a_page.get_by_role("button", name="Leave").count() == 1
        admins = (await pds_record(app, did, "admins"))["admins"]
        assert [a["did"] for a in admins] == [bob["did"], alice["did"]]

        await b_page.goto(base + community_path + "/settings/members")
        row = b_page.locator(".member", has_text=alice["handle"])
        await row.locator("summary").click()
        await row.get_by_role("link", name=f"Remove… {alice['handle']}").click()
        assert await b_page.locator("h1").inner_text() == f"Remove {alice['handle']} from {name}?"
        await pages.check(b_page, "remove-confirm")
        await b_page.get_by_label("Reason").fill("Handing over")
        await b_page.get_by_role("button", name=f"Remove {alice['handle']}").click()
        await b_page.wait_for_url(re.compile(r"/settings/members\?done=removed&who="))
        assert alice["handle"] not in await b_page.locator(".member-list").inner_text()
        assert alice["did"] not in await proofs_on_pds(app, did)
        members = (await b_client.get(f"/communities/{did}/members")).json()["members"]
        assert [(m["did"], m["isPrimaryAdmin"]) for m in members] == [(bob["did"], True)]
        log = (await b_client.get(f"/communities/{did}/audit-log")).json()["entries"]
        assert (log[0]["action"], log[0]["targetDid"], log[0]["reason"]) == \
            ("member.removed", alice["did"], "Handing over")
        assert log[1]["action"] == "admin.transferred" and log[2]["action"] == "admin.promoted"

        await b_page.goto(base + community_path + "/settings/audit")
        history = await b_page.locator(".audit-list").inner_text()
        assert f"removed {alice['handle']}" in history and "Handing over" in history
        await pages.check(b_page, "audit")

        # ---- an open community: Bob joins, sees Leave, leaves
        api = await Api.make(app, client)
        open_did = (await api.create(alice, f"Open {name}", "open"))["did"]
        private = await api.create(alice, f"Secret {name}", "private")
        await b_page.goto(base + "/discover?q=" + name.split()[1])
        listed = await b_page.locator(".community-card").all_inner_texts()
        assert any(f"Open {name}" in t for t in listed) and any(name in t for t in listed)
        assert not any("Secret" in t for t in listed)  # private: members only
        await b_page.get_by_role("link", name=f"Open {name}").click()
        await b_page.get_by_role("button", name="Join").click()
        await b_page.wait_for_url(re.compile(r"\?done=joined$"))
        assert await b_page.get_by_role("button", name="Leave").count() == 1
        members = b_page.locator(".member-list")
        assert bob["handle"] in await members.inner_text()
        assert "Primary admin" in await members.locator(".member", has_text=alice["handle"]).inner_text()
        await pages.check(b_page, "community-member")
        assert await api.check(open_did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
        member = await members_store.get_member(app.db, open_did, bob["did"])
        assert (await membership_record(app, bob["did"], member["membership_uri"]))["value"]["community"] == open_did

        # member search on the community page
        await b_page.get_by_label("Search members by handle or name").fill(bob["handle"][:6])
        await b_page.get_by_role("button", name="Search members").click()
        assert await b_page.locator(".member").count() == 1

        await b_page.get_by_role("button", name="Leave").click()
        await b_page.wait_for_url(re.compile(r"\?done=left$"))
        assert await b_page.get_by_role("button", name="Join").count() == 1
        assert (await api.check(open_did, bob["did"]))["isMember"] is False
        assert await membership_record(app, bob["did"], member["membership_uri"]) is None

        # Bob, now primary admin of the first community, deletes it (typing its handle)
        await b_page.goto(base + community_path + "/settings/danger")
        await pages.check(b_page, "danger")
        await b_page.get_by_role("link", name="Delete the community…").click()
        await pages.check(b_page, "delete")
        handle = community_path.rsplit("/", 1)[1]
        await b_page.get_by_label("To confirm, type the community's handle").fill(handle)
        await b_page.get_by_role("button", name="Delete the community").click()
        await b_page.wait_for_url(base + "/?done=deleted")
        done = await b_page.get_by_role("status").inner_text()
        assert "The community was deleted." in done and "not deactivated" in done and "recovery key" in done
        await pages.check(b_page, "deleted")
        assert name not in await b_page.locator("main").inner_text()
        assert (await b_client.get(f"/communities/{did}")).status == 404
        ns = app.config.atproto.namespace
        assert await get_record(app, app.config.atproto.pds_url, did, f"{ns}.profile", "self") is None

        # the private community's page hides its members from Bob
        await b_page.goto(base + f"/c/{private['handle']}")
        assert "visible to its members only" in await b_page.locator("#members").inner_text()
        await pages.check(b_page, "community-private-visitor")
        await b_page.goto(base + "/c/no-such-community.example")
        assert await b_page.locator("h1").inner_text() == "Page not found"
        await pages.check(b_page, "not-found")

