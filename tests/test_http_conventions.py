"""Every route answers bad input with the JSON error shape and the right status."""

from __future__ import annotations

import pytest

from tests.helpers import login_as, register_app
from tests.plugin_testroutes import plugin as testroutes


@pytest.fixture
def extra_plugins():
    return (testroutes,)


def assert_error(resp, status, code=None):
    assert resp.status == status, resp.text
    assert resp.headers["Content-Type"].startswith("application/json")
    body = resp.json()
    assert set(body) >= {"error", "message"} and isinstance(body["message"], str)
    if code:
        assert body["error"] == code
    return body


async def key_for(app, client):
    alice = await login_as(app, "did:plc:alice")
    return (await register_app(client, alice))["apiKey"]


async def test_malformed_json_is_400(app, client):
    key = await key_for(app, client)
    resp = await client.post("/test/echo", body=b"{not json", api_key=key,
                             headers={"Content-Type": "application/json"})
    assert_error(resp, 400, "invalid_json")
    resp = await client.post("/test/echo", body=b"[1, 2]", api_key=key,
                             headers={"Content-Type": "application/json"})
    assert_error(resp, 400, "invalid_json")


async def test_wrong_field_type_is_400_naming_the_field(app, client):
    key = await key_for(app, client)
    resp = await client.post("/test/echo", json={"count": "three"}, api_key=key)
    body = assert_error(resp, 400, "invalid_request")
    assert body["details"][0]["field"] == "count"
    ok = await client.post("/test/echo", json={"count": 3}, api_key=key)
    assert ok.status == 200 and ok.json() == {"count": 3, "principal": "app"}


async def test_wrong_content_type_is_415(app, client):
    key = await key_for(app, client)
    resp = await client.post("/test/echo", body=b"count=3", api_key=key,
                             headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert_error(resp, 415, "unsupported_media_type")


async def test_unknown_route_is_json_404(app, client):
    resp = await client.get("/no/such/route")
    assert_error(resp, 404, "not_found")
    resp = await client.delete("/api/v1/nothing-here")
    assert_error(resp, 404)


async def test_body_over_the_limit_is_413(app, client):
    limit = app.config.server.max_body_bytes
    resp = await client.post("/test/public-echo", body=b'{"x": "' + b"a" * limit + b'"}',
                             headers={"Content-Type": "application/json"})
    assert_error(resp, 413, "payload_too_large")
    ok = await client.post("/test/public-echo", json={"x": "small"})
    assert ok.status == 200


async def test_chunked_body_over_the_limit_is_413(app, client):
    limit = app.config.server.max_body_bytes

    async def producer(write):
        for _ in range(limit // 1024 + 2):
            await write(b"a" * 1024)

    from tornado.httpclient import AsyncHTTPClient, HTTPRequest
    req = HTTPRequest(client.base_url + "/test/public-echo", method="POST", body_producer=producer,
                      headers={"Content-Type": "application/json"})
    resp = await AsyncHTTPClient().fetch(req, raise_error=False)
    assert resp.code == 413


async def test_small_declared_bodies_are_read_whole_the_others_streamed_with_the_same_answers(app, client):
    """A body declared small (Content-Length within 64 KB and the route's limit) is read
    whole before the handler starts (no trip round the event loop waiting for it); a
    chunked one, or a larger one, is streamed, so that one over the limit can be refused
    unread (test_body_over_the_limit_is_413). The route answers the same either way."""
    from tornado.httpclient import AsyncHTTPClient, HTTPRequest

    from daemon.http.base import DRAIN_LIMIT

    small = b'{"a": 1, "b": "' + b"x" * 100 + b'"}'
    whole = await client.post("/test/public-echo", body=small, headers={"Content-Type": "application/json"})
    assert whole.status == 200 and whole.json() == {"size": 2, "bytes": len(small), "streamed": False}

    async def producer(write):
        for i in range(0, len(small), 10):
            await write(small[i:i + 10])

    req = HTTPRequest(client.base_url + "/test/public-echo", method="POST", body_producer=producer,
                      headers={"Content-Type": "application/json"})
    chunked = await AsyncHTTPClient().fetch(req, raise_error=False)
    assert chunked.code == 200
    assert tornado_json(chunked.body) == {"size": 2, "bytes": len(small), "streamed": True}

    # Expect: 100-continue asks to be refused before the body is sent: streamed too
    req = HTTPRequest(client.base_url + "/test/public-echo", method="POST", body=small, expect_100_continue=True,
                      headers={"Content-Type": "application/json"})
    expecting = await AsyncHTTPClient().fetch(req, raise_error=False)
    assert expecting.code == 200
    assert tornado_json(expecting.body) == {"size": 2, "bytes": len(small), "streamed": True}

    assert DRAIN_LIMIT <= app.config.server.max_body_bytes   # a body past both limits: test_body_over_the_limit_is_413
    for chunks in (False, True):   # a refusal is the same JSON error, whichever way the body came
        req = HTTPRequest(client.base_url + "/test/public-echo", method="POST", headers={"Content-Type": "text/plain"},
                          **({"body_producer": producer} if chunks else {"body": small}))
        refused = await AsyncHTTPClient().fetch(req, raise_error=False)
        assert refused.code == 415 and tornado_json(refused.body)["error"] == "unsupported_media_type"

    # Both are the same route in /metrics (the streaming twin counts under its route's name).
    from prometheus_client.parser import text_string_to_metric_families
    counts = {frozenset(s.labels.items()): s.value
              for family in text_string_to_metric_families((await app.metrics.render()).decode())
              for s in family.samples if s.name == "commonroom_http_requests_total"}
    route = {"route": "/test/public-echo", "method": "POST"}
    assert counts[frozenset({**route, "status": "200"}.items())] == 3
    assert counts[frozenset({**route, "status": "415"}.items())] == 2
    assert not any(dict(labels).get("route") == "unmatched" for labels in counts)

    # A form post is streamed: Tornado would otherwise parse it before authentication and
    # answer a malformed one with its own 400 instead of the route's 401.
    form = await client.post("/test/echo", body=b"x=1", headers={"Content-Type": "multipart/form-data"})
    assert_error(form, 401, "unauthorized")


def tornado_json(raw: bytes):
    import json
    return json.loads(raw)


async def test_unexpected_exception_is_500_json_without_traceback(app, client):
    resp = await client.get("/test/boom")
    body = assert_error(resp, 500, "internal_error")
    assert "Traceback" not in resp.text and "passwd" not in resp.text and "RuntimeError" not in resp.text
    assert resp.headers["X-Request-Id"] in body["message"]


async def test_every_response_has_a_request_id(app, client):
    for resp in [await client.get("/health"), await client.get("/nope"),
                 await client.get("/health", headers={"X-Request-Id": "abc-123"})]:
        assert resp.headers.get("X-Request-Id")
    assert (await client.get("/health", headers={"X-Request-Id": "abc-123"})).headers["X-Request-Id"] == "abc-123"


async def test_health(app, client):
    resp = await client.get("/health")
    assert resp.status == 200
    body = resp.json()
    assert body["status"] == "ok" and body["version"]


@pytest.mark.parametrize("limit", ["0", "101", "-1", "ten", "1.5"])
async def test_bad_limit_is_400(app, client, limit):
    alice = await login_as(app, "did:plc:alice")
    assert_error(await client.get("/api/v1/apps", session=alice, params={"limit": limit}), 400, "invalid_limit")


async def test_bad_cursor_is_400(app, client):
    alice = await login_as(app, "did:plc:alice")
    assert_error(await client.get("/api/v1/apps", session=alice, params={"cursor": "garbage!!"}), 400,
                 "invalid_cursor")


def test_route_table_matches_like_a_linear_scan():
    from types import SimpleNamespace

    from daemon.runtime.app import create_app  # noqa: F401  (the table is what create_app installs)
    from daemon.http.routing import RouteTable
    routes = [(r"/api/v1/apps/register", "register"), (r"/api/v1/apps/(app_[0-9a-f]{2})", "app"),
              (r"/api/v1/communities", "list"), (r"/api/v1/communities/(did:[a-z]+:[a-z0-9]+)", "one"),
              (r"/communities/([^/]+)/join", "join"), (r"/.well-known/jwks.json", "jwks"),
              (r"/api/v1/communities/(did:[a-z]+:[a-z0-9]+)/members/join", "members-join"),
              (r"/api/(.*)", "catch-all-api"), (r"/health", "health")]
    table = RouteTable(routes)
    expect = {"/api/v1/apps/register": ("register", []), "/api/v1/apps/app_0a": ("app", [b"app_0a"]),
              "/api/v1/communities": ("list", []), "/api/v1/communities/did:plc:abc": ("one", [b"did:plc:abc"]),
              "/api/v1/communities/did:plc:abc/members/join": ("members-join", [b"did:plc:abc"]),
              "/communities/did:plc:x/join": ("join", [b"did:plc:x"]), "/.well-known/jwks.json": ("jwks", []),
              "/api/v1/webhooks": ("catch-all-api", [b"v1/webhooks"]), "/health": ("health", []),
              "/api/v1/apps/app_zz": ("catch-all-api", [b"v1/apps/app_zz"]), "/nothing": None}
    for path, want in expect.items():
        found = table.match(SimpleNamespace(path=path))
        got = None if found is None else (found[0], found[2])
        assert got == want, path


def test_route_table_suffix_shortcut_never_changes_the_match():
    """Rules ending in literal text are skipped by a suffix test before their expression
    runs; for tricky patterns the answer must still be the linear scan's."""
    from types import SimpleNamespace

    from tornado.routing import PathMatches

    from daemon.http.routing import RouteTable
    did = r"(did(?::|%3[Aa])[^/?#]+)"
    patterns = [r"/c/([^/]+)", r"/ap[i]/v1/communities/(did:plc:zzz)/membership/check",
                r"/api/v1/communitie?s/(did:plc:yyy)", r"/api/v1/communities/(did:plc:xxx)|/c/(x)",
                r"/api/v1/communities/" + did + r"/records/([^/?#]+)",
                r"/y/(a)?/z/(b)", r"/y/(a)/z/(b)?", r"/y/(q)+/w/(b)", r"/y/(r)/a\.b/(c)",
                r"/c[^][]|/api/v1/communities/(cls)", r"/c[^][]|(a)/k/(b)", r"/c[^][]|/k/",
                r"/c(?#()|/api/v1/communities/(comment)", r"/api/v1/items/\d", r"/api/v1/items/(i)\w", r"/api/v1/apps/foo|/c/(alt)",
                r"/api/v1/apps/?(q)",
                r"/api/v1/communities/" + did + r"/membership/check", r"/api/v1/communities/" + did,
                r"/api/v1/communities/" + did + r"/members/(approve|reject)", r"/x/a|/x/b/c",
                r"/x/items/?", r"/x/f\.json", r"(?i)/x/caps", r"/x/a\|b/c", r"/x/a[|]/c",
                r"/api/v1/communities/" + did + r"/members/" + did, r"/x/(?P<name>[^/]+)/edit",
                r"/api/v1/communities/" + did + r"/membership/check/more"]
    routes = [(p, i) for i, p in enumerate(patterns)]
    table = RouteTable(routes)
    paths = ["/api/v1/communities/did:plc:abc/membership/check", "/api/v1/communities/did%3Aplc%3Aabc/membership/check",
             "/api/v1/communities/did:plc:abc", "/api/v1/communities/did:plc:abc/members/approve",
             "/api/v1/communities/did:plc:abc/members/did:plc:def", "/x/a", "/x/b/c", "/x/items", "/x/items/",
             "/x/f.json", "/x/fxjson", "/x/CAPS", "/x/caps", "/x/a|b/c", "/x/a|/c", "/x/thing/edit",
             "/api/v1/communities/did:plc:abc/membership/check/more", "/api/v1/communities/did:plc:abc/membership",
             "/c/foo", "/api/v1/communities/did:plc:zzz/membership/check", "/api/v1/communits/did:plc:yyy",
             "/api/v1/communities/did:plc:yyy", "/api/v1/communities/did:plc:xxx", "/c/x",
             "/api/v1/communities/did:plc:abc/records/app.x", "/api/v1/communities/did:plc:abc/records/",
             "/y//z/b", "/y/a/z/", "/y/qq/w/b", "/y/r/a.b/c", "/y/r/aXb/c",
             "/api/v1/communities/cls", "/cx", "/c]", "/api/v1/communities/comment", "/api/v1/items/5",
             "/api/v1/items/iw", "/api/v1/items/i_", "/c/alt", "/api/v1/apps/foo", "/api/v1/appsq",
             "/api/v1/apps/q", "/nothing", "/c", "/c/", "/cx/y", "/x", "/y", "/", "", "*", "c/foo",
             "//c/foo", "/X/caps", "/x/CAPS/", "/api", "/c]/k/"]
    for path in paths:
        request = SimpleNamespace(path=path)
        linear = next(((h, (m.match(request) or {}).get("path_args", [])) for p, h in routes
                       if (m := PathMatches(p)).match(request) is not None), None)
        found = table.match(request)
        assert (None if found is None else (found[0], found[2])) == linear, path


@pytest.mark.parametrize("values", [["abc", "x"], [1e30, "x"], ["x"], [True, "x"], [2 ** 70, "x"]])
async def test_tampered_cursor_is_400_not_500(app, client, values):
    import base64
    import json as jsonlib
    alice = await login_as(app, "did:plc:alice")
    raw = jsonlib.dumps(values).encode()
    cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    resp = await client.get("/api/v1/apps", session=alice, params={"cursor": cursor})
    if values == ["abc", "x"]:
        assert resp.status == 200  # well-formed (two strings): simply nothing after it
    else:
        assert_error(resp, 400, "invalid_cursor")
    infinity = base64.urlsafe_b64encode(b'[Infinity, "x"]').decode().rstrip("=")
    assert_error(await client.get("/api/v1/apps", session=alice, params={"cursor": infinity}), 400)


async def test_deeply_nested_or_non_standard_json_is_400(app, client):
    key = await key_for(app, client)
    deep = b"[" * 50_000 + b"]" * 50_000
    resp = await client.post("/test/public-echo", body=b'{"x": ' + deep[:30000] + deep[-30000:] + b"}",
                             headers={"Content-Type": "application/json"})
    assert_error(resp, 400, "invalid_json")
    resp = await client.post("/test/echo", body=b'{"count": NaN}', api_key=key,
                             headers={"Content-Type": "application/json"})
    assert_error(resp, 400, "invalid_json")


def test_the_content_type_parser_reads_the_media_type_and_its_parameters():
    from daemon.http.base import _is_json_type, media_type
    assert media_type('Application/JSON ; Charset="UTF-8"; boundary=x') == \
        ("application/json", {"charset": "UTF-8", "boundary": "x"})
    assert media_type("text/plain;;flag") == ("text/plain", {})
    assert _is_json_type("application/json;  charset=utf8")
    assert _is_json_type('application/json; charset="utf-8"')
    assert not _is_json_type("application/json; charset=latin-1")
    assert not _is_json_type("application/jsonx")
    assert not _is_json_type("")


def test_base_handler_clear_resets_like_tornados(app):
    """BaseHandler.clear (the Date value cached per second) leaves a handler as Tornado's
    RequestHandler.clear does, but for our Server header: a Tornado upgrade that changes
    clear() fails here instead of leaking a header or a body."""
    import time
    from unittest import mock

    import tornado.httputil
    import tornado.web

    from daemon.http.base import HealthHandler

    request = tornado.httputil.HTTPServerRequest(
        start_line=tornado.httputil.RequestStartLine("GET", "/health", "HTTP/1.1"),
        headers=tornado.httputil.HTTPHeaders({"Host": "localhost"}), connection=mock.Mock())
    ours = HealthHandler(app, request)
    ours.set_status(404)
    ours.write(b"x")
    ours.put_header("X-Extra", "1")
    ours.clear()
    theirs = HealthHandler(app, request)
    tornado.web.RequestHandler.clear(theirs)
    mine, tornados = dict(ours._headers.get_all()), dict(theirs._headers.get_all())
    assert mine.pop("Server") == "commonroom" and tornados.pop("Server") != "commonroom"   # ours from the start
    now = int(time.time())
    assert mine.pop("Date") in {tornado.httputil.format_timestamp(t) for t in (now - 1, now)}
    tornados.pop("Date")
    assert mine.pop("X-Request-Id") == ours.request_id and tornados.pop("X-Request-Id") == theirs.request_id
    assert mine == tornados and "X-Extra" not in mine
    assert (ours._write_buffer, ours.get_status(), ours._reason) == (theirs._write_buffer, 200, theirs._reason)
    assert set(vars(ours)) == set(vars(theirs))
