"""Input parsing is exactly as strict as docs/api.md says, on both request paths (Tornado
routes and the lean membership/check route): JSON only as application/json, no lone
surrogates, an ASCII `limit` from 1 to 100, and only cursors this service issued. Plus the
small parsers behind them: grapheme counting and sealed secrets. None reaches a PDS (the
surrogate cases that would are in tests/test_uploads.py, against the devnet)."""

from __future__ import annotations

import base64
import os
from typing import Any

import httpx
import pytest

from daemon.atproto.lexicons import grapheme_count
from daemon.security.secretbox import SecretBox, SecretBoxError
from tests.fixtures_communities import Api, seed_community
from tests.helpers import Response, login_as, register_app
from tests.plugin_testroutes import plugin as testroutes

ADMIN = "did:plc:seedadmin"
SURROGATE = b'{"userDid": "did:plc:x", "displayName": "\\ud800"}'


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"rate_limits": {"api": {"requests": 100000, "window_seconds": 60}}}


@pytest.fixture
def extra_plugins() -> tuple:
    return (testroutes,)


async def send_bare(client: Any, method: str, path: str, body: bytes, headers: dict[str, str],
                    api_key: str | None = None, session: Any = None) -> Response:
    """A request sent with exactly `headers` (Tornado's client would add a form Content-Type
    to a POST that has none; httpx adds nothing)."""
    hdrs = dict(headers)
    if api_key:
        hdrs["X-Api-Key"] = api_key
    if session is not None:
        hdrs.update(session.headers())
    async with httpx.AsyncClient(base_url=client.base_url) as http:
        resp = await http.request(method, path, content=body, headers=hdrs)
    assert "content-type" in {k.lower() for k in headers} or "content-type" not in resp.request.headers
    return Response(resp.status_code, resp.headers, resp.content)


def assert_error(resp: Any, status: int, code: str) -> None:
    assert resp.status == status, resp.text
    assert resp.json()["error"] == code, resp.text


async def routes(app: Any, client: Any) -> tuple[Api, Any, list[tuple[str, str, dict[str, Any]]]]:
    """A few representative JSON routes: the lean check, an API-key write, a session write,
    the public login form (OAuth plugin). (method, path, how to authenticate)"""
    api = await Api.make(app, client)
    did = await seed_community(app, ADMIN, creator_app_id=api.app_id)
    session = await login_as(app, ADMIN, "admin.test")
    return api, session, [
        ("POST", api.path(did, "/membership/check"), {"api_key": api.key}),
        ("POST", api.path(did, "/members/join"), {"api_key": api.key}),
        ("POST", "/api/v1/apps/register", {"session": session}),
        ("POST", "/login", {}),
        ("POST", "/test/echo", {"api_key": api.key}),
    ]


# ------------------------------------------------------------------ JSON bodies


async def test_json_without_content_type_or_with_another_json_type_is_415(app, client):
    _, _, cases = await routes(app, client)
    body = b'{"userDid": "did:plc:x", "name": "n", "domain": "d.example.com", "input": "a.test"}'
    for method, path, auth in cases:
        for headers in ({}, {"Content-Type": "application/json-patch+json"},
                        {"Content-Type": "text/plain"},
                        {"Content-Type": "application/json; charset=latin-1"}):
            resp = await send_bare(client, method, path, body, headers, **auth)
            assert_error(resp, 415, "unsupported_media_type")
    # application/json itself, with or without a UTF-8 charset, is fine
    for ctype in ("application/json", "application/json; charset=utf-8", 'Application/JSON; charset="UTF-8"'):
        resp = await client.post("/test/echo", body=b'{"count": 2}', headers={"Content-Type": ctype},
                                 api_key=cases[0][2]["api_key"])
        assert resp.status == 200 and resp.json()["count"] == 2, (ctype, resp.text)
    # and an empty body needs no Content-Type where the body is optional
    resp = await client.post("/test/public-echo", body=b"")
    assert resp.status == 200 and resp.json()["size"] == 0


async def test_a_lone_surrogate_is_invalid_json_on_every_route(app, client):
    _, _, cases = await routes(app, client)
    for body in (SURROGATE, b'{"input": "a.test", "\\udfff": 1}', b'{"input": ["\\ud83d"]}'):
        for method, path, auth in cases:
            resp = await client.request(method, path, body=body,
                                        headers={"Content-Type": "application/json"}, **auth)
            assert_error(resp, 400, "invalid_json")
            assert "surrogate" in resp.json()["message"]
    # a surrogate pair is one character (an emoji) and passes
    resp = await client.post("/test/echo", body=b'{"count": 1, "x": "\\ud83d\\ude00"}',
                             headers={"Content-Type": "application/json"}, api_key=cases[0][2]["api_key"])
    assert resp.status == 200, resp.text


async def test_a_key_named_twice_is_invalid_json_on_every_route(app, client):
    """{"userDid": X, "userDid": Y}: Python keeps the last, a proxy in front may read the
    first; so one body could name two actors. Refused at any depth, on every route."""
    _, _, cases = await routes(app, client)
    for body in (b'{"userDid": "did:plc:x", "userDid": "did:plc:y", "input": "a.test"}',
                 b'{"input": "a.test", "nested": {"a": 1, "a": 2}}',
                 b'{"input": "a.test", "list": [{"k": 1}, {"k": 2, "k": 3}]}'):
        for method, path, auth in cases:
            resp = await client.request(method, path, body=body,
                                        headers={"Content-Type": "application/json"}, **auth)
            assert_error(resp, 400, "invalid_json")
            assert "more than once" in resp.json()["message"], resp.text
    # the same key in two different objects is fine
    resp = await client.post("/test/echo", body=b'{"count": 1, "a": {"k": 1}, "b": {"k": 1}}',
                             headers={"Content-Type": "application/json"}, api_key=cases[0][2]["api_key"])
    assert resp.status == 200, resp.text


# ------------------------------------------------------------------ limit and cursor


def raw(path: str, query: str) -> str:
    return f"{path}?{query}"


async def list_routes(app: Any, client: Any) -> list[tuple[str, dict[str, Any]]]:
    api = await Api.make(app, client)
    did = await seed_community(app, ADMIN, creator_app_id=api.app_id, members=("did:plc:seedbob",))
    session = await login_as(app, ADMIN, "admin.test")
    await register_app(client, session)
    return [
        ("/api/v1/communities", {"api_key": api.key}),
        (api.path(did, "/members"), {"api_key": api.key}),
        ("/api/v1/apps", {"session": session}),
        (f"/communities/{did}/members", {"session": session}),
    ]


@pytest.mark.parametrize("query", ["limit=", "limit=%205", "limit=5%20", "limit=%D9%A5", "limit=%EF%BC%95",
                                   "limit=+5"])
async def test_a_limit_that_is_not_1_to_100_in_ascii_digits_is_400(app, client, query):
    for path, auth in await list_routes(app, client):
        assert_error(await client.get(raw(path, query), **auth), 400, "invalid_limit")


@pytest.mark.parametrize("query", ["cursor=", "cursor=%20", "cursor=WzFd==", "cursor=WzFd%C2%85"])
async def test_an_empty_or_mangled_cursor_is_400_invalid_cursor(app, client, query):
    for path, auth in await list_routes(app, client):
        assert_error(await client.get(raw(path, query), **auth), 400, "invalid_cursor")
        # while limit absent (the default) and a cursor this service issued still work
        assert (await client.get(path, **auth)).status == 200
        first = await client.get(raw(path, "limit=1"), **auth)
        assert first.status == 200, first.text
        if first.json().get("cursor"):
            more = await client.get(raw(path, f"limit=100&cursor={first.json()['cursor']}"), **auth)
            assert more.status == 200, more.text


@pytest.mark.parametrize("query", ["limit=%00", "cursor=WzFd%0A", "q=a%09b", "x=%1F", "x=%7f", "limit=5&q=%0d"])
async def test_a_control_character_anywhere_in_the_query_is_400_invalid_query(app, client, query):
    """Tornado turns them into spaces; a value that is not what was sent is refused instead,
    on every route kind (API key, session, the lean check, a page)."""
    routes_ = await list_routes(app, client)
    api = await Api.make(app, client)
    did = await seed_community(app, "did:plc:ctrladmin", creator_app_id=api.app_id)
    routes_ += [(api.path(did, "/membership/check"), {"api_key": api.key})]
    for path, auth in routes_:
        resp = await client.get(raw(path, query), **auth)
        assert_error(resp, 400, "invalid_query")
    page = await client.get(raw(f"/c/{did}", query))
    assert page.status == 400, page.text
    assert (await client.get(raw("/api/v1/communities", "q=a%20b"), api_key=api.key)).status == 200


async def test_a_cursor_holding_a_lone_surrogate_is_400_invalid_cursor(app, client):
    crafted = base64.urlsafe_b64encode(b'["\\ud800", "x"]').decode().rstrip("=")
    session = await login_as(app, ADMIN, "admin.test")
    assert_error(await client.get("/api/v1/apps", params={"cursor": crafted}, session=session),
                 400, "invalid_cursor")


# ------------------------------------------------------------------ graphemes and secrets


def test_grapheme_count_follows_unicode_segmentation():
    cases = {
        "a\u200db": 2,           # ZWJ after a letter extends it; "b" is a character of its own
        "\u200d\u200d": 1, "\r\n": 1, "நி": 1, "": 0,
        "abc": 3, "e\u0301": 1, "👨‍👩‍👧‍👦": 1, "🇫🇷🇩🇪": 2, "👍🏽x": 2,
    }
    assert {text: grapheme_count(text) for text in cases} == cases


def test_a_damaged_sealed_value_is_a_secretbox_error():
    box = SecretBox(os.urandom(32))
    sealed = box.seal("token", "apps.secret.1")
    version, kid, body = sealed.split(".")
    for damaged in (f"v1.{kid}.a",             # bad base64 padding (binascii.Error before)
                    f"v1.{kid}.é{body}",        # not ASCII
                    f"v1.{kid}.",               # nothing
                    f"v1.{kid}.{body[:10]}",    # too short for nonce and tag
                    f"v1.{kid}.{body[:-4]}AAAA"):
        with pytest.raises(SecretBoxError):
            box.open(damaged, "apps.secret.1")
    assert box.open(sealed, "apps.secret.1") == "token"
