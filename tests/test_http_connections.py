"""Keep-alive connections after a refusal, and what the responses say about the server.

A client that reuses connections (httpx, requests.Session, Node's agents) sends its next
request on the connection of the last one. A refusal must therefore either leave the
connection usable or say ``Connection: close``; it must never close it silently. These
tests talk HTTP/1.1 over a raw socket to see exactly what happens on the connection."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import pytest

from tests.fixtures_communities import seed_community
from tests.helpers import login_as, register_app

BAD_KEY = "cr_" + "0" * 64
#: Guards against a server that waits for a body it should not read: a hang, not a timing.
HANG_GUARD_SECONDS = 20


@pytest.fixture
def config_overrides():
    return {"rate_limits": {"api": {"requests": 3, "window_seconds": 60}},
            "server": {"max_body_bytes": 2048}}


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def says_close(self) -> bool:
        return self.headers.get("connection", "").lower() == "close"


class RawConnection:
    """One keep-alive HTTP/1.1 connection to the server under test."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> "RawConnection":
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def close(self) -> None:
        self.writer.close()

    async def send(self, method: str, path: str, headers: dict[str, str] | None = None,
                   body: bytes = b"", declared_length: int | None = None) -> None:
        lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
        hdrs = dict(headers or {})
        if body or declared_length is not None or method in ("POST", "PUT", "PATCH"):
            hdrs.setdefault("Content-Length", str(len(body) if declared_length is None else declared_length))
        lines += [f"{k}: {v}" for k, v in hdrs.items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        await self.writer.drain()

    async def response(self) -> RawResponse | None:
        """The next response, or None if the server closed the connection instead."""
        try:
            head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), HANG_GUARD_SECONDS)
        except asyncio.IncompleteReadError as exc:
            assert exc.partial == b"", exc.partial
            return None
        except ConnectionResetError:
            return None
        except asyncio.TimeoutError:
            raise AssertionError("no answer: the server is waiting for something") from None
        status_line, *header_lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return RawResponse(int(status_line.split()[1]), headers, body)

    async def closed_by_server(self) -> bool:
        try:
            rest = await asyncio.wait_for(self.reader.read(1), HANG_GUARD_SECONDS)
        except ConnectionResetError:
            return True
        return rest == b""


async def setup(app, client):
    alice = await login_as(app, "did:plc:alice")
    key = (await register_app(client, alice))["apiKey"]
    did = await seed_community(app, "did:plc:admin", members=("did:plc:member",))
    return alice, key, did


def json_headers(**extra: str) -> dict[str, str]:
    return {"Content-Type": "application/json", **extra}


async def assert_connection_still_serves(conn: RawConnection) -> None:
    await conn.send("GET", "/health")
    after = await conn.response()
    assert after is not None, "the refusal did not say Connection: close, but the connection was closed"
    assert after.status == 200 and json.loads(after.body)["status"] == "ok"


async def test_refusals_of_requests_with_small_bodies_keep_the_connection(app, client, server):
    alice, key, did = await setup(app, client)
    body = json.dumps({"userDid": "did:plc:someone"}).encode()
    join = f"/api/v1/communities/{did}/members/join"
    check = f"/api/v1/communities/{did}/membership/check"      # the lean route
    cases = [
        # (what, method, path, headers, body, status, error)
        ("bad API key", "POST", join, json_headers(**{"X-Api-Key": BAD_KEY}), body, 401, "invalid_api_key"),
        ("no credentials", "POST", join, json_headers(), body, 401, "unauthorized"),
        ("bad API key, lean route", "POST", check, json_headers(**{"X-Api-Key": BAD_KEY}), body, 401,
         "invalid_api_key"),
        ("session without CSRF header", "POST", "/api/v1/apps/register",
         json_headers(Cookie=f"sid={alice.sid}; csrf-token={alice.csrf}"),
         json.dumps({"name": "X", "domain": "x.example.com"}).encode(), 403, "csrf_failed"),
        ("unknown route", "POST", "/api/v1/nothing-here", json_headers(), body, 404, "not_found"),
        ("no credentials, no body", "GET", "/api/v1/apps", {}, b"", 401, "unauthorized"),
    ]
    for what, method, path, headers, payload, status, error in cases:
        conn = await RawConnection.open(server.port)
        try:
            await conn.send(method, path, headers, payload)
            refused = await conn.response()
            assert refused is not None and refused.status == status, (what, refused)
            assert json.loads(refused.body)["error"] == error, what
            assert not refused.says_close(), what
            await assert_connection_still_serves(conn)
        finally:
            conn.close()


async def test_rate_limited_requests_keep_the_connection_on_both_route_kinds(app, client, server, clock):
    _, key, did = await setup(app, client)
    body = json.dumps({"userDid": "not-a-did"}).encode()   # a 400 until the limit is reached
    for path in (f"/api/v1/communities/{did}/members/join", f"/api/v1/communities/{did}/membership/check"):
        conn = await RawConnection.open(server.port)
        try:
            statuses = []
            for _ in range(6):
                await conn.send("POST", path, json_headers(**{"X-Api-Key": key}), body)
                answer = await conn.response()
                assert answer is not None, (path, statuses)
                statuses.append(answer.status)
                if answer.status == 429:
                    assert not answer.says_close()
                    break
            assert statuses[-1] == 429, (path, statuses)
            await assert_connection_still_serves(conn)
        finally:
            conn.close()
        clock.advance(61)  # a fresh window for the next route


@pytest.mark.parametrize("route", ["base", "lean"])
async def test_an_oversized_body_is_refused_unread_and_the_connection_closed(app, client, server, route):
    _, key, did = await setup(app, client)
    path = (f"/api/v1/communities/{did}/members/join" if route == "base"
            else f"/api/v1/communities/{did}/membership/check")
    conn = await RawConnection.open(server.port)
    try:
        # Only the headers: a server that waits for the 8 MB body before answering fails here.
        await conn.send("POST", path, json_headers(**{"X-Api-Key": key}), declared_length=8 * 1024 * 1024)
        refused = await conn.response()
        assert refused is not None and refused.status == 413
        assert json.loads(refused.body)["error"] == "payload_too_large"
        assert refused.says_close()
        assert await conn.closed_by_server()
    finally:
        conn.close()


async def test_a_refusal_of_a_large_or_held_back_body_says_close(app, client, server):
    # A body the server will not read (declared larger than it drains, or held back with
    # Expect: 100-continue) gets its refusal at once, saying Connection: close.
    upload_path = "/api/v1/nothing-here"
    for headers, length in [({"Expect": "100-continue"}, 100), ({}, 1024 * 1024)]:
        conn = await RawConnection.open(server.port)
        try:
            await conn.send("POST", upload_path, json_headers(**headers), declared_length=length)
            refused = await conn.response()
            assert refused is not None and refused.status in (404, 413), refused
            assert refused.says_close(), (headers, length, refused.headers)
            assert await conn.closed_by_server()
        finally:
            conn.close()


async def test_the_server_header_names_no_framework_or_version(app, client, server):
    _, key, did = await setup(app, client)
    base = await client.get("/api/v1/communities", api_key=key)
    lean = await client.post(f"/api/v1/communities/{did}/membership/check",
                             json={"userDid": "did:plc:member"}, api_key=key)
    error = await client.get("/api/v1/nothing-here")
    for resp in (base, lean, error):
        assert resp.headers.get("Server") == "commonroom", resp.headers.get("Server")


async def test_head_and_body_time_limits_are_kept_per_connection_not_per_request():
    """`server.idle_connection_timeout_seconds` and `server.body_timeout_seconds` as the
    daemon's server keeps them (daemon/http/server.py: per connection, one sweep, instead
    of two Tornado timers per request): an idle keep-alive connection, a head that never
    ends and a declared body that never comes are each closed unanswered once their limit
    has passed; an application that takes longer than both to answer is not cut off."""
    import socket
    import time

    import tornado.web
    from tornado.testing import bind_unused_port

    from daemon.http.server import Server

    class Slow(tornado.web.RequestHandler):
        async def get(self) -> None:
            await asyncio.sleep(0.6)           # longer than both limits
            self.finish("ok")

        def post(self) -> None:
            self.finish("posted")

    srv = Server(tornado.web.Application([(r"/", Slow)]), idle_connection_timeout=0.3, body_timeout=0.3)
    assert srv.conn_params.header_timeout is None   # no Tornado timer on each request's head
    sock, port = bind_unused_port()
    srv.add_sockets([sock])

    async def exchange(data: bytes, wait: float = 3.0) -> tuple[bytes, float]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        started = time.monotonic()
        writer.write(data)
        got = b""
        try:
            while chunk := await asyncio.wait_for(reader.read(4096), wait):
                got += chunk
        finally:
            writer.close()
        return got, time.monotonic() - started

    try:
        answered, took = await exchange(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")   # answered, then idle
        assert answered.startswith(b"HTTP/1.1 200") and answered.endswith(b"ok"), answered
        assert 0.6 + 0.3 <= took < 2.5, took          # the idle wait after it closed it
        half, took = await exchange(b"GET / HTTP/1.1\r\nHost: x\r\n")          # a head that never ends
        assert half == b"" and 0.3 <= took < 2.0, took
        unsent, took = await exchange(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
        assert unsent == b"" and 0.3 <= took < 2.0, took
        full, _ = await exchange(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        assert full.startswith(b"HTTP/1.1 200") and b"posted" in full
        await asyncio.sleep(0.5)
        assert srv._waiting == {}                     # nothing left behind
    finally:
        srv.stop()
        await srv.close_all_connections()
