"""Fixtures for the webhook tests: HTTP receivers on loopback, a test-only plugin that
produces events without the PDS, and helpers to set up apps and communities.

`EventSource` is also loaded by a real daemon process in the crash test, through
``COMMONROOM_EXTRA_PLUGINS=tests.fixtures_webhooks:event_source``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import pytest

from commonroom_testing.webhooks import LOOPBACK_TARGETS, Received, Receiver, start_receiver  # noqa: F401  (re-exported)
from daemon import hookimpl
from daemon.runtime.events import emit_tx
from daemon.http.base import BaseHandler


# ------------------------------------------------------------------ receivers (shipped)


@pytest.fixture
def receiver(webhook_receiver: Any) -> Any:
    """The shipped `webhook_receiver` (commonroom_testing.webhooks), under the tests' old name."""
    return webhook_receiver


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
    from plugins.communities import store as communities
    async with app.db.transaction("test.community") as tx:
        await communities.insert_community_tx(
            tx, did=did, handle=did.rsplit(":", 1)[-1] + ".test", display_name="Test", description="",
            type=type, pds_url="http://127.0.0.1:1", account_kind="brought",
            creator_did="did:plc:creator", creator_app_id=creator_app_id, proof_rkey="3kproof",
            now=app.clock.iso_now(), state="active")


async def allow_app(app: Any, community_did: str, app_id: str, *, manage: bool = False) -> None:
    from plugins.communities import store as communities
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
