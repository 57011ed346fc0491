"""HTTP helpers for tests: a client for the app under test, browser sessions, app
registration, and serving an app on a socket."""

from __future__ import annotations

import json as jsonlib
from dataclasses import dataclass
from typing import Any, Iterator
from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPRequest, HTTPResponse
from tornado.httpserver import HTTPServer

from daemon.security.sessions import create_session


def serve_app(io_loop: Any, app: Any, sock: Any, port: int, ssl_options: Any = None) -> Iterator[HTTPServer]:
    """A fixture body: the app served on an already bound socket, with the daemon's body
    cap; closed with its connections when the test ends. ``srv.port`` is the port."""
    srv = HTTPServer(app, ssl_options=ssl_options, max_body_size=4 * 1024 * 1024)
    srv.add_sockets([sock])
    srv.port = port  # type: ignore[attr-defined]
    yield srv
    srv.stop()
    io_loop.run_sync(srv.close_all_connections, timeout=5)


@dataclass
class Response:
    status: int
    headers: Any
    body: bytes

    def json(self) -> Any:
        return jsonlib.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


@dataclass
class Session:
    did: str
    handle: str | None
    sid: str
    csrf: str

    def headers(self, csrf: bool = True) -> dict[str, str]:
        out = {"Cookie": f"sid={self.sid}; csrf-token={self.csrf}"}
        if csrf:
            out["x-csrf-token"] = self.csrf
        return out


class Client:
    """Talks HTTP to the server under test (a real socket on loopback)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = AsyncHTTPClient(force_instance=True)

    def close(self) -> None:
        self._client.close()

    async def request(self, method: str, path: str, *, json: Any = None, body: bytes | str | None = None,
                      headers: dict[str, str] | None = None, params: dict[str, Any] | None = None,
                      api_key: str | None = None, session: Session | None = None, csrf: bool = True,
                      timeout: float = 30) -> Response:
        hdrs = dict(headers or {})
        if json is not None:
            body = jsonlib.dumps(json)
            hdrs.setdefault("Content-Type", "application/json")
        if api_key is not None:
            hdrs["X-Api-Key"] = api_key
        if session is not None:
            hdrs.update(session.headers(csrf=csrf))
        url = self.base_url + path
        if params:
            url += ("&" if "?" in url else "?") + urlencode({k: v for k, v in params.items() if v is not None})
        if body is None and method in ("POST", "PUT", "PATCH"):
            body = b""
        req = HTTPRequest(url, method=method, headers=hdrs, body=body, follow_redirects=False,
                          request_timeout=timeout, allow_nonstandard_methods=True)
        resp: HTTPResponse = await self._client.fetch(req, raise_error=False)
        if resp.code == 599 and resp.error is not None:
            raise resp.error
        return Response(resp.code, resp.headers, resp.body or b"")

    async def get(self, path: str, **kw: Any) -> Response:
        return await self.request("GET", path, **kw)

    async def post(self, path: str, **kw: Any) -> Response:
        return await self.request("POST", path, **kw)

    async def put(self, path: str, **kw: Any) -> Response:
        return await self.request("PUT", path, **kw)

    async def delete(self, path: str, **kw: Any) -> Response:
        return await self.request("DELETE", path, **kw)


async def login_as(app: Any, did: str, handle: str | None = None) -> Session:
    """A browser session for `did`, made through the store as the OAuth callback would."""
    sid, csrf, _ = await create_session(app, did, handle)
    return Session(did, handle, sid, csrf)


async def register_app(client: Client, session: Session, name: str = "Test app",
                       domain: str = "app.example.com") -> dict[str, Any]:
    resp = await client.post("/api/v1/apps/register", json={"name": name, "domain": domain},
                             session=session)
    assert resp.status == 201, resp.text
    return resp.json()
