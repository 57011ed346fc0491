"""Invite links in real headless Chromium, against the devnet PDS: Alice makes an invite
link for her admin-approved community on its invites page; Bob opens it signed out,
signs in through the page (and the PDS's own pages) and comes back to it, joins with one
button and lands on the community as a member, at once; the used-up link, a revoked one
and a banned person's join are error pages that say why. Each step is checked through
the JSON routes, the index and on the PDS. With JavaScript on, axe checks every page;
screenshots at 1280 and 390 px go to $WEBINV_SHOTS (default: the test's tmp directory)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from plugins.communities import store as invites_store
from plugins.communities import store as members_store
from tests.fixtures_communities import Api, proofs_on_pds
from tests.test_web_browser import Pages, chromium, membership_record, signed_in_context

pytestmark = [pytest.mark.pds, pytest.mark.browser]


@pytest.fixture
def config_overrides(oauth_tls_config: dict[str, Any]) -> dict[str, Any]:
    many = {"requests": 100000, "window_seconds": 60}
    return {**oauth_tls_config, "oauth": {"after_login_url": "/"},
            "rate_limits": {"api": many, "session": many, "auth": many, "invites": many}}


async def make_invite(page: Any, pages: Pages, *, uses: str, days: str, note: str, shot: str | None) -> str:
    """On the invites page: fill the form, make the link, read it from the one-time page."""
    await page.get_by_label("How many people may use it").fill(uses)
    await page.get_by_label("Days until it expires").fill(days)
    await page.get_by_label("Note (optional)").fill(note)
    await page.get_by_role("button", name="Make the invite link").click()
    await page.wait_for_load_state()
    assert await page.locator("h1").inner_text() == "New invite link"
    assert "shown only this once" in await page.locator(".warning").inner_text()
    link = await page.get_by_label("Invite link", exact=True).input_value()
    if shot:
        await pages.check(page, shot)
    await page.get_by_role("link", name="I have copied it: continue").click()
    await page.wait_for_url(re.compile(r"/settings/invites$"))
    return link


async def test_an_invite_link_made_in_the_browser_lets_a_signed_out_person_sign_in_and_join_at_once(
        app, client, service, devnet, new_handle, tmp_path):
    base = app.config.server.base_url
    alice = devnet.create_account(new_handle("alice"))
    bob = devnet.create_account(new_handle("bob"))
    carol = devnet.create_account(new_handle("carol"))
    shots = Path(os.environ.get("WEBINV_SHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    pages = Pages(shots, js=True)
    api = await Api.make(app, client)
    name = f"Readers {os.urandom(3).hex()}"
    community = await api.create(alice, name, "admin-approved")
    did, path_of = community["did"], f"/c/{community['handle']}"

    async with chromium() as browser:
        # ---- Alice makes a one-use invite link on the invites page her settings link to
        a_ctx, a_client = await signed_in_context(browser, app, service, alice, js=True)
        a_page = await a_ctx.new_page()
        a_page.on("dialog", lambda dialog: dialog.accept())
        await a_page.goto(base + path_of + "/settings")
        await a_page.get_by_role("link", name="Invites", exact=True).click()
        await a_page.wait_for_url(base + path_of + "/settings/invites")
        assert "No invite link yet." in await a_page.locator("#invites").inner_text()
        await pages.check(a_page, "invites-empty")
        link = await make_invite(a_page, pages, uses="1", days="7", note="For Bob", shot="invite-created")
        assert link.startswith(base + "/invite/")
        listed = await a_page.locator("#invites .member").inner_text()
        assert "For Bob" in listed and "Active" in listed and "Used 0 of 1 time" in listed
        await pages.check(a_page, "invites-list")

        # ---- Bob opens it signed out: the community (no roster) and the sign-in form
        b_ctx = await browser.new_context(ignore_https_errors=True)
        b_page = await b_ctx.new_page()
        resp = await b_page.goto(link)
        assert resp.status == 200
        assert await b_page.locator("h1").inner_text() == name
        main = await b_page.locator("main").inner_text()
        assert "Admin-approved" in main and "1 member" in main and "no admin needs to approve you" in main
        assert alice["handle"] not in main  # no roster, not even the admin
        await pages.check(b_page, "invite-signed-out")
        # he signs in through the page and the PDS's own pages, and comes back to the invite
        await b_page.get_by_label("Handle, DID or server address").fill(bob["handle"])
        async with b_page.expect_navigation(url=lambda u: "/oauth/authorize" in u):
            await b_page.get_by_role("button", name="Sign in").click()
        await b_page.get_by_placeholder("Enter your password").fill(bob["password"])
        await b_page.get_by_role("button", name="Sign in").click()
        async with b_page.expect_navigation(url=link, timeout=30_000):
            await b_page.get_by_role("button", name="Authorize").click()
        assert await b_page.locator(".who-handle").inner_text() == bob["handle"]
        await pages.check(b_page, "invite-signed-in")
        # one button, and he is a member at once (no request for an admin to answer)
        await b_page.get_by_role("button", name=f"Join {name}").click()
        await b_page.wait_for_url(base + path_of + "?done=joined")
        assert "You joined this community." in await b_page.get_by_role("status").inner_text()
        assert await b_page.get_by_role("button", name="Leave").count() == 1
        assert "Member" in await b_page.locator(".facts").inner_text()
        await pages.check(b_page, "invite-joined")
        assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
        assert await members_store.get_request(app.db, did, bob["did"]) is None
        member = await members_store.get_member(app.db, did, bob["did"])
        record = await membership_record(app, bob["did"], member["membership_uri"])
        assert record["value"]["community"] == did
        assert (await proofs_on_pds(app, did))[bob["did"]]["value"]["membershipUri"] == member["membership_uri"]
        joined = [e for e in await api.audit(did, alice["did"]) if e["action"] == "member.joined"]
        assert joined[0]["targetDid"] == bob["did"] and joined[0]["metadata"]["via"] == "invite"
        # the link again, for him: its one use is taken (by him), so he is told he is a member
        await b_page.goto(link)
        assert f"You are already a member of {name}." in await b_page.locator("main").inner_text()
        assert await b_page.get_by_role("button", name=f"Join {name}").count() == 0

        # ---- the one use is taken: Carol gets the used-up page (410), and Alice's list says so
        c_ctx, c_client = await signed_in_context(browser, app, service, carol, js=True)
        c_page = await c_ctx.new_page()
        resp = await c_page.goto(link)
        assert resp.status == 410
        assert await c_page.locator("h1").inner_text() == "This invite has been used up"
        assert name not in await c_page.locator("main").inner_text()
        await pages.check(c_page, "invite-used-up")
        await a_page.reload()
        first = a_page.locator("#invites .member").first
        assert "Used up" in await first.inner_text() and "Used 1 of 1 time" in await first.inner_text()

        # ---- Alice revokes an unlimited link before anyone uses it: Carol gets the revoked page
        second = await make_invite(a_page, pages, uses="", days="", note="Open day", shot=None)
        row = a_page.locator("#invites .member", has_text="Open day")
        assert "does not expire" in await row.inner_text()
        await row.get_by_role("button", name="Revoke Open day").click()
        await a_page.wait_for_url(re.compile(r"/settings/invites\?done=invite_revoked"))
        assert "Revoked" in await a_page.locator("#invites .member", has_text="Open day").inner_text()
        assert await a_page.get_by_role("button", name="Revoke Open day").count() == 0
        await pages.check(a_page, "invites-revoked")
        resp = await c_page.goto(second)
        assert resp.status == 410
        assert await c_page.locator("h1").inner_text() == "This invite was withdrawn"
        await pages.check(c_page, "invite-revoked")

        # ---- a ban holds against an invite: Carol's join is refused, and no use is counted
        banned = await api.post(api.path(did, "/bans"), {"adminDid": alice["did"], "memberDid": carol["did"]})
        assert banned.status in (200, 201), banned.text
        third = await make_invite(a_page, pages, uses="5", days="1", note="Picnic", shot=None)
        await c_page.goto(third)
        # the invite page says so at once (issue 24), with no Join button; no end: no date
        assert "You are banned from this community" in await c_page.locator(".action").inner_text()
        assert await c_page.get_by_role("button", name=f"Join {name}").count() == 0
        await pages.check(c_page, "invite-banned")
        # a Join sent anyway (an old tab) is refused as before: 403, in words
        resp = await c_client.request("POST", "/invite/" + third.rsplit("/", 1)[1],
                                      form={"_csrf": c_client.cookies["csrf-token"]})
        assert resp.status == 403 and "have banned you" in resp.text
        assert (await api.check(did, carol["did"]))["isMember"] is False
        (picnic,) = [r for r in await invites_store.list_invites(app.db, did, limit=10, before_id=None)
                     if r["note"] == "Picnic"]
        assert picnic["uses"] == 0


async def test_without_javascript_an_invite_admits_someone_whose_request_was_waiting(
        app, client, service, devnet, new_handle, tmp_path):
    base = app.config.server.base_url
    alice = devnet.create_account(new_handle("alice"))
    bob = devnet.create_account(new_handle("bob"))
    pages = Pages(Path(os.environ.get("WEBINV_SHOTS") or tmp_path), js=False)
    api = await Api.make(app, client)
    name = f"Quiet {os.urandom(3).hex()}"
    community = await api.create(alice, name, "private")
    did = community["did"]
    asked = await api.join(did, bob["did"])
    assert asked.status == 202, asked.text
    made = await api.post(api.path(did, "/invites"), {"adminDid": alice["did"], "maxUses": 3})
    assert made.status == 201, made.text
    link = made.json()["url"]

    async with chromium() as browser:
        ctx, b_client = await signed_in_context(browser, app, service, bob, js=False)
        page = await ctx.new_page()
        await page.goto(link)
        assert await page.locator("h1").inner_text() == name
        assert "You asked to join earlier" in await page.locator(".action").inner_text()
        await pages.check(page, "invite-pending-nojs")
        await page.get_by_role("button", name=f"Join {name}").click()
        await page.wait_for_url(base + f"/c/{community['handle']}?done=joined")
        assert "You joined this community." in await page.get_by_role("status").inner_text()
        # a member of the private community now: its members are shown to him
        assert bob["handle"] in await page.locator("#members").inner_text()
        await pages.check(page, "invite-joined-private-nojs")
    assert await api.check(did, bob["did"]) == {"isMember": True, "isAdmin": False, "isPending": False}
    assert await members_store.get_request(app.db, did, bob["did"]) is None
    assert (await b_client.get(f"/communities/{did}")).json()["membership"]["isMember"] is True
    (stored,) = await invites_store.list_invites(app.db, did, limit=5, before_id=None)
    assert stored["uses"] == 1
