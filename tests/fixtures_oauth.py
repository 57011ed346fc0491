"""Fixtures for OAuth login tests (loaded by tests/conftest.py as a pytest plugin).

The service runs over TLS at ``https://commonroom.ci-test.dev:<port>`` (the devnet PDS
resolves that name to 127.0.0.1 and trusts ``test_ca``) as a confidential client::

    @pytest.fixture
    def config_overrides(oauth_tls_config):
        return oauth_tls_config

    @pytest.mark.pds
    async def test_something(app, service, oauth_account):
        browser = service()                                  # a cookie jar
        await oauth_login(browser, oauth_account)            # POST /login ... /oauth/callback
        me = await browser.get("/users/me")

`pds_authorize()` plays the person at the PDS: it signs in and consents (or declines)
through the authorization page's JSON API, and returns the URL the PDS redirects to.
"""

from __future__ import annotations

import json as jsonlib
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.testing import bind_unused_port

from daemon.security.sessions import hash_sid
from tests.helpers import Response, serve_app

SERVICE_HOST = "commonroom.ci-test.dev"


class ServiceResponse(Response):
    @property
    def location(self) -> str | None:
        return self.headers.get("Location")

    def set_cookies(self) -> dict[str, str]:
        out = {}
        for line in self.headers.get_list("Set-Cookie"):
            name, _, value = line.split(";", 1)[0].partition("=")
            out[name.strip()] = value.strip().strip('"')
        return out

    def set_cookie_attrs(self, name: str) -> dict[str, str] | None:
        """The attributes (lower-case names; flags map to "") of the Set-Cookie for `name`."""
        for line in self.headers.get_list("Set-Cookie"):
            if line.split("=", 1)[0].strip() == name:
                return cookie_attrs(line)
        return None


def cookie_attrs(set_cookie: str) -> dict[str, str]:
    out = {}
    for part in set_cookie.split(";")[1:]:
        key, _, value = part.strip().partition("=")
        out[key.lower()] = value
    return out


def path_matches(request_path: str, cookie_path: str) -> bool:
    """RFC 6265 5.1.4: is a cookie with Path=`cookie_path` sent to `request_path`?"""
    if request_path == cookie_path:
        return True
    return request_path.startswith(cookie_path) and (
        cookie_path.endswith("/") or request_path[len(cookie_path)] == "/")


@dataclass
class ServiceClient:
    """One browser's view of the service: HTTPS at the service's public name, trusting the
    test CA, with a cookie jar (sid, csrf-token, the login's oauth-flow cookie) that sends
    each cookie only to the paths its Path attribute covers, and the CSRF header on writes."""

    base_url: str
    ca_pem: str
    cookies: dict[str, str] = field(default_factory=dict)
    cookie_paths: dict[str, str] = field(default_factory=dict)  # name -> Path (default "/")

    def __post_init__(self) -> None:
        host = urlsplit(self.base_url).hostname
        self._http = AsyncHTTPClient(force_instance=True, hostname_mapping={host: "127.0.0.1"})

    def close(self) -> None:
        self._http.close()

    @property
    def session_id(self) -> str | None:
        sid = self.cookies.get("sid")
        return hash_sid(sid) if sid else None

    async def request(self, method: str, path_or_url: str, *, json: Any = None,
                      form: dict[str, str] | None = None, headers: dict[str, str] | None = None,
                      csrf: bool = True) -> ServiceResponse:
        url = path_or_url if path_or_url.startswith("https://") else self.base_url + path_or_url
        hdrs = dict(headers or {})
        body: bytes | None = None
        if json is not None:
            body, hdrs["Content-Type"] = jsonlib.dumps(json).encode(), "application/json"
        elif form is not None:
            body = urlencode(form).encode()
            hdrs["Content-Type"] = "application/x-www-form-urlencoded"
        elif method in ("POST", "PUT", "PATCH"):
            body = b""
        path = urlsplit(url).path or "/"
        sent = {k: v for k, v in self.cookies.items()
                if path_matches(path, self.cookie_paths.get(k, "/"))}
        if sent:
            hdrs["Cookie"] = "; ".join(f"{k}={v}" for k, v in sent.items())
        if csrf and method not in ("GET", "HEAD") and "csrf-token" in self.cookies:
            hdrs["x-csrf-token"] = self.cookies["csrf-token"]
        resp = await self._http.fetch(HTTPRequest(
            url, method=method, headers=hdrs, body=body, follow_redirects=False,
            ca_certs=self.ca_pem, request_timeout=30, allow_nonstandard_methods=True),
            raise_error=False)
        if resp.code == 599 and resp.error is not None:
            raise resp.error
        out = ServiceResponse(resp.code, resp.headers, resp.body or b"")
        for line in resp.headers.get_list("Set-Cookie"):
            name, _, value = line.split(";", 1)[0].partition("=")
            name, value, attrs = name.strip(), value.strip().strip('"'), line.lower()
            if not value or "max-age=0" in attrs or "expires=thu, 01 jan 1970" in attrs:
                self.cookies.pop(name, None)
                self.cookie_paths.pop(name, None)
            else:
                self.cookies[name] = value
                self.cookie_paths[name] = cookie_attrs(line).get("path") or "/"
        return out

    async def get(self, path: str, **kw: Any) -> ServiceResponse:
        return await self.request("GET", path, **kw)

    async def post(self, path: str, **kw: Any) -> ServiceResponse:
        return await self.request("POST", path, **kw)


# ------------------------------------------------------------------ the person at the PDS


async def pds_authorize(authorize_url: str, handle: str, password: str, *,
                        deny: bool = False) -> str:
    """Sign in and consent (or decline) on the PDS's authorization page, the way its
    single-page app does; returns the redirect URL (our callback with code or error)."""
    issuer = "{0.scheme}://{0.netloc}".format(urlsplit(authorize_url))
    cookies: dict[str, str] = {}

    def keep(resp: httpx.Response) -> None:
        for line in resp.headers.get_list("set-cookie"):
            k, _, v = line.split(";", 1)[0].partition("=")
            cookies[k] = v

    async with httpx.AsyncClient(timeout=30) as http:
        page = await http.get(authorize_url, headers={
            "sec-fetch-mode": "navigate", "sec-fetch-dest": "document", "sec-fetch-site": "cross-site"})
        assert page.status_code == 200, page.text[:300]
        keep(page)

        async def api(path: str, body: dict[str, Any], bearer: str | None = None) -> dict[str, Any]:
            headers = {"origin": issuer, "referer": authorize_url, "sec-fetch-mode": "same-origin",
                       "sec-fetch-site": "same-origin", "sec-fetch-dest": "empty",
                       "x-csrf-token": cookies["csrf-token"], "content-type": "application/json",
                       "cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}
            if bearer:
                headers["authorization"] = f"Bearer {bearer}"
            resp = await http.post(f"{issuer}/@atproto/oauth-provider/~api{path}", headers=headers,
                                   content=jsonlib.dumps(body))
            keep(resp)
            assert resp.status_code == 200, f"{path}: {resp.status_code} {resp.text[:300]}"
            return resp.json()

        if deny:
            url = (await api("/reject", {}))["url"]
        else:
            signed_in = await api("/sign-in", {"locale": "en", "username": handle,
                                               "password": password, "remember": False})
            account = signed_in["account"]
            did = account.get("sub") or account.get("did")
            url = (await api("/consent", {"did": did}, bearer=signed_in.get("ephemeralToken")))["url"]
        # The page then navigates to the server's own redirect endpoint, which answers with
        # the redirect to the client.
        hop = await http.get(url, headers={
            "sec-fetch-mode": "navigate", "sec-fetch-dest": "document", "sec-fetch-site": "same-origin",
            "origin": issuer, "referer": authorize_url,
            "cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())})
        assert hop.status_code in (302, 303), f"redirect hop: {hop.status_code} {hop.text[:300]}"
        return hop.headers["location"]


def callback_path(redirect_url: str) -> str:
    """The path + query of a redirect to our callback (to send to the service directly)."""
    parts = urlsplit(redirect_url)
    return f"{parts.path}?{parts.query}"


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


@dataclass
class LoginTiming:
    login: float = 0.0       # POST /login (discovery + PAR)
    pds: float = 0.0         # sign-in + consent at the PDS
    callback: float = 0.0    # /oauth/callback (code exchange, checks, session)
    total: float = 0.0


async def oauth_login(browser: ServiceClient, account: dict[str, str],
                      timing: LoginTiming | None = None) -> ServiceResponse:
    """The whole JSON-API login; returns the callback's response (302 + cookies)."""
    t0 = time.perf_counter()
    resp = await browser.post("/login", json={"input": account["handle"]})
    assert resp.status == 200, resp.text
    t1 = time.perf_counter()
    redirect = await pds_authorize(resp.json()["redirectUrl"], account["handle"], account["password"])
    t2 = time.perf_counter()
    done = await browser.get(callback_path(redirect))
    t3 = time.perf_counter()
    assert done.status == 302, done.text
    if timing is not None:
        timing.login, timing.pds, timing.callback, timing.total = t1 - t0, t2 - t1, t3 - t2, t3 - t0
    return done


# ------------------------------------------------------------------ fixtures


@pytest.fixture
def oauth_tls_socket() -> Iterator[tuple[Any, int]]:
    """A listening socket on 127.0.0.1, bound before the app exists so its port can be
    part of `server.base_url`."""
    sock, port = bind_unused_port()
    yield sock, port
    sock.close()


@pytest.fixture
def oauth_tls_config(devnet: Any, pds_config_overrides: dict[str, Any],
                     oauth_tls_socket: tuple[Any, int]) -> dict[str, Any]:
    """Config for the service as a confidential client at an https base_url."""
    _, port = oauth_tls_socket
    return {**pds_config_overrides,
            "server": {"base_url": f"https://{SERVICE_HOST}:{port}"},
            "oauth": {"after_login_url": "/users/me"}}


@pytest.fixture
def tls_server(io_loop: Any, app: Any, oauth_tls_socket: tuple[Any, int], test_ca: Any) -> Iterator[Any]:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(test_ca.cert_pem), str(test_ca.key_pem))
    sock, port = oauth_tls_socket
    yield from serve_app(io_loop, app, sock, port, ssl_options=ctx)


@pytest.fixture
def service(tls_server: Any, app: Any, test_ca: Any) -> Iterator[Callable[[], ServiceClient]]:
    """``service()`` -> a new ServiceClient (its own cookie jar) for the TLS service."""
    made: list[ServiceClient] = []

    def make() -> ServiceClient:
        client = ServiceClient(app.config.server.base_url, str(test_ca.ca_pem))
        made.append(client)
        return client

    yield make
    for c in made:
        c.close()


@pytest.fixture
def oauth_account(devnet: Any, new_handle: Callable[[str], str]) -> dict[str, str]:
    """A fresh account on the devnet PDS: {did, handle, password, ...}."""
    return devnet.create_account(new_handle("user"))
