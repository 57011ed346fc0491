"""A webhook receiver for plugin tests: an HTTP endpoint on 127.0.0.1 that records every
delivery and verifies its signature with `standardwebhooks`, as docs/webhooks.md tells
receivers to (the `clock` fixture starts at the real time, so the library's five-minute
timestamp window accepts test deliveries).

    @pytest.mark.parametrize("config_overrides", [LOOPBACK_TARGETS])
    async def test_x(app, client, webhook_receiver):
        rec = webhook_receiver()
        await subscribe(client, api_key, rec, ["notice.posted"])   # sets rec.secrets
        ...                                                         # cause the event
        [got] = await rec.wait_for(1)
        assert got.verified["type"] == "notice.posted"              # None if it did not verify
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pytest
from standardwebhooks import Webhook, WebhookVerificationError
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from tornado.web import Application as TornadoApp
from tornado.web import RequestHandler

#: Config that lets webhooks reach receivers on 127.0.0.1 over plain http (tests only).
LOOPBACK_TARGETS = {"webhooks": {"allow_http": True, "allowed_targets": ["127.0.0.0/8"]}}


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

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        """The first `count` deliveries, once they arrived (real time: delivery is network I/O)."""
        deadline = time.monotonic() + timeout
        while len(self.requests) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.requests)} of {count} webhook deliveries arrived in {timeout} s")
            await asyncio.sleep(0.01)
        return self.requests[:count]

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
def webhook_receiver(io_loop: Any) -> Iterator[Callable[..., Receiver]]:
    """``webhook_receiver()`` -> a new `Receiver` answering 200 (``webhook_receiver([500, 200])``
    scripts its answers); stopped after the test."""
    made: list[Receiver] = []

    def make(responses: list[int] | None = None) -> Receiver:
        rec = start_receiver(responses)
        made.append(rec)
        return rec

    yield make
    for rec in made:
        rec.stop()


async def subscribe(client: Any, api_key: str, receiver: Receiver, events: list[str], **fields: Any) -> dict[str, Any]:
    """Subscribe `receiver` to `events` through the API (``POST /api/v1/webhooks``) and give
    it the webhook's secret to verify deliveries with; the created webhook's JSON."""
    resp = await client.post("/api/v1/webhooks", api_key=api_key,
                             json={"url": receiver.url, "events": list(events), **fields})
    assert resp.status == 201, resp.text
    created = resp.json()
    receiver.secrets.append(created["secret"])
    return created
