"""The web app's conventions without a PDS: the layout, static files with hashed names and
long cache headers, the Content-Security-Policy, HTML error pages on page routes (and
JSON still on JSON routes), the hidden-field CSRF check, and safe `next` paths."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest

from plugins.web.base import safe_next
from tests.helpers import login_as, register_app


@pytest.fixture
def config_overrides(request) -> dict:
    """No overrides, or a test's own (``indirect`` parametrization)."""
    return getattr(request, "param", {})


def form(session, fields: dict[str, str], *, token: bool = True) -> dict:
    """A form post as a browser sends it: the session cookies, the token in `_csrf`."""
    data = dict(fields)
    if token:
        data["_csrf"] = session.csrf
    return {"body": urlencode(data), "headers": {
        "Cookie": f"sid={session.sid}; csrf-token={session.csrf}",
        "Content-Type": "application/x-www-form-urlencoded"}}


async def test_home_signed_out_has_one_h1_and_the_sign_in_form(client):
    resp = await client.get("/")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/html")
    page = resp.text
    assert page.count("<h1") == 1
    assert 'action="/login"' in page and 'name="returnTo"' not in page  # oauth.after_login_url
    assert '<label for="input">Handle, DID or server address</label>' in page
    # from a page that sent the person here: back to that page after signing in
    page = (await client.get("/?next=/c/bakers.test")).text
    assert 'name="returnTo" value="/c/bakers.test"' in page
    page = (await client.get("/?next=//evil.example")).text
    assert 'name="returnTo"' not in page


async def test_every_page_has_a_strict_csp_without_unsafe_inline(client, app):
    session = await login_as(app, "did:plc:webcsp", "csp.test")
    for path, sess in [("/", None), ("/", session), ("/discover", None), ("/new", session),
                       ("/c/nothing.here", None)]:
        hdrs = {"Cookie": f"sid={sess.sid}"} if sess else {}
        resp = await client.get(path, headers=hdrs)
        csp = resp.headers["Content-Security-Policy"]
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp, (path, csp)
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "style-src 'self'" in csp
        assert "frame-ancestors 'none'" in csp
        # only a page holding the sign-in form may send a form elsewhere (to the login server)
        signin = 'action="/login"' in resp.text
        assert ("form-action 'self';" in csp) is not signin, (path, csp)
        page = resp.text
        # nothing inline that a strict CSP would block
        assert not re.search(r"<script(?![^>]*\bsrc=)", page), path
        assert "<style" not in page and " style=" not in page and " on" + "click=" not in page


async def test_static_files_have_content_hashed_names_and_long_cache(client):
    page = (await client.get("/")).text
    css = re.search(r'href="(/static/app\.[0-9a-f]{12}\.css)"', page).group(1)
    js = re.search(r'src="(/static/app\.[0-9a-f]{12}\.js)"', page).group(1)
    for url, ctype in [(css, "text/css"), (js, "text/javascript")]:
        resp = await client.get(url)
        assert resp.status == 200 and resp.headers["Content-Type"].startswith(ctype)
        assert "max-age=31536000" in resp.headers["Cache-Control"]
        assert "immutable" in resp.headers["Cache-Control"]
    stale = re.sub(r"\.[0-9a-f]{12}\.", ".000000000000.", css)
    assert (await client.get(stale)).status == 404


async def test_unknown_community_is_an_html_404_page_but_json_routes_stay_json(client, app):
    resp = await client.get("/c/nobody.example.com")
    assert resp.status == 404
    assert resp.headers["Content-Type"].startswith("text/html")
    assert "<h1>Page not found</h1>" in resp.text
    resp = await client.get("/communities/did:plc:nothing")
    assert resp.headers["Content-Type"].startswith("application/json")


async def test_post_without_the_hidden_token_is_refused_with_an_html_403(client, app):
    session = await login_as(app, "did:plc:webcsrf", "csrf.test")
    resp = await client.post("/new", **form(session, {"displayName": "X", "account": "new"}, token=False))
    assert resp.status == 403
    assert resp.headers["Content-Type"].startswith("text/html")
    assert "<h1>This form could not be sent</h1>" in resp.text
    wrong = form(session, {"displayName": "X", "account": "new"})
    wrong["body"] = wrong["body"].replace(session.csrf, session.csrf[:-2] + "xx")
    assert (await client.post("/new", **wrong)).status == 403
    # the right token gets past the check (here to the form's own validation)
    resp = await client.post("/new", **form(session, {"displayName": "", "account": "new"}))
    assert resp.status == 400 and "There is a problem" in resp.text


async def test_sign_out_form_ends_the_session_and_redirects_home(client, app):
    session = await login_as(app, "did:plc:webbye", "bye.test")
    resp = await client.post("/signout", **form(session, {}))
    assert resp.status == 303 and resp.headers["Location"] == "/?done=signed_out"
    resp = await client.get("/users/me", session=session)
    assert resp.status == 401
    # the home page says so (issue 24), and offers the sign-in form again
    page = (await client.get("/?done=signed_out")).text
    assert 'role="status"><p>You are signed out.' in page and 'action="/login"' in page


async def test_the_handle_field_of_the_create_form_is_the_only_element_with_its_id(client, app):
    session = await login_as(app, "did:plc:webids", "ids.test")
    page = (await client.get("/new", headers={"Cookie": f"sid={session.sid}"})).text
    # the header names the person without an id, so the form's Handle field keeps its label
    assert page.count('id="handle"') == 1 and '<label for="handle"' in page
    assert '<strong class="who-handle">ids.test</strong>' in page
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids)), ids


async def test_expired_session_shows_sign_in_that_returns_to_the_page(client, app, clock):
    session = await login_as(app, "did:plc:webold", "old.test")
    clock.advance(app.config.sessions.lifetime_seconds + 1)
    resp = await client.get("/new?x=1", headers={"Cookie": f"sid={session.sid}"})
    assert resp.status == 401 and resp.headers["Content-Type"].startswith("text/html")
    assert "Your session has ended" in resp.text
    assert 'name="returnTo" value="/new?x=1"' in resp.text
    # the dead cookies are dropped, so the next page is simply signed out
    cleared = [c for c in resp.headers.get_list("Set-Cookie") if c.startswith(("sid=", "csrf-token="))]
    assert len(cleared) == 2 and all("expires=" in c.lower() for c in cleared)


async def test_get_login_redirects_to_the_home_page_with_a_safe_next(client):
    resp = await client.get("/login?next=/c/x")
    assert resp.status == 303 and resp.headers["Location"] == "/?next=%2Fc%2Fx"
    resp = await client.get("/login?next=//evil.example")
    assert resp.headers["Location"] == "/"


@pytest.mark.parametrize("value, ok", [
    ("/c/a.b", True), ("/discover?q=x", True), ("//evil.example", False),
    ("/\\evil.example", False), ("https://evil.example/", False), ("", False),
    ("/x\r\nSet-Cookie: a=b", False), (None, False)])
def test_next_must_be_a_same_site_path(value, ok):
    assert (value is not None and safe_next(value) == value) is ok


# ------------------------------------------------------------------ pages over the index
# (communities written straight into the index: these pages never call a PDS)


async def add_request(app, community_did: str, user_did: str) -> None:
    from plugins.communities import store as communities_store
    from plugins.communities import store as members_store
    async with app.db.transaction("tests.add_request") as tx:
        await members_store.insert_request_tx(tx, community_did=community_did, member_did=user_did,
                                              now=app.clock.iso_now(), membership_uri=None,
                                              membership_cid=None, app_id=None)
        await communities_store.adjust_counts_tx(tx, community_did, pending=1)


async def test_home_lists_my_communities_with_my_role_and_pending_counts(client, app):
    from tests.fixtures_communities import seed_community
    me = "did:plc:webme"
    mine = await seed_community(app, me, type="admin-approved")
    theirs = await seed_community(app, "did:plc:webother", members=(me,))
    asked = await seed_community(app, "did:plc:webthird", type="admin-approved")
    await add_request(app, mine, "did:plc:webasker1")
    await add_request(app, mine, "did:plc:webasker2")
    await add_request(app, asked, me)
    session = await login_as(app, me, "me.test")
    page = (await client.get("/", headers={"Cookie": f"sid={session.sid}"})).text
    cards = re.findall(r'<li class="community-card">(.*?)</li>', page, re.S)
    roles = {}
    for card in cards:
        did_handle = re.search(r'@(\S+?)</p>', card).group(1)
        roles[did_handle] = re.search(r'badge-role[^"]*">([^<]+)<', card).group(1)
        if "pending request" in card:
            roles[did_handle] += " + " + re.search(r'(\d+) pending request', card).group(1)
    handles = {d: f"{d[8:20]}.test" for d in (mine, theirs, asked)}
    assert roles == {handles[mine]: "Primary admin + 2", handles[theirs]: "Member",
                     handles[asked]: "Pending"}


async def test_discover_hides_private_communities_from_non_members(client, app):
    from tests.fixtures_communities import seed_community
    open_did = await seed_community(app, "did:plc:webowner")
    private_did = await seed_community(app, "did:plc:webowner", type="private", members=("did:plc:webin",))
    outsider = await login_as(app, "did:plc:webout", "out.test")
    insider = await login_as(app, "did:plc:webin", "in.test")

    def listed(page: str) -> set[str]:
        return set(re.findall(r'@(\S+?)</p>', page))

    handle = {d: f"{d[8:20]}.test" for d in (open_did, private_did)}
    for who in (None, outsider):
        page = (await client.get("/discover", headers={"Cookie": f"sid={who.sid}"} if who else {})).text
        assert handle[open_did] in listed(page) and handle[private_did] not in listed(page)
    page = (await client.get("/discover", headers={"Cookie": f"sid={insider.sid}"})).text
    assert {handle[open_did], handle[private_did]} <= listed(page)


async def test_discover_pages_by_cursor(client, app):
    from tests.fixtures_communities import seed_community
    dids = [await seed_community(app, "did:plc:webmany") for _ in range(3)]
    page = (await client.get("/discover?limit=2")).text
    more = re.search(r'<a href="(/discover\?cursor=[^"]+)">More communities</a>', page).group(1)
    rest = (await client.get(more.replace("&amp;", "&") + "&limit=2")).text
    first = set(re.findall(r'@(\S+?)</p>', page))
    second = set(re.findall(r'@(\S+?)</p>', rest))
    assert len(first) == 2 and len(second) == 1 and not first & second
    assert first | second == {f"{d[8:20]}.test" for d in dids}


async def test_community_page_by_handle_and_by_did_shows_members_and_my_action(client, app):
    from tests.fixtures_communities import seed_community
    did = await seed_community(app, "did:plc:webadmin", members=("did:plc:webmember",))
    handle = f"{did[8:20]}.test"
    visitor = await login_as(app, "did:plc:webvisitor", "visitor.test")
    member = await login_as(app, "did:plc:webmember", "member.test")
    admin = await login_as(app, "did:plc:webadmin", "admin.test")
    for path in (f"/c/{handle}", f"/c/{did}", f"/c/{did.replace(':', '%3A')}"):
        resp = await client.get(path)
        assert resp.status == 200, path
        assert "<h1>Seeded</h1>" in resp.text and "Sign in to join" in resp.text
    buttons = {}
    for name, who in (("visitor", visitor), ("member", member), ("admin", admin)):
        page = (await client.get(f"/c/{handle}", headers={"Cookie": f"sid={who.sid}"})).text
        buttons[name] = re.findall(r'<button type="submit"[^>]*>([^<]+)</button>', page)
    assert buttons["visitor"] == ["Sign out", "Join", "Search members"]
    assert buttons["member"] == ["Sign out", "Leave", "Search members"]
    assert buttons["admin"] == ["Sign out", "Search members"]  # must transfer first
    page = (await client.get(f"/c/{handle}", headers={"Cookie": f"sid={admin.sid}"})).text
    assert "hand it to another member" in page


async def test_a_failing_pds_shows_the_try_again_page(client, app):
    from tests.fixtures_communities import seed_community
    # the seeded community's PDS (pds.invalid) cannot be reached: leaving must write there
    from daemon.atproto import accounts
    did = await seed_community(app, "did:plc:webadmin3", members=("did:plc:webleaver",))
    async with app.db.transaction("tests.account") as tx:
        await accounts.upsert_account_tx(
            tx, did=did, handle=f"{did[8:20]}.test", pds_url="http://pds.invalid", origin="provisioned",
            password_sealed=app.secrets.seal("pw", f"community_accounts.password:{did}"),
            session_sealed=None, now=app.clock.iso_now())
    session = await login_as(app, "did:plc:webleaver", "leaver.test")
    resp = await client.post(f"/c/{did}/leave", **form(session, {}))
    assert resp.status == 502 and resp.headers["Content-Type"].startswith("text/html")
    assert "did not answer" in resp.text and "try again" in resp.text
    page = (await client.get(f"/c/{did}", headers={"Cookie": f"sid={session.sid}"})).text
    assert ">Leave</button>" in page  # nothing changed


async def test_an_unexpected_error_is_an_html_500_page_with_the_request_id(client, app, monkeypatch):
    from plugins.web import queries

    async def broken(*args, **kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(queries, "my_communities", broken)
    session = await login_as(app, "did:plc:webboom", "boom.test")
    resp = await client.get("/", headers={"Cookie": f"sid={session.sid}", "X-Request-Id": "req-web-500"})
    assert resp.status == 500 and resp.headers["Content-Type"].startswith("text/html")
    assert "<h1>Something went wrong</h1>" in resp.text and "req-web-500" in resp.text
    assert "secret internals" not in resp.text


async def test_settings_are_for_admins_and_decline_a_request_with_a_reason(client, app):
    from plugins.communities import store as audit_store
    from plugins.communities import store as members_store
    from tests.fixtures_communities import seed_community
    did = await seed_community(app, "did:plc:websetadmin", type="admin-approved",
                               members=("did:plc:websetmember",))
    await add_request(app, did, "did:plc:webasker")
    admin = await login_as(app, "did:plc:websetadmin", "setadmin.test")
    member = await login_as(app, "did:plc:websetmember", "setmember.test")
    resp = await client.get(f"/c/{did}/settings", headers={"Cookie": f"sid={member.sid}"})
    assert resp.status == 403 and "to be an admin of this community" in resp.text
    resp = await client.get(f"/c/{did}/settings/requests", headers={"Cookie": f"sid={member.sid}"})
    assert resp.status == 403 and "<code>members.approve</code>" in resp.text
    resp = await client.post(f"/c/{did}/requests/did:plc:webasker/reject", **form(member, {}))
    assert resp.status == 403 and "members.approve" in resp.text
    assert await members_store.get_request(app.db, did, "did:plc:webasker") is not None

    page = (await client.get(f"/c/{did}/settings/requests", headers={"Cookie": f"sid={admin.sid}"})).text
    assert "did:plc:webasker" in page and ">Decline<" in page
    resp = await client.post(f"/c/{did}/requests/did:plc:webasker/reject",
                             **form(admin, {"reason": "Bakers only"}))
    assert resp.status == 303
    assert resp.headers["Location"].endswith("/settings/requests?done=rejected&who=did%3Aplc%3Awebasker")
    page = (await client.get(resp.headers["Location"], headers={"Cookie": f"sid={admin.sid}"})).text
    assert "The request of did:plc:webasker was declined." in page
    assert await members_store.get_request(app.db, did, "did:plc:webasker") is None
    entry = (await audit_store.list_entries(app.db, did, limit=1, before_id=None, action=None))[0]
    assert (entry["action"], entry["target_did"], entry["reason"]) == ("member.rejected", "did:plc:webasker",
                                                                        "Bakers only")
    # sent twice (a reload): nothing to decline any more, said in words
    resp = await client.post(f"/c/{did}/requests/did:plc:webasker/reject", **form(admin, {}))
    assert resp.status == 303 and "done=gone" in resp.headers["Location"]

    # the history says it in words, with the reason; members may not read it
    page = (await client.get(f"/c/{did}/settings/audit", headers={"Cookie": f"sid={admin.sid}"})).text
    first = re.search(r'<ol class="audit-list">\s*<li>(.*?)</li>', page, re.S).group(1)
    assert re.sub(r"<[^>]+>|\s+", " ", first).split() [:7] == \
        ["did:plc:websetadmin", "declined", "the", "request", "of", "did:plc:webasker", "Reason:"]
    assert "Bakers only" in first
    resp = await client.get(f"/c/{did}/settings/audit", headers={"Cookie": f"sid={member.sid}"})
    assert resp.status == 403


async def test_profile_form_errors_keep_what_was_typed(client, app):
    from tests.fixtures_communities import seed_community
    did = await seed_community(app, "did:plc:webprof")
    admin = await login_as(app, "did:plc:webprof", "prof.test")
    resp = await client.post(f"/c/{did}/settings/profile",
                             **form(admin, {"displayName": "  ", "description": "Kept <b>text</b>",
                                            "type": "private"}))
    assert resp.status == 400
    page = resp.text
    assert '<a href="#displayName">Enter a name' in page
    assert 'id="displayName-error"' in page
    assert "Kept &lt;b&gt;text&lt;/b&gt;</textarea>" in page
    assert 'value="private" checked' in page


@pytest.mark.parametrize("config_overrides", [{"plugins": {"disabled": ["web"]}}], indirect=True)
async def test_with_the_web_plugin_disabled_the_pages_are_gone(client):
    # The web plugin owns every page, "/" included (docs/web.md); sign-in stays POST /login.
    for path in ("/", "/discover", "/new", "/c/anything.test"):
        resp = await client.get(path)
        assert resp.status == 404 and resp.headers["Content-Type"].startswith("application/json"), path


async def test_member_admin_actions_are_refused_to_non_admins_and_transfer_to_non_primary(client, app):
    from plugins.communities import store as members_store
    from tests.fixtures_communities import seed_community
    did = await seed_community(app, "did:plc:webprim", members=("did:plc:webadm", "did:plc:webplain"))
    async with app.db.transaction("tests.admins") as tx:
        await members_store.set_admins_tx(tx, did, [("did:plc:webprim", app.clock.iso_now()),
                                                    ("did:plc:webadm", app.clock.iso_now())])
    plain = await login_as(app, "did:plc:webplain", "plain.test")
    admin = await login_as(app, "did:plc:webadm", "adm.test")
    primary = await login_as(app, "did:plc:webprim", "prim.test")

    resp = await client.get(f"/c/{did}/settings/members", headers={"Cookie": f"sid={plain.sid}"})
    assert resp.status == 403 and resp.headers["Content-Type"].startswith("text/html")
    assert "<code>members.remove</code> or <code>members.ban</code>" in resp.text
    resp = await client.post(f"/c/{did}/members/did:plc:webadm/demote", **form(plain, {}))
    assert resp.status == 403 and "Only an admin" in resp.text
    # an admin (not primary) manages members but is offered no hand-over, and may not open it
    page = (await client.get(f"/c/{did}/settings/members", headers={"Cookie": f"sid={admin.sid}"})).text
    assert "Make admin" in page and "Make primary admin" not in page
    resp = await client.get(f"/c/{did}/settings/transfer?to=did:plc:webplain",
                            headers={"Cookie": f"sid={admin.sid}"})
    assert resp.status == 403
    resp = await client.post(f"/c/{did}/settings/transfer", **form(admin, {"newOwnerDid": "did:plc:webadm"}))
    assert resp.status == 403
    # the primary admin's confirmation names the new owner; a non-member is a 404 page
    page = (await client.get(f"/c/{did}/settings/transfer?to=did:plc:webplain",
                             headers={"Cookie": f"sid={primary.sid}"})).text
    assert "<h1>Make did:plc:webplain the primary admin?</h1>" in page
    assert 'name="newOwnerDid" value="did:plc:webplain"' in page
    resp = await client.get(f"/c/{did}/settings/transfer?to=did:plc:nobody",
                            headers={"Cookie": f"sid={primary.sid}"})
    assert resp.status == 404 and "<h1>Page not found</h1>" in resp.text
    assert [r["member_did"] for r in await members_store.admins(app.db, did)] == \
        ["did:plc:webprim", "did:plc:webadm"]


async def test_delete_asks_for_the_handle_and_only_the_primary_admin_may(client, app):
    from plugins.communities import store as communities_store
    from plugins.communities import store as members_store
    from tests.fixtures_communities import seed_community
    did = await seed_community(app, "did:plc:webdelprim", members=("did:plc:webdeladm",))
    async with app.db.transaction("tests.admins") as tx:
        await members_store.set_admins_tx(tx, did, [("did:plc:webdelprim", app.clock.iso_now()),
                                                    ("did:plc:webdeladm", app.clock.iso_now())])
    handle = f"{did[8:20]}.test"
    admin = await login_as(app, "did:plc:webdeladm", "deladm.test")
    primary = await login_as(app, "did:plc:webdelprim", "delprim.test")
    resp = await client.get(f"/c/{did}/settings/delete", headers={"Cookie": f"sid={admin.sid}"})
    assert resp.status == 403
    page = (await client.get(f"/c/{did}/settings", headers={"Cookie": f"sid={admin.sid}"})).text
    assert "Delete the community" not in page
    page = (await client.get(f"/c/{did}/settings/delete", headers={"Cookie": f"sid={primary.sid}"})).text
    assert f"type the community's handle: {handle}" in page and "cannot be undone" in page
    # What becomes of the account is said before the deletion, and another way out is offered.
    assert "neither deleted nor deactivated" in page and "recovery key" in page
    assert "Rather keep it going without you?" in page and "hand it over to another Commonroom" in page
    assert "move it to another PDS" in page
    resp = await client.post(f"/c/{did}/settings/delete", **form(primary, {"confirmHandle": "not-it"}))
    assert resp.status == 400
    assert '<a href="#confirmHandle">' in resp.text and 'value="not-it"' in resp.text
    assert (await communities_store.get_community(app.db, did))["state"] == "active"


async def test_a_form_with_too_many_fields_is_a_400_page(client, app):
    session = await login_as(app, "did:plc:webmany", "many.test")
    fields = {f"f{i}": "x" for i in range(60)}
    resp = await client.post("/new", **form(session, fields))
    assert resp.status == 400 and resp.headers["Content-Type"].startswith("text/html")


async def test_admins_grant_and_revoke_an_apps_access(client, app):
    from plugins.communities import store as communities_store
    from tests.fixtures_communities import seed_community
    developer = await login_as(app, "did:plc:webdev", "dev.test")
    registered = await register_app(client, developer, name="Bakery board", domain="board.example.com")
    app_id = registered["appId"]
    did = await seed_community(app, "did:plc:webappadmin", type="private", members=("did:plc:webappmember",))
    admin = await login_as(app, "did:plc:webappadmin", "appadmin.test")
    member = await login_as(app, "did:plc:webappmember", "appmember.test")
    cookie = {"Cookie": f"sid={admin.sid}"}

    assert (await client.post(f"/c/{did}/settings/apps", **form(member, {"appId": app_id}))).status == 403
    resp = await client.post(f"/c/{did}/settings/apps", **form(admin, {"appId": "app_nothex"}))
    assert resp.status == 400 and '<a href="#appId">Enter an app id' in resp.text
    assert 'value="app_nothex"' in resp.text
    resp = await client.post(f"/c/{did}/settings/apps", **form(admin, {"appId": "app_" + "0" * 16}))
    assert resp.status == 400 and "no active app" in resp.text

    resp = await client.post(f"/c/{did}/settings/apps", **form(admin, {"appId": app_id, "manage": "yes"}))
    assert resp.status == 303 and resp.headers["Location"].endswith(f"/settings/apps?done=app_allowed&app={app_id}")
    assert await communities_store.app_manages(app.db, did, app_id)
    page = (await client.get(resp.headers["Location"], headers=cookie)).text
    assert "Bakery board was granted access." in page
    assert "Bakery board" in page and "Acts for the admins" in page and app_id in page
    # the app now sees the private community through the API
    resp = await client.get(f"/api/v1/communities/{did}", api_key=registered["apiKey"])
    assert resp.status == 200

    resp = await client.post(f"/c/{did}/apps/{app_id}/revoke", **form(admin, {}))
    assert resp.status == 303
    assert not await communities_store.app_allowed(app.db, did, app_id)
    assert (await client.get(f"/api/v1/communities/{did}", api_key=registered["apiKey"])).status == 404
    page = (await client.get(f"/c/{did}/settings/apps", headers=cookie)).text
    assert "No app has been granted access." in page
