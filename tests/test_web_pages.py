"""The web app's conventions without a PDS: the layout, static files with hashed names and
long cache headers, the Content-Security-Policy, HTML error pages on page routes (and
JSON still on JSON routes), the hidden-field CSRF check, and safe `next` paths."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest

from plugins.web.base import safe_next
from tests.helpers import login_as


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
    assert resp.status == 303 and resp.headers["Location"] == "/"
    resp = await client.get("/users/me", session=session)
    assert resp.status == 401


async def test_expired_session_shows_sign_in_that_returns_to_the_page(client, app, clock):
    session = await login_as(app, "did:plc:webold", "old.test")
    clock.advance(app.config.sessions.lifetime_seconds + 1)
    resp = await client.get("/new?x=1", headers={"Cookie": f"sid={session.sid}"})
    assert resp.status == 401 and resp.headers["Content-Type"].startswith("text/html")
    assert "Your session has ended" in resp.text
    assert 'name="returnTo" value="/new?x=1"' in resp.text


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
