"""A bounded fuzz pass over every route: whatever a client sends, the service answers with
a 2xx, 3xx or 4xx, never a 5xx, and every JSON error has the documented shape
``{"error": "<code>", "message": "<sentence>"}`` (an HTML page only on the browser's pages).

Against the devnet, with a real community, a trusted app, a second app and a browser
session, so that requests reach the code behind the checks, the PDS included. Every route
(as the plugins declare them, so a new route is fuzzed without editing this file) gets
``FUZZ_EXAMPLES`` requests per method from hypothesis: path parameters, query, headers,
credentials and body drawn from values that matter here (real and malformed DIDs, lone
surrogates, huge numbers, wrong content types, broken multipart, nesting) and from random
text. Generation is derandomized so CI runs the same requests each time; set
``FUZZ_SEED`` to explore others.

The network beyond loopback is closed to this test: DNS and every outbound target other
than loopback are refused (a random handle must not become a DNS query), as the workplace
allows only loopback traffic. That refusal is the one stand-in here.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

import pytest
import tornado.web
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from daemon.http.routing import pattern_groups, pattern_literal
from tests.fixtures_communities import Api, devnet_module_fixtures
from tests.helpers import login_as, loopback_only

_, extra_plugins = devnet_module_fixtures()


@pytest.fixture
def config_overrides(communities_config: dict[str, Any]) -> dict[str, Any]:
    limits = {**communities_config["rate_limits"], "failed_auth": {"requests": 100000, "window_seconds": 60}}
    return {**communities_config, "rate_limits": limits, "webhooks": {"allow_http": True, "allowed_targets": ["127.0.0.0/8"]}}

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "12"))
SEED = os.environ.get("FUZZ_SEED")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

FIELDS = ("userDid", "adminDid", "memberDid", "creatorDid", "currentOwnerDid", "newOwnerDid",
          "collection", "rkey", "record", "displayName", "description", "type", "handle",
          "password", "appPassword", "name", "domain", "url", "events", "communityDid", "reason",
          "input", "query", "trusted", "manage", "requests", "windowSeconds", "active",
          "swapRecord", "useMyBanner", "avatar", "banner", "$type", "cursor", "limit")


@dataclass
class World:
    community: str
    approval_community: str
    alice: str
    bob: str
    app_key: str
    other_key: str
    app_id: str
    webhook_id: str
    session: Any


def _interesting_strings(world: World) -> st.SearchStrategy[str]:
    fixed = [world.community, world.approval_community, world.alice, world.bob,
             "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "DID:PLC:AAAAAAAAAAAAAAAAAAAAAAAA",
             "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
             "did:web:169.254.169.254", "did:web:localhost%3A1", "did:plc:", "did:", "",
             " ", "\ud800", "a\udfffb", "\x00", "\u202e", "x" * 5000, "open", "admin-approved",
             "private", "closed", "com.example.fuzz", "app.bsky.actor.profile",
             "community.commonroom.profile", "Community.Commonroom.profile", "self", "3jzfcijpj2z2a",
             "..", "../..", "%00", "http://127.0.0.1:1/hook", "https://example.invalid/x",
             "javascript:alert(1)", "member.joined", "record.created", "alice.test", "-1",
             "1e309", "NaN", world.app_id, world.webhook_id]
    return st.one_of(st.sampled_from(fixed), st.text(max_size=40))


def _json_values(world: World) -> st.SearchStrategy[Any]:
    scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
                        st.floats(allow_nan=False, allow_infinity=False), _interesting_strings(world))
    return st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=8)), inner, max_size=4)),
        max_leaves=12)


def _plausible_object(world: World) -> st.SearchStrategy[dict[str, Any]]:
    """A body most routes would accept, with one to three fields replaced by drawn values:
    requests that get past the first check, so the code behind it is fuzzed too."""
    base = {"userDid": world.bob, "adminDid": world.alice, "memberDid": world.bob,
            "creatorDid": world.alice, "newOwnerDid": world.bob, "displayName": "Fuzzed",
            "description": "about", "type": "open", "collection": "com.example.fuzz",
            "record": {"$type": "com.example.fuzz", "text": "hello"}, "rkey": "3jzfcijpj2z2a",
            "url": "http://127.0.0.1:1/hook", "events": ["member.joined"],
            "communityDid": world.community, "name": "Fuzz app", "domain": "fuzz.example.com",
            "input": "alice.test", "reason": "because"}
    changes = st.dictionaries(st.sampled_from(FIELDS), _json_values(world), min_size=1, max_size=3)
    drops = st.sets(st.sampled_from(sorted(base)), max_size=4)
    return st.tuples(changes, drops).map(
        lambda cd: {k: v for k, v in {**base, **cd[0]}.items() if k not in cd[1]})


def _bodies(world: World) -> st.SearchStrategy[tuple[bytes | None, str | None]]:
    objects = st.one_of(_plausible_object(world),
                        st.dictionaries(st.sampled_from(FIELDS), _json_values(world), max_size=6))
    as_json = objects.map(lambda o: json.dumps(o).encode())
    json_types = st.sampled_from(["application/json", "application/json; charset=utf-8", None,
                                  "text/plain", "application/json-patch+json",
                                  "application/x-www-form-urlencoded"])
    boundary = "fuzzboundary"
    multipart_bodies = st.sampled_from([
        b"--x\r\n",
        f"--{boundary}\r\nContent-Disposition: form-data\r\n\r\nabc\r\n--{boundary}--\r\n".encode(),
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.png\"\r\n"
        f"Content-Type: image/png\r\n\r\nnot a png\r\n--{boundary}--\r\n".encode(),
        f"--{boundary}\r\nContent-Disposition: nonsense\r\n\r\nabc\r\n--{boundary}--\r\n".encode(),
        (f"--{boundary}\r\nContent-Disposition: form-data; name=\"p\"\r\n\r\nv\r\n" * 2000
         + f"--{boundary}--\r\n").encode(),
        b"",
    ])
    multipart_types = st.sampled_from([f"multipart/form-data; boundary={boundary}", "multipart/form-data",
                                       "multipart/form-data; boundary="])
    return st.one_of(
        st.tuples(as_json, st.just("application/json")),
        st.tuples(as_json, json_types),
        st.tuples(st.none(), st.none()),
        st.tuples(_json_values(world).map(lambda v: json.dumps(v).encode()), json_types),
        st.tuples(st.binary(max_size=64), json_types),
        st.tuples(st.sampled_from([b"{", b"[]", b'{"a":1}{', b'{"userDid": "\\ud800"}', b"\xff\xfe",
                                   b"[" * 5000 + b"]" * 5000, b'{"a": NaN}', b'{"a": 1e999}']), json_types),
        st.tuples(multipart_bodies, multipart_types),
    )


def _segment(world: World, kind: str) -> st.SearchStrategy[str]:
    quoted = st.text(min_size=1, max_size=30).map(lambda s: urllib.parse.quote(s, safe=""))
    choices = {
        "did": st.sampled_from([world.community, world.community, world.community, world.approval_community, world.alice, world.bob,
                                "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "did%3Aplc%3Azzzzzzzzzzzzzzzzzzzzzzzz",
                                "did:web:169.254.169.254", "did:x", "did:plc:%00", "did:plc:%F0%9F%92%A9"]),
        "app": st.sampled_from([world.app_id, "app_0000000000000000"]),
        "webhook": st.sampled_from([world.webhook_id, "wh_0000000000000000"]),
        "number": st.sampled_from(["1", "0", "999999999999999999"]),
        "segment": st.sampled_from(["com.example.fuzz", "app.bsky.actor.profile", "self", "3jzfcijpj2z2a",
                                    "alice.test", world.community, "%2e%2e", "a%00b"]),
    }
    return st.one_of(choices[kind], choices[kind], quoted) if kind in ("did", "segment") else choices[kind]


# Groups of the routes' patterns, by the text of the group: what to fill them with.
_GROUP_KINDS = (
    (re.compile(r"^\(did"), "did"),
    (re.compile(r"^\(app_"), "app"),
    (re.compile(r"^\(wh_"), "webhook"),
    (re.compile(r"^\(\\d"), "number"),
)


def _groups(pattern: str) -> list[tuple[int, int, str]]:
    """(start, end, text) of each top-level capturing group of a route pattern."""
    return [(start, end, pattern[start:end]) for start, end in pattern_groups(pattern)]


def _group_strategy(world: World, text: str) -> st.SearchStrategy[str]:
    inner = text[1:-1]
    if re.fullmatch(r"[\w-]+(\|[\w-]+)+", inner):
        return st.sampled_from(inner.split("|"))
    for expr, kind in _GROUP_KINDS:
        if expr.match(text):
            return _segment(world, kind)
    return _segment(world, "segment")


_literal = pattern_literal


def _path_strategy(world: World, pattern: str) -> st.SearchStrategy[str]:
    parts: list[st.SearchStrategy[str]] = []
    pos = 0
    for start, end, text in _groups(pattern):
        parts.append(st.just(_literal(pattern[pos:start])))
        parts.append(_group_strategy(world, text))
        pos = end
    parts.append(st.just(_literal(pattern[pos:])))
    return st.tuples(*parts).map("".join)


def _probe_paths(world: World, pattern: str) -> list[str]:
    """The route's path with real values: the community, then a member, the app, the
    webhook; every alternative of an alternation group."""
    paths = [""]
    dids = iter([world.community, world.bob, world.alice])
    segments = itertools.chain(["com.example.fuzz", "3jzfcijpj2z2a", "x"], itertools.repeat("y"))
    pos = 0
    for start, end, text in _groups(pattern):
        literal = _literal(pattern[pos:start])
        inner = text[1:-1]
        if re.fullmatch(r"[\w-]+(\|[\w-]+)+", inner):
            options = inner.split("|")
        elif text.startswith("(did"):
            options = [next(dids)]
        elif text.startswith("(app_"):
            options = [world.app_id]
        elif text.startswith("(wh_"):
            options = [world.webhook_id]
        elif text.startswith("(\\d"):
            options = ["1"]
        else:
            options = [next(segments)]
        paths = [p + literal + o for p in paths for o in options]
        pos = end
    return [p + _literal(pattern[pos:]) for p in paths]


_MALFORMED_DIDS = ("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK", "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa",
                   "did:web:169.254.169.254", "DID:PLC:AAAAAAAAAAAAAAAAAAAAAAAA")


def _probes(world: World) -> list[tuple[dict[str, str], tuple[bytes | None, str | None]]]:
    """Requests every route gets, beside the random ones: the known ways in which input
    has broken services like this one."""
    base = {"userDid": world.bob, "adminDid": world.alice, "memberDid": world.bob,
            "creatorDid": world.alice, "newOwnerDid": world.bob, "displayName": "Probe",
            "description": "about", "type": "open", "collection": "com.example.fuzz",
            "record": {"$type": "com.example.fuzz", "text": "hello"}, "rkey": "3jzfcijpj2z2a",
            "url": "http://127.0.0.1:1/hook", "events": ["member.joined"],
            "communityDid": world.community, "name": "Probe app", "domain": "probe.example.com",
            "input": "alice.test", "reason": "because"}

    def replaced(value: Any, keys: Any = None) -> bytes:
        return json.dumps({k: (value if keys is None or k in keys else v) if isinstance(v, str) else v
                           for k, v in base.items()}).encode()

    did_keys = {"userDid", "adminDid", "memberDid", "creatorDid", "newOwnerDid", "communityDid"}
    boundary = "probeboundary"
    out: list[tuple[dict[str, str], tuple[bytes | None, str | None]]] = [
        ({}, (replaced("\ud800"), "application/json")),
        ({}, (json.dumps({**base, "record": {"$type": "com.example.fuzz", "text": "\udfff"}}).encode(),
              "application/json")),
        ({}, (json.dumps(base).encode(), None)),
        ({}, (json.dumps(base).encode(), "application/json-patch+json")),
        ({"limit": ""}, (None, None)), ({"limit": " 5"}, (None, None)), ({"limit": "\u0665"}, (None, None)),
        ({"cursor": ""}, (None, None)), ({"cursor": "\x00"}, (None, None)),
        ({}, (b"--x\r\n", "multipart/form-data; boundary=x")),
        ({}, (b"abc", "multipart/form-data")),
        ({}, (f"--{boundary}\r\nContent-Disposition: nonsense\r\n\r\nabc\r\n--{boundary}--\r\n".encode(),
              f"multipart/form-data; boundary={boundary}")),
        ({}, ((f"--{boundary}\r\nContent-Disposition: form-data; name=\"p\"\r\n\r\nv\r\n" * 2000
               + f"--{boundary}--\r\n").encode(), f"multipart/form-data; boundary={boundary}")),
    ]
    out += [({}, (replaced(bad, did_keys), "application/json")) for bad in _MALFORMED_DIDS]
    return out


def _query_strategy(world: World) -> st.SearchStrategy[dict[str, str]]:
    keys = st.sampled_from(["limit", "cursor", "query", "search", "userDid", "adminDid", "public",
                            "code", "state", "iss", "next", "q", "type"])
    values = st.one_of(st.sampled_from(["", "0", "5", "100", "101", "%205", "\u0665", "-1", "abc",
                                        "eyJhIjoxfQ", "WzEsMl0", "W1tbW1tbWzFdXV1dXV1d", "true",
                                        world.alice, world.community]),
                       st.text(max_size=20))
    return st.dictionaries(keys, values, max_size=3)


def _route_methods(app: Any) -> list[tuple[str, type, str]]:
    """(pattern, handler class, method) for every method every route implements."""
    from daemon.http.base import HealthHandler
    routes: list[tuple] = [(r"/health", HealthHandler)]
    for contributed in app.pm.hook.cr_routes(app=app):
        routes.extend(contributed or [])
    out = []
    for route in routes:
        pattern, handler = route[0], route[1]
        for method in METHODS:
            name = method.lower()
            impl = getattr(handler, name, None)
            if impl is None:
                continue
            if issubclass(handler, tornado.web.RequestHandler) and impl is getattr(tornado.web.RequestHandler, name):
                continue
            out.append((pattern, handler, method))
        out.append((pattern, handler, "PATCH" if not hasattr(handler, "patch") else "OPTIONS"))
    return out


_loopback_only = loopback_only


def _problem(method: str, path: str, status: int, headers: Any, body: bytes) -> str | None:
    """What is wrong with a response, or None."""
    ctype = (headers.get("Content-Type") or "").split(";")[0].strip()
    if status >= 500:
        return f"{status}: {body[:300]!r}"
    if status >= 400:
        if ctype == "text/html":
            return None  # a browser page's error page
        if ctype != "application/json":
            return f"{status} with Content-Type {ctype!r}: {body[:200]!r}"
        try:
            value = json.loads(body)
        except ValueError:
            return f"{status} with a body that is not JSON: {body[:200]!r}"
        if not (isinstance(value, dict) and isinstance(value.get("error"), str)
                and isinstance(value.get("message"), str)):
            return f"{status} with a JSON body not of the error shape: {body[:200]!r}"
    elif 200 <= status < 300 and ctype == "application/json" and body:
        try:
            json.loads(body)
        except ValueError:
            return f"{status} with a body that is not JSON: {body[:200]!r}"
    return None


@pytest.mark.pds
@pytest.mark.slow
def test_no_route_answers_5xx_or_a_malformed_error(io_loop: Any, app: Any, client: Any, devnet: Any,
                                                    people: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _loopback_only(monkeypatch)

    async def setup() -> World:
        api = await Api.make(app, client)
        other = await Api.make(app, client, owner="did:plc:otherowner")
        alice, bob = people("alice"), people("bob")
        open_one = await api.create(alice, "Fuzz club")
        approval = await api.create(alice, "Fuzz guild", type="admin-approved")
        assert (await api.join(open_one["did"], bob["did"])).status == 201
        hook = await client.post("/api/v1/webhooks", api_key=api.key, json={
            "url": "http://127.0.0.1:1/hook", "events": ["member.joined"], "communityDid": open_one["did"]})
        assert hook.status == 201, hook.text
        session = await login_as(app, alice["did"], alice["handle"])
        return World(open_one["did"], approval["did"], alice["did"], bob["did"], api.key, other.key,
                     api.app_id, hook.json()["webhookId"], session)

    world = io_loop.run_sync(setup, timeout=120)
    others = st.sampled_from(["app", "other_app", "session", "session_no_csrf", "none", "bad_key"])
    expected = {"app": "app", "session": "session", "any": "app", None: "none"}

    def credentials(handler: type) -> st.SearchStrategy[str]:
        # Mostly the credentials the route wants, so that requests get past authentication.
        right = expected.get(getattr(handler, "auth", None), "none")
        both = st.sampled_from(["app", "session"]) if getattr(handler, "auth", None) == "any" else st.just(right)
        return st.one_of(both, both, both, others)

    statuses: collections.Counter[int] = collections.Counter()
    failures: dict[tuple[str, str, int], str] = {}

    def send(method: str, path: str, query: dict[str, str], auth: str,
             body: tuple[bytes | None, str | None]) -> None:
        raw, ctype = body
        headers: dict[str, str] = {}
        if ctype:
            headers["Content-Type"] = ctype
        if auth == "app":
            headers["X-Api-Key"] = world.app_key
        elif auth == "other_app":
            headers["X-Api-Key"] = world.other_key
        elif auth == "bad_key":
            headers["X-Api-Key"] = "cr_" + "0" * 64
        elif auth.startswith("session"):
            headers.update(world.session.headers(csrf=auth == "session"))
        if query:
            path += "?" + urllib.parse.urlencode(query)
        resp = io_loop.run_sync(lambda: client.request(method, path, body=raw, headers=headers, timeout=60),
                                timeout=90)
        statuses[resp.status] += 1
        if os.environ.get("FUZZ_DEBUG") and resp.status == 404:
            print("404", method, path, resp.body[:100])
        problem = _problem(method, path, resp.status, resp.headers, resp.body)
        if problem:
            failures.setdefault((method, path.split("?")[0], resp.status),
                                f"{method} {path} [{auth}, {ctype}, body {raw[:120] if raw else raw!r}] -> {problem}")

    def sender(method: str) -> Any:
        def one(path: str, query: dict[str, str], auth: str, body: tuple[bytes | None, str | None]) -> None:
            send(method, path, query, auth, body)
        return one

    right = {"app": "app", "session": "session", "any": "app", None: "none"}
    pairs = sorted(_route_methods(app), key=lambda r: r[2] == "DELETE" and r[0].endswith(r"[^/?#]+)"))
    for pattern, handler, method in pairs:
        for path in _probe_paths(world, pattern):
            for query, body in _probes(world):
                send(method, path, query, right.get(getattr(handler, "auth", None), "none"), body)
    for pattern, handler, method in pairs:
        case = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=SEED is None,
                        phases=[Phase.explicit, Phase.generate],
                        suppress_health_check=list(HealthCheck))
        runner = given(path=_path_strategy(world, pattern), query=_query_strategy(world),
                       auth=credentials(handler), body=_bodies(world))(sender(method))
        if SEED is not None:
            from hypothesis import seed
            runner = seed(int(SEED))(runner)
        case(runner)()

    assert not failures, "\n".join(sorted(failures.values()))
    # A pass means something only if requests got past the checks: some succeeded.
    successes = sum(n for status, n in statuses.items() if status < 300)
    assert successes >= len(_route_methods(app)) // 4, dict(statuses)
