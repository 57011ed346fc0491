"""The real daemon process and the event stream: on SIGTERM, WebSocket subscribers are
closed with 1001 and long-polls answer at once, so the daemon stops without waiting out
`server.shutdown_timeout_seconds` (docs/events.md, "Shutdown")."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import time

import websockets

from plugins.apikeys.keys import hash_key, new_app_id, new_key
from tests.test_lifecycle import Daemon


def add_app(daemon: Daemon) -> str:
    """An app with a key, written as the operator's CLI would (another process)."""
    key = new_key()
    db = sqlite3.connect(daemon.config.parent / "state" / "commonroom.sqlite3", isolation_level=None)
    try:
        db.execute("INSERT INTO apps (id, owner_did, name, domain, key_hash, created_at, updated_at) "
                   "VALUES (?, 'did:plc:owner', 'Lifecycle', 'life.example.com', ?, '2026-01-01T00:00:00Z', "
                   "'2026-01-01T00:00:00Z')", (new_app_id(), hash_key(key)))
    finally:
        db.close()
    return key


def test_sigterm_closes_subscribers_with_1001_and_answers_long_polls_at_once(tmp_path):
    daemon = Daemon(tmp_path)
    try:
        daemon.wait_healthy()
        key = add_app(daemon)

        async def scenario() -> tuple[int | None, dict, float, float]:
            base = f"127.0.0.1:{daemon.port}"
            await asyncio.sleep(1.2)  # the daemon notices the other process's write (key cache)
            from tornado.httpclient import AsyncHTTPClient
            http = AsyncHTTPClient(force_instance=True)
            first = await http.fetch(f"http://{base}/api/v1/events", headers={"X-Api-Key": key})
            cursor = json.loads(first.body)["cursor"]
            async with websockets.connect(f"ws://{base}/api/v1/events/subscribe",
                                          additional_headers={"X-Api-Key": key}, proxy=None) as ws:
                poll = asyncio.ensure_future(http.fetch(
                    f"http://{base}/api/v1/events?cursor={cursor}&wait=30", headers={"X-Api-Key": key},
                    request_timeout=60))
                await asyncio.sleep(0.5)
                sent = time.monotonic()
                daemon.proc.send_signal(signal.SIGTERM)
                answer = await poll
                answered = time.monotonic() - sent
                try:
                    await asyncio.wait_for(ws.recv(), 10)
                except websockets.ConnectionClosed:
                    pass
                closed = time.monotonic() - sent
                code = ws.close_code
            http.close()
            return code, json.loads(answer.body), answered, closed

        code, page, answered, closed = asyncio.run(scenario())
        assert code == 1001
        assert page == {"events": [], "cursor": page["cursor"]}
        assert answered < 3 and closed < 3  # not the 30 s wait, nor the 10 s drain timeout
        assert daemon.proc.wait(15) == 0
    finally:
        daemon.stop()
