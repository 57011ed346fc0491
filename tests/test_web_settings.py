"""The settings area by capability, without a PDS (issue 24): a moderator sees exactly the
sections their role opens and a 403 page naming what they lack elsewhere; a member whose
custom role grants only `audit.read` reads the history and nothing else; banning a
requester with a reason and an expiry (presets and a day), the form's mistakes next to
their fields, the bans list, lifting a ban after a confirmation; the banned person's view
of the community and of an invite. Roles are written to the community's repo, so the
roles pages are tested against the devnet (tests/test_web_moderation.py)."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from daemon.base import iso
from plugins.communities import store as audit_store
from plugins.communities import store as members_store
from plugins.communities import store as roles_store
from tests.fixtures_communities import seed_community
from tests.helpers import login_as

MODERATOR_GRANTS = "audit.read invites.manage members.approve members.ban members.remove"


def form(session, fields: dict[str, str]) -> dict:
    return {"body": urlencode({**fields, "_csrf": session.csrf}), "headers": {
        "Cookie": f"sid={session.sid}; csrf-token={session.csrf}",
        "Content-Type": "application/x-www-form-urlencoded"}}


def cookie(session) -> dict:
    return {"headers": {"Cookie": f"sid={session.sid}"}}


async def grant(app, did: str, member: str, roles: str, grants: str) -> None:
    async with app.db.transaction("tests.roles") as tx:
        await roles_store.set_member_roles_tx(tx, did, [(member, roles, grants)])


async def add_request(app, did: str, user: str, handle: str | None = None) -> None:
    now = app.clock.iso_now()
    async with app.db.transaction("tests.request") as tx:
        await members_store.insert_request_tx(tx, community_did=did, member_did=user, now=now, app_id=None,
                                              membership_uri=None, membership_cid=None)
        if handle:
            await members_store.upsert_profile_tx(tx, user, handle, None, None, now)


def nav(page: str) -> list[str]:
    """The section labels of the settings sidebar, in order."""
    sidebar = re.search(r'<nav class="settings-nav".*?</nav>', page, re.S).group(0)
    return re.findall(r'<li><a href="[^"]+"[^>]*>([^<]+)</a></li>', sidebar)


async def test_a_moderator_sees_exactly_the_sections_their_role_opens(client, app):
    did = await seed_community(app, "did:plc:setowner", type="admin-approved",
                               members=("did:plc:setmod", "did:plc:setmember"))
    await grant(app, did, "did:plc:setmod", "moderator", MODERATOR_GRANTS)
    owner = await login_as(app, "did:plc:setowner", "setowner.test")
    mod = await login_as(app, "did:plc:setmod", "setmod.test")
    member = await login_as(app, "did:plc:setmember", "setmember.test")

    page = (await client.get(f"/c/{did}/settings", **cookie(owner))).text
    # the order; Reports is the reports plugin's link (slot community.settings)
    assert nav(page) == ["General", "Pictures", "Requests", "Members", "Roles", "Bans", "Invites", "Reports",
                         "Trusted apps", "History", "Danger zone"]
    assert '<details class="settings-menu">' in page  # the same list as a menu on narrow screens

    # the moderator's settings open on their first section, with only their sections
    resp = await client.get(f"/c/{did}/settings", **cookie(mod))
    assert resp.status == 303 and resp.headers["Location"].endswith("/settings/requests")
    page = (await client.get(f"/c/{did}/settings/requests", **cookie(mod))).text
    # the moderator role holds reports.review while the reports plugin is on
    assert nav(page) == ["Requests", "Members", "Bans", "Invites", "Reports", "History"]
    for path in ("members", "bans", "invites", "audit"):
        assert (await client.get(f"/c/{did}/settings/{path}", **cookie(mod))).status == 200, path
    # admin-only sections: a 403 page that names what is needed, never "try again"
    for path in ("pictures", "roles", "apps", "danger", "delete"):
        resp = await client.get(f"/c/{did}/settings/{path}", **cookie(mod))
        assert resp.status == 403 and "<h1>You do not have permission for this</h1>" in resp.text, path
        assert "<code>admin</code>" in resp.text or "<code>primary</code>" in resp.text, path
    await add_request(app, did, "did:plc:setasker")
    resp = await client.post(f"/c/{did}/requests/did:plc:setasker/reject", **form(member, {}))
    assert resp.status == 403 and "members.approve" in resp.text
    denied = [(e["action"], e["actor_did"], e["target_did"]) for e in await audit_store.list_entries(
        app.db, did, limit=5, before_id=None, action=None) if "denied" in (e["metadata"] or "")]
    assert ("membership.reject", "did:plc:setmember", None) in denied  # in the admins' history
    resp = await client.post(f"/c/{did}/settings/profile", **form(mod, {"displayName": "Taken"}))
    assert resp.status == 403 and "to be an admin of this community" in resp.text
    # the moderator's members page offers remove and ban, not the admins' actions
    page = (await client.get(f"/c/{did}/settings/members", **cookie(mod))).text
    assert "Remove…" in page and "Ban…" in page and "Make admin" not in page and "Give role" not in page
    assert '<span class="badge badge-role badge-custom badge-moderator">Moderator</span>' in page
    # a plain member has no settings at all
    resp = await client.get(f"/c/{did}/settings", **cookie(member))
    assert resp.status == 403 and "<code>admin</code>" in resp.text
    assert ">Community settings<" not in (await client.get(f"/c/{did}", **cookie(member))).text
    page = (await client.get(f"/c/{did}", **cookie(mod))).text
    assert ">Community settings<" in page
    # the community's member list shows the role too
    assert '<span class="badge badge-role badge-custom badge-moderator">Moderator</span>' in page


async def test_a_custom_role_with_audit_read_opens_the_history_and_nothing_else(client, app):
    did = await seed_community(app, "did:plc:audowner", members=("did:plc:auditor",))
    await grant(app, did, "did:plc:auditor", "historian", "audit.read")
    auditor = await login_as(app, "did:plc:auditor", "auditor.test")
    resp = await client.get(f"/c/{did}/settings", **cookie(auditor))
    assert resp.status == 303 and resp.headers["Location"].endswith("/settings/audit")
    page = (await client.get(f"/c/{did}/settings/audit", **cookie(auditor))).text
    assert nav(page) == ["History"]
    resp = await client.get(f"/c/{did}/settings/requests", **cookie(auditor))
    assert resp.status == 403 and "<code>members.approve</code>" in resp.text
    resp = await client.get(f"/c/{did}/settings/members", **cookie(auditor))
    assert resp.status == 403 and "<code>members.remove</code> or <code>members.ban</code>" in resp.text


async def test_a_moderator_bans_a_requester_the_banned_see_it_and_an_admin_lifts_it(client, app):
    did = await seed_community(app, "did:plc:banowner", type="admin-approved", members=("did:plc:banmod",))
    await grant(app, did, "did:plc:banmod", "moderator", MODERATOR_GRANTS)
    await add_request(app, did, "did:plc:banned", "troll.test")
    mod = await login_as(app, "did:plc:banmod", "banmod.test")
    owner = await login_as(app, "did:plc:banowner", "banowner.test")
    banned = await login_as(app, "did:plc:banned", "troll.test")

    page = (await client.get(f"/c/{did}/settings/requests", **cookie(mod))).text
    ban_link = re.search(r'href="([^"]+/settings/bans/new\?who=[^"]+)"', page).group(1)
    page = (await client.get(ban_link.replace("&amp;", "&"), **cookie(mod))).text
    assert "<h1>Ban troll.test from Seeded?</h1>" in page and 'name="memberDid" value="did:plc:banned"' in page

    # mistakes: a reason over the limit, a day already over; nothing is banned
    resp = await client.post(f"/c/{did}/settings/bans/new", **form(mod, {
        "memberDid": "did:plc:banned", "reason": "x" * 1001, "expires": "date", "until": "2001-01-01"}))
    assert resp.status == 400
    assert 'href="#reason"' in resp.text and "Shorten the reason to 1,000 characters" in resp.text
    assert 'href="#until"' in resp.text and "a ban cannot end in the past" in resp.text
    assert 'value="2001-01-01"' in resp.text and "x" * 1001 in resp.text
    assert await members_store.active_ban(app.db, did, "did:plc:banned", app.clock.iso_now()) is None
    resp = await client.post(f"/c/{did}/settings/bans/new", **form(mod, {
        "memberDid": "did:plc:banned", "reason": "", "expires": "date", "until": "soon"}))
    assert resp.status == 400 and "Enter the last day of the ban as a date" in resp.text

    # a reason and the 7-day preset: the request is dropped, the ban recorded
    resp = await client.post(f"/c/{did}/settings/bans/new", **form(mod, {
        "memberDid": "did:plc:banned", "reason": "Spam links", "expires": "7"}))
    assert resp.status == 303, resp.text
    assert resp.headers["Location"].endswith("/settings/bans?done=banned&who=did%3Aplc%3Abanned")
    ban = await members_store.active_ban(app.db, did, "did:plc:banned", app.clock.iso_now())
    assert ban["reason"] == "Spam links" and ban["banned_by"] == "did:plc:banmod"
    assert ban["expires_at"] == iso(app.clock.time() + 7 * 86400)
    assert await members_store.get_request(app.db, did, "did:plc:banned") is None
    page = (await client.get(resp.headers["Location"], **cookie(mod))).text
    assert "troll.test is banned until " in page
    item = re.search(r'<ul class="member-list ban-list">(.*?)</ul>', page, re.S).group(1)
    text = " ".join(re.sub(r"<[^>]+>", " ", item).split())
    assert text.startswith("troll.test Until ") and "Banned by did:plc:banmod" in text and "Reason: Spam links" in text

    # the banned person: told so, with the end, no button, and not the reason
    page = (await client.get(f"/c/{did}", **cookie(banned))).text
    assert "You are banned from this community" in page and "until <time datetime=" in page
    assert "Request to join" not in page and "Spam links" not in page
    # a refusal of the service is said in words on the form (the primary admin cannot be banned)
    resp = await client.post(f"/c/{did}/settings/bans/new", **form(mod, {"memberDid": "did:plc:banowner",
                                                                         "expires": "none"}))
    assert resp.status == 400 and "The primary admin cannot be banned." in resp.text

    # lifting it: a confirmation page, then the list says so; they may ask again
    listed = (await client.get(f"/c/{did}/settings/bans", **cookie(owner))).text
    unban = re.search(r'href="([^"]+/bans/[^"]+/unban)"', listed).group(1)
    page = (await client.get(unban, **cookie(owner))).text
    assert "<h1>Lift the ban on troll.test?</h1>" in page and "Cancel" in page
    resp = await client.post(unban, **form(owner, {}))
    assert resp.status == 303 and "done=unbanned" in resp.headers["Location"]
    assert "The ban on troll.test is lifted" in (await client.get(resp.headers["Location"], **cookie(owner))).text
    assert await members_store.active_ban(app.db, did, "did:plc:banned", app.clock.iso_now()) is None
    page = (await client.get(f"/c/{did}", **cookie(banned))).text
    assert "Request to join" in page and "You are banned" not in page
    # sent again (a reload): nothing to lift, said in words
    resp = await client.post(unban, **form(owner, {}))
    assert resp.status == 303 and "done=not_banned" in resp.headers["Location"]
    actions = [e["action"] for e in await audit_store.list_entries(app.db, did, limit=5, before_id=None,
                                                                   action=None)]
    assert actions[:2] == ["member.unbanned", "member.banned"]


async def test_a_member_without_members_ban_is_refused_and_the_refusal_audited(client, app):
    did = await seed_community(app, "did:plc:nbowner", members=("did:plc:nbmember",))
    await add_request(app, did, "did:plc:nbasker")
    member = await login_as(app, "did:plc:nbmember", "nbmember.test")
    resp = await client.get(f"/c/{did}/settings/bans/new?who=did:plc:nbasker", **cookie(member))
    assert resp.status == 403 and "<code>members.ban</code>" in resp.text
    resp = await client.post(f"/c/{did}/settings/bans/new", **form(member, {"memberDid": "did:plc:nbasker",
                                                                            "expires": "none"}))
    assert resp.status == 403 and "members.ban" in resp.text
    assert await members_store.active_ban(app.db, did, "did:plc:nbasker", app.clock.iso_now()) is None
    denied = [(e["action"], e["actor_did"]) for e in await audit_store.list_entries(
        app.db, did, limit=10, before_id=None, action=None) if "denied" in (e["metadata"] or "")]
    assert ("membership.ban", "did:plc:nbmember") in denied


async def test_the_invite_page_tells_a_banned_person_and_offers_no_join(client, app):
    did = await seed_community(app, "did:plc:ibowner")
    owner = await login_as(app, "did:plc:ibowner", "ibowner.test")
    resp = await client.post(f"/c/{did}/settings/invites", **form(owner, {"maxUses": "", "days": "", "note": ""}))
    code = re.search(r'id="invite-link" type="text" readonly value="[^"]+/invite/([^"]+)"', resp.text).group(1)
    await add_request(app, did, "did:plc:ibbanned")
    resp = await client.post(f"/c/{did}/settings/bans/new", **form(owner, {
        "memberDid": "did:plc:ibbanned", "expires": "30"}))
    assert resp.status == 303, resp.text
    banned = await login_as(app, "did:plc:ibbanned", "ib.test")
    page = (await client.get(f"/invite/{code}", **cookie(banned))).text
    assert "You are banned from this community" in page and "until <time" in page
    assert "Join Seeded" not in page


async def test_the_history_reads_in_sentences_with_names_and_filters(client, app, clock):
    from tests.helpers import register_app
    did = await seed_community(app, "did:plc:histowner", members=("did:plc:histmod", "did:plc:histbob"))
    await grant(app, did, "did:plc:histmod", "moderator", MODERATOR_GRANTS)
    owner = await login_as(app, "did:plc:histowner", "histowner.test")
    mod = await login_as(app, "did:plc:histmod", "histmod.test")
    made = await register_app(client, owner, name="Garden bot", domain="bot.example.com")
    now = app.clock.iso_now()
    entries = [
        ("role.assigned", "did:plc:histowner", "did:plc:histbob", {"role": "greeter"}, made["appId"]),
        ("community.app_allowed", "did:plc:histowner", None, {"appId": made["appId"], "manage": True}, None),
        ("community.profile_updated", "did:plc:histowner", None, {"fields": ["banner"]}, None),
        ("member.banned", "did:plc:histmod", "did:plc:histbob", {"expiresAt": "2030-01-31T12:00:00.000Z"}, None),
        ("member.removed", "did:plc:histmod", "did:plc:histbob", {"outcome": "denied", "code": "not_admin"}, None),
    ]
    async with app.db.transaction("tests.audit") as tx:
        await members_store.upsert_profile_tx(tx, "did:plc:histbob", "bob.test", None, None, now)
        for action, actor, target, meta, app_id in entries:
            await audit_store.insert_entry_tx(tx, community_did=did, action=action, actor_did=actor,
                                              target_did=target, reason=None, metadata=meta, app_id=app_id,
                                              now=now)

    def sentences(page: str) -> list[str]:
        return [" ".join(re.sub(r"<[^>]+>", " ", li).split())
                for li in re.findall(r"<li>\s*<p>(.*?)</p>", page, re.S)]

    page = (await client.get(f"/c/{did}/settings/audit", **cookie(owner))).text
    said = sentences(page)
    assert said[:4] == [
        "did:plc:histmod banned bob.test until 31 Jan 2030, 12:00 UTC",
        "did:plc:histowner changed the banner",
        "did:plc:histowner let the app Garden bot act for the admins",
        "did:plc:histowner gave bob.test the role greeter (through the app Garden bot)",
    ]
    assert not any("refused" in s for s in said)  # refusals are their own filter
    assert '<option value="denied">Refused actions</option>' in page
    page = (await client.get(f"/c/{did}/settings/audit?kind=denied", **cookie(owner))).text
    assert sentences(page) == ["did:plc:histmod was refused (not_admin) to member.removed bob.test"]
    # by kind, by person, by days
    page = (await client.get(f"/c/{did}/settings/audit?kind=bans", **cookie(mod))).text
    assert [s.split(" ")[1] for s in sentences(page)] == ["banned"]
    page = (await client.get(f"/c/{did}/settings/audit?person=bob.test", **cookie(mod))).text
    assert len(sentences(page)) == 2 and all("bob.test" in s for s in sentences(page))
    today = now[:10]
    page = (await client.get(f"/c/{did}/settings/audit?from={today}&to={today}", **cookie(mod))).text
    assert len(sentences(page)) == 4
    page = (await client.get(f"/c/{did}/settings/audit?from=2001-01-01&to=2001-01-02", **cookie(mod))).text
    assert "Nothing matches these filters." in page
    # mistakes next to their fields; a moderator does not see the refusals
    resp = await client.get(f"/c/{did}/settings/audit?person=nobody.test&from=soon", **cookie(mod))
    assert resp.status == 400 and 'href="#person"' in resp.text and 'href="#from"' in resp.text
    assert 'value="nobody.test"' in resp.text
    assert '<option value="denied">' not in (await client.get(f"/c/{did}/settings/audit", **cookie(mod))).text
    resp = await client.get(f"/c/{did}/settings/audit?kind=denied", **cookie(mod))
    assert resp.status == 403 and "<code>admin</code>" in resp.text


async def test_the_history_pages_by_cursor_keeping_the_filters(client, app):
    did = await seed_community(app, "did:plc:histpages")
    owner = await login_as(app, "did:plc:histpages", "histpages.test")
    async with app.db.transaction("tests.audit") as tx:
        for i in range(35):
            await audit_store.insert_entry_tx(tx, community_did=did, action="invite.created",
                                              actor_did="did:plc:histpages", target_did=None, reason=None,
                                              metadata={}, app_id=None, now=app.clock.iso_now())
    page = (await client.get(f"/c/{did}/settings/audit?kind=invites", **cookie(owner))).text
    assert page.count("created an invite link") == 30
    more = re.search(r'<a href="([^"]+)">Older entries</a>', page).group(1).replace("&amp;", "&")
    assert "kind=invites" in more and "cursor=" in more
    page = (await client.get(more, **cookie(owner))).text
    assert page.count("created an invite link") == 5 and "Older entries" not in page
