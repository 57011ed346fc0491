"""The sync reconnects with a backoff slept on the application's (fake) clock: a stream that
cannot be reached is dialled again after 1 s, then 2 s, doubling (docs/sync.md)."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any, Callable

import pytest


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"sync": {"source": "firehose", "url": f"http://127.0.0.1:{closed_port()}"}}


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within 10 s: {what}")
        await asyncio.sleep(0.01)


async def test_unreachable_stream_is_dialled_again_after_a_doubling_backoff_on_the_clock(app, clock):
    sync = app.sync
    await until(lambda: sync.state == "backoff" and sync.counts["reconnects"] == 1 and clock.sleepers,
                "the first backoff")
    assert sync.health() == {"state": "backoff", "cursor": None, "lagSeconds": None}
    clock.advance(1.0)
    await until(lambda: sync.counts["reconnects"] == 2 and sync.state == "backoff" and clock.sleepers,
                "the second attempt failed and waits again")
    clock.advance(1.0)  # the second wait is 2 s
    for _ in range(20):
        await asyncio.sleep(0.01)
    assert sync.counts["reconnects"] == 2 and sync.state == "backoff"
    clock.advance(1.0)
    await until(lambda: sync.counts["reconnects"] == 3, "the third attempt, 2 s later")

