"""Invite links in the web app without a PDS: the invites page of a community (admins and
moderators make, list and revoke links; anyone else is refused, and the refusal audited),
and the invite's own page `/invite/<code>` (the preview, the sign-in form that returns to
it, the error pages of an unknown, expired, used-up or revoked link). Joining through the
page writes to the person's PDS: that is in tests/test_web_browser_invites.py."""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import urlencode

import pytest

from plugins.communities import store as audit_store
from plugins.communities import store as invites_store
from tests.fixtures_communities import seed_community
from tests.helpers import login_as


@pytest.fixture
def config_overrides() -> dict:
    # every test opens several invite pages from one address (the per-address budget)
    return {"rate_limits": {"auth": {"requests": 1000, "window_seconds": 60},
                            "invites": {"requests": 1000, "window_seconds": 60}}}


def form(session, fields: dict[str, str]) -> dict:
    return {"body": urlencode({**fields, "_csrf": session.csrf}), "headers": {
        "Cookie": f"sid={session.sid}; csrf-token={session.csrf}",
        "Content-Type": "application/x-www-form-urlencoded"}}


def cookie(session) -> dict:
    return {"headers": {"Cookie": f"sid={session.sid}"}}


async def make_moderator(app, did: str, member: str) -> None:
    from plugins.communities import store as roles_store
    async with app.db.transaction("tests.moderator") as tx:
        await roles_store.set_member_roles_tx(
            tx, did, [(member, "moderator", "audit.read invites.manage members.approve members.ban members.remove")])


async def create_link(client, session, did: str, **fields: str) -> str:
    resp = await client.post(f"/c/{did}/settings/invites", **form(session, fields))
    assert resp.status == 200, resp.text
    assert resp.headers["Cache-Control"] == "no-store"
    return unescape(re.search(r'id="invite-link" type="text" readonly value="([^"]+)"', resp.text).group(1))


async def test_an_admin_makes_an_invite_link_sees_it_once_lists_and_revokes_it(client, app):
    did = await seed_community(app, "did:plc:invadmin", type="admin-approved")
    admin = await login_as(app, "did:plc:invadmin", "invadmin.test")
    page = (await client.get(f"/c/{did}/settings", **cookie(admin))).text
    assert f'href="/c/{did[8:20]}.test/settings/invites"' in page
    page = (await client.get(f"/c/{did}/settings/invites", **cookie(admin))).text
    assert "No invite link yet." in page and "Make the invite link" in page

    link = await create_link(client, admin, did, maxUses="3", days="2", note="book fair")
    assert link.startswith(app.config.server.base_url.rstrip("/") + "/invite/")
    code = link.rsplit("/", 1)[1]
    # the API's preview of the same code answers: it is a real invite of this community
    preview = (await client.get(f"/api/v1/invites/{code}")).json()
    assert preview["community"]["did"] == did and preview["invite"]["maxUses"] == 3
    stored = await invites_store.get_invite(app.db, invite_id=1)
    assert stored["note"] == "book fair" and stored["created_by"] == "did:plc:invadmin"
    assert stored["expires_at"] > app.clock.iso_now()

    # the list never shows the code again, but the uses, the limit and the state
    page = (await client.get(f"/c/{did}/settings/invites", **cookie(admin))).text
    assert code not in page
    item = re.search(r'<li class="member manage">(.*?)</li>', page, re.S).group(1)
    text = " ".join(re.sub(r"<[^>]+>", " ", item).split())
    assert text.startswith("book fair Active Used 0 of 3 times") and "expires" in text

    resp = await client.post(f"/c/{did}/invites/inv_1/revoke", **form(admin, {}))
    assert resp.status == 303 and resp.headers["Location"].endswith("/settings/invites?done=invite_revoked#invites")
    page = (await client.get(resp.headers["Location"].split("#")[0], **cookie(admin))).text
    assert "its link no longer lets anyone in" in page and ">Revoked<" in page
    assert (await client.get(f"/api/v1/invites/{code}")).json()["error"] == "invite_revoked"
    # revoking again (a reload) is no error: the list shows it revoked
    resp = await client.post(f"/c/{did}/invites/inv_1/revoke", **form(admin, {}))
    assert resp.status == 303 and "done=" not in resp.headers["Location"]
    actions = [e["action"] for e in await audit_store.list_entries(app.db, did, limit=10, before_id=None,
                                                                   action=None)]
    assert actions[:2] == ["invite.revoked", "invite.created"]


async def test_the_form_explains_its_mistakes_and_keeps_what_was_typed(client, app):
    did = await seed_community(app, "did:plc:invform")
    admin = await login_as(app, "did:plc:invform", "invform.test")
    resp = await client.post(f"/c/{did}/settings/invites",
                             **form(admin, {"maxUses": "0", "days": "400", "note": "x" * 201}))
    assert resp.status == 400
    page = resp.text
    assert 'href="#maxUses"' in page and 'href="#days"' in page and 'href="#note"' in page
    assert "a whole number from 1 to 1,000,000" in page and "from 1 to 365" in page
    assert 'id="days" name="days"' in page and 'value="400"' in page
    assert await invites_store.list_invites(app.db, did, limit=5, before_id=None) == []
    # no limits at all: a link for anyone, for ever
    await create_link(client, admin, did, maxUses="", days="", note="")
    (stored,) = await invites_store.list_invites(app.db, did, limit=5, before_id=None)
    assert stored["max_uses"] is None and stored["expires_at"] is None and stored["note"] is None


async def test_a_moderator_manages_invites_but_a_member_is_refused_and_audited(client, app):
    did = await seed_community(app, "did:plc:invowner", members=("did:plc:invmod", "did:plc:invmember"))
    await make_moderator(app, did, "did:plc:invmod")
    mod = await login_as(app, "did:plc:invmod", "invmod.test")
    member = await login_as(app, "did:plc:invmember", "invmember.test")
    # the moderator's settings open on the sections their role opens; invites among them
    page = (await client.get(f"/c/{did}", **cookie(mod))).text
    assert ">Community settings<" in page
    assert "/settings" not in (await client.get(f"/c/{did}", **cookie(member))).text
    page = (await client.get(f"/c/{did}/settings/invites", **cookie(mod))).text
    assert 'href="/c/' in page and '/settings/invites" aria-current="page">Invites<' in page
    await create_link(client, mod, did, maxUses="1")
    assert (await client.get(f"/c/{did}/settings/invites", **cookie(mod))).status == 200

    resp = await client.get(f"/c/{did}/settings/invites", **cookie(member))
    assert resp.status == 403 and "invites.manage" in resp.text
    resp = await client.post(f"/c/{did}/settings/invites", **form(member, {"maxUses": "5"}))
    assert resp.status == 403
    resp = await client.post(f"/c/{did}/invites/inv_1/revoke", **form(member, {}))
    assert resp.status == 403
    (only,) = await invites_store.list_invites(app.db, did, limit=5, before_id=None)
    assert only["revoked_at"] is None
    denied = [(e["action"], e["actor_did"]) for e in await audit_store.list_entries(
        app.db, did, limit=10, before_id=None, action=None) if "denied" in (e["metadata"] or "")]
    assert ("invite.revoke", "did:plc:invmember") in denied and ("invite.create", "did:plc:invmember") in denied
    # without the form's token nothing is made
    resp = await client.post(f"/c/{did}/settings/invites", body=urlencode({"maxUses": "2"}), headers={
        "Cookie": f"sid={mod.sid}; csrf-token={mod.csrf}", "Content-Type": "application/x-www-form-urlencoded"})
    assert resp.status == 403 and len(await invites_store.list_invites(app.db, did, limit=5, before_id=None)) == 1


async def test_the_invite_page_previews_the_community_and_signs_in_back_to_itself(client, app):
    did = await seed_community(app, "did:plc:invprev", type="private", members=("did:plc:invprevm",))
    admin = await login_as(app, "did:plc:invprev", "invprev.test")
    link = await create_link(client, admin, did, maxUses="5", days="")
    path = "/invite/" + link.rsplit("/", 1)[1]
    resp = await client.get(path, headers={"Accept": "text/html"})
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/html")
    assert resp.headers["Cache-Control"] == "no-store"
    page = resp.text
    assert "<h1>Seeded</h1>" in page and "Private" in page and "2 members" in page
    assert "no admin needs to approve you" in page and "It does not expire." in page
    # no roster, whatever the type
    assert "did:plc:invprevm" not in page and "did:plc:invprev<" not in page
    assert 'action="/login"' in page and f'name="returnTo" value="{path}"' in page
    assert "form-action 'self' https:" in resp.headers["Content-Security-Policy"]

    # signed in: one Join button posting back here with the token
    outsider = await login_as(app, "did:plc:invoutsider", "outsider.test")
    page = (await client.get(path, **cookie(outsider))).text
    assert f'<form method="post" action="{path}">' in page and f'value="{outsider.csrf}"' in page
    assert "Join Seeded" in page and 'action="/login"' not in page
    # a member is told so, with the way to the community
    page = (await client.get(path, **cookie(await login_as(app, "did:plc:invprevm", "m.test")))).text
    assert "You are already a member of Seeded." in page and "Join Seeded" not in page
    # a signed-out join asks to sign in and comes back to the invite
    resp = await client.post(path, body="", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert resp.status == 401 and f'name="returnTo" value="{path}"' in resp.text


@pytest.mark.parametrize("state, status, heading", [
    ("revoked", 410, "This invite was withdrawn"),
    ("expired", 410, "This invite has expired"),
    ("exhausted", 410, "This invite has been used up"),
    ("unknown", 404, "This invite link does not work"),
])
async def test_a_link_that_no_longer_works_is_an_error_page_that_says_why(client, app, clock, state, status, heading):
    did = await seed_community(app, "did:plc:invgone", type="admin-approved")
    admin = await login_as(app, "did:plc:invgone", "invgone.test")
    code = (await create_link(client, admin, did, maxUses="1", days="1")).rsplit("/", 1)[1]
    if state == "revoked":
        assert (await client.post(f"/c/{did}/invites/inv_1/revoke", **form(admin, {}))).status == 303
    elif state == "expired":
        clock.advance(86400 + 1)
    elif state == "exhausted":
        async with app.db.transaction("tests.use") as tx:
            assert await invites_store.claim_use_tx(tx, 1, app.clock.iso_now())
    else:
        code = "nosuchcode0123456789abcd"
    someone = await login_as(app, "did:plc:invlate", "late.test")
    for resp in (await client.get(f"/invite/{code}", headers={"Accept": "text/html"}),
                 await client.get(f"/invite/{code}", **cookie(someone)),
                 await client.post(f"/invite/{code}", **form(someone, {}))):
        assert resp.status == status and resp.headers["Content-Type"].startswith("text/html")
        assert f"<h1>{heading}</h1>" in resp.text and "Join" not in resp.text
        assert "Seeded" not in resp.text  # nothing about the community behind a dead link
    assert (await invites_store.get_invite(app.db, invite_id=1))["uses"] == (1 if state == "exhausted" else 0)


async def test_a_member_who_used_up_a_link_is_told_they_are_a_member_not_that_it_is_used_up(client, app):
    did = await seed_community(app, "did:plc:invusedby", type="admin-approved", members=("did:plc:invused",))
    admin = await login_as(app, "did:plc:invusedby", "invusedby.test")
    code = (await create_link(client, admin, did, maxUses="1")).rsplit("/", 1)[1]
    async with app.db.transaction("tests.use") as tx:  # the member's own join used it
        assert await invites_store.claim_use_tx(tx, 1, app.clock.iso_now())
    member = await login_as(app, "did:plc:invused", "invused.test")
    resp = await client.get(f"/invite/{code}", **cookie(member))
    assert resp.status == 200 and "You are already a member of Seeded." in resp.text
    assert "used up" not in resp.text and "Join Seeded" not in resp.text
    # a Join sent again (a reload) goes to the community; nothing is counted
    resp = await client.post(f"/invite/{code}", **form(member, {}))
    assert resp.status == 303 and resp.headers["Location"] == f"/c/{did[8:20]}.test"
    assert (await invites_store.get_invite(app.db, invite_id=1))["uses"] == 1
    # someone else still reads that it is used up
    other = await login_as(app, "did:plc:invother", "invother.test")
    resp = await client.get(f"/invite/{code}", **cookie(other))
    assert resp.status == 410 and "This invite has been used up" in resp.text
