"""Pages the web app draws for other parts of the daemon: the HTML 404 for an unknown path
a browser asks for (API clients keep the core's JSON 404), and the oauth plugin's login
failure page, in the layout and under the same strict CSP (no 'unsafe-inline')."""

from __future__ import annotations

import re

import pytest

BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


def assert_strict_page(resp) -> None:
    assert resp.headers["Content-Type"].startswith("text/html")
    csp = resp.headers["Content-Security-Policy"]
    assert "unsafe-inline" not in csp and "default-src 'none'" in csp and "style-src 'self'" in csp
    page = resp.text
    assert " style=" not in page and "<style" not in page
    assert not re.search(r"<script(?![^>]*\bsrc=)", page)
    assert re.search(r'<link rel="stylesheet" href="/static/app\.[0-9a-f]{12}\.css">', page)
    assert page.count("<h1") == 1


async def test_unknown_path_is_an_html_page_for_a_browser(client):
    resp = await client.get("/nothing-here", headers=BROWSER)
    assert resp.status == 404
    assert_strict_page(resp)
    assert "<h1>Page not found</h1>" in resp.text and 'href="/discover"' in resp.text


@pytest.mark.parametrize("path,headers", [
    ("/nothing-here", {}),                                   # no Accept: an API client
    ("/nothing-here", {"Accept": "application/json"}),
    ("/api/v1/nothing", BROWSER),                            # API paths stay JSON for anyone
    ("/communities/did:plc:x/nothing", BROWSER),             # the spec's JSON routes too
    ("/users/me/nothing", BROWSER),
])
async def test_api_clients_and_api_paths_keep_the_json_404(client, path, headers):
    resp = await client.get(path, headers=headers)
    assert resp.status == 404
    assert resp.headers["Content-Type"].startswith("application/json")
    assert resp.json()["error"] == "not_found"


async def test_unknown_path_posted_by_a_browser_stays_json(client):
    resp = await client.post("/nothing-here", headers={**BROWSER, "Content-Type": "text/plain"}, body="x")
    assert resp.status == 404 and resp.json()["error"] == "not_found"


async def test_login_failure_page_uses_the_layout_without_unsafe_inline(client):
    resp = await client.get("/oauth/callback", headers=BROWSER)   # no state: an incomplete link
    assert resp.status == 400
    assert_strict_page(resp)
    assert "<h1>Login failed</h1>" in resp.text and "missing_state" in resp.text
    assert "This login link is incomplete" in resp.text
