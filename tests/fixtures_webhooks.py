"""Fixtures for the webhook tests: HTTP receivers on loopback, a test-only plugin that
produces events without the PDS, and helpers to set up apps and communities.

`EventSource` is also loaded by a real daemon process in the crash test, through
``COMMONROOM_EXTRA_PLUGINS=tests.fixtures_webhooks:event_source``.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
from standardwebhooks import Webhook, WebhookVerificationError
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from tornado.web import Application as TornadoApp
from tornado.web import RequestHandler

from daemon import hookimpl
from daemon.runtime.events import emit_tx
from daemon.http.base import BaseHandler

#: Config for tests whose receivers listen on 127.0.0.1 over plain http.
LOOPBACK_TARGETS = {"webhooks": {"allow_http": True, "allowed_targets": ["127.0.0.0/8"]}}


# ------------------------------------------------------------------ receivers


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    status: int
    verified: Any = None          # the parsed payload if the signature verified
    verify_error: str | None = None

    @property
    def webhook_id(self) -> str:
        return self.headers.get("webhook-id", "")

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """An HTTP endpoint on 127.0.0.1 that records every request. `responses` is a list
    of statuses answered in turn (the last one repeats)."""

    port: int
    server: HTTPServer
    requests: list[Received] = field(default_factory=list)
    responses: list[int] = field(default_factory=lambda: [200])
    secrets: list[str] = field(default_factory=list)
    on_request: Callable[[Received], None] | None = None
    delay: float = 0.0            # seconds to wait before answering
    started: int = 0              # requests that arrived (answered or not)
    gate: asyncio.Event | None = None  # when set to an Event: requests wait for it to be set
    in_flight: int = 0            # requests arrived and not yet answered
    peak: int = 0                 # the most requests in flight at once

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def answer(self) -> int:
        return self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]

    def verify(self, body: bytes, headers: dict[str, str]) -> tuple[Any, str | None]:
        if not self.secrets:
            return None, "no secret to verify with"
        error = None
        for secret in self.secrets:
            try:
                return Webhook(secret).verify(body, headers), None
            except WebhookVerificationError as exc:
                error = str(exc)
        return None, error

    def ids(self) -> list[str]:
        return [r.webhook_id for r in self.requests]

    def stop(self) -> None:
        self.server.stop()


def start_receiver(responses: list[int] | None = None, port: int | None = None) -> Receiver:
    holder: dict[str, Receiver] = {}

    class Hook(RequestHandler):
        async def post(self) -> None:
            rec = holder["r"]
            rec.started += 1
            rec.in_flight += 1
            rec.peak = max(rec.peak, rec.in_flight)
            try:
                if rec.gate is not None:
                    await rec.gate.wait()
                if rec.delay:
                    await asyncio.sleep(rec.delay)
            finally:
                rec.in_flight -= 1
            headers = {k.lower(): v for k, v in self.request.headers.get_all()}
            verified, error = rec.verify(self.request.body, headers)
            status = rec.answer()
            item = Received(headers, self.request.body, status, verified, error)
            rec.requests.append(item)
            if rec.on_request:
                rec.on_request(item)
            self.set_status(status)
            self.finish("ok" if status < 300 else f"status {status}")

    if port is None:
        sock, port = bind_unused_port()
    else:
        import socket
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
        sock.setblocking(False)
    server = HTTPServer(TornadoApp([(r"/hook", Hook)]))
    server.add_sockets([sock])
    rec = Receiver(port, server, responses=list(responses or [200]))
    holder["r"] = rec
    return rec


@pytest.fixture
def receiver(io_loop: Any) -> Any:
    """A receiver that answers 200 (change `.responses` to script it)."""
    made: list[Receiver] = []

    def make(responses: list[int] | None = None) -> Receiver:
        rec = start_receiver(responses)
        made.append(rec)
        return rec

    yield make
    for rec in made:
        rec.stop()


# ------------------------------------------------------------------ events without the PDS


async def emit_events(app: Any, type: str, community_did: str | None, count: int = 1,
                      data: dict[str, Any] | None = None, app_id: str | None = None) -> list[str]:
    """Emit `count` events in one transaction (as a change in the service would)."""
    ids = []
    async with app.db.transaction("test.emit") as tx:
        for i in range(count):
            event = await emit_tx(app, tx, type, community_did=community_did,
                                  data={"memberDid": f"did:plc:member{i}", **(data or {})},
                                  app_id=app_id)
            ids.append(event.id)
    return ids


class EmitHandler(BaseHandler):
    """POST /test/events {type, communityDid, count}: emit events (test-only plugin)."""

    auth = None

    async def post(self) -> None:
        body = self.json_body()
        ids = await emit_events(self.app, body["type"], body.get("communityDid"),
                                int(body.get("count", 1)))
        self.send_json({"eventIds": ids}, 201)


class EventSource:
    @hookimpl
    def cr_routes(self, app: Any) -> list[tuple]:
        return [(r"/test/events", EmitHandler)]


event_source = EventSource()


# ------------------------------------------------------------------ setup helpers


async def make_app_key(app: Any, client: Any, owner: str = "did:plc:owner",
                       domain: str = "app.example.com") -> dict[str, Any]:
    from tests.helpers import login_as, register_app
    session = await login_as(app, owner)
    return await register_app(client, session, domain=domain)


async def make_community(app: Any, did: str, type: str = "open",
                         creator_app_id: str | None = None) -> None:
    """An active community in the local index (no PDS involved)."""
    from store import communities
    async with app.db.transaction("test.community") as tx:
        await communities.insert_community_tx(
            tx, did=did, handle=did.rsplit(":", 1)[-1] + ".test", display_name="Test", description="",
            type=type, pds_url="http://127.0.0.1:1", account_kind="brought",
            creator_did="did:plc:creator", creator_app_id=creator_app_id, proof_rkey="3kproof",
            now=app.clock.iso_now(), state="active")


async def allow_app(app: Any, community_did: str, app_id: str, *, manage: bool = False) -> None:
    from store import communities
    async with app.db.transaction("test.allow_app") as tx:
        await communities.allow_app_tx(tx, community_did, app_id, "did:plc:creator", app.clock.iso_now(),
                                       manage=manage)


async def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll a fast in-memory condition (network I/O in flight), never a retry timer."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def settle(app: Any) -> Any:
    """Wait until the delivery loop has nothing due and nothing in flight."""
    return app.webhooks.dispatcher.settle()
