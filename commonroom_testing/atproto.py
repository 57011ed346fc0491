"""Fixtures and helpers for code that talks AT Protocol.

Against the devnet::

    @pytest.fixture
    def config_overrides(pds_config_overrides):
        return pds_config_overrides

    @pytest.mark.pds
    async def test_something(app, devnet, new_handle):
        account = await provision_account(app, new_handle("club"))
"""

from __future__ import annotations

import itertools
import os
import struct
import zlib
from typing import Any, Callable

import httpx
import pytest

_counter = itertools.count(1)

# The devnet (and the tests' stand-in servers) listen on loopback, which the SSRF guard
# (daemon/security/netguard.py) refuses unless allowed.
LOOPBACK_TARGETS = ("127.0.0.0/8", "::1", "localhost")


@pytest.fixture
def pds_config_overrides(devnet: Any) -> dict[str, Any]:
    """`atproto` settings that point the app at the session's devnet (PLC, PDS, handles
    resolved through the PDS, plain http allowed), with short timeouts and retries so that
    failure tests finish quickly."""
    return {"atproto": {
        "plc_url": devnet.plc_url,
        "pds_url": devnet.pds_url,
        "resolve_handles_via_pds": devnet.pds_url,
        "allow_insecure_http": True,
        "allowed_private_targets": list(LOOPBACK_TARGETS),
        "request_timeout_seconds": 5.0,
        "max_retries": 2,
        "retry_backoff_seconds": 0.05,
        "retry_after_max_seconds": 1.0,
    }}


@pytest.fixture
def new_handle() -> Callable[[str], str]:
    """``new_handle("club")`` -> a handle not used before in this session, e.g.
    ``club3a9f01c2.test`` (the devnet is shared by the whole session)."""
    def make(prefix: str = "t") -> str:
        return f"{prefix[:6]}{next(_counter)}{os.urandom(3).hex()}.test"
    return make


def make_png(width: int = 2, height: int = 2, rgb: tuple[int, int, int] = (200, 40, 90)) -> bytes:
    """A valid PNG (8-bit RGB, one colour) built with zlib and struct only."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    row = b"\x00" + bytes(rgb) * width  # filter byte 0, then the pixels
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(row * height))
            + chunk(b"IEND", b""))


@pytest.fixture
def png_bytes() -> bytes:
    return make_png()


class RequestLog:
    """Counts the outbound requests of `app.http` (hooked in by the `http_log` fixture)."""

    def __init__(self) -> None:
        self.urls: list[str] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def on_request(self, request: httpx.Request) -> None:
        self.urls.append(str(request.url))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    async def on_response(self, response: httpx.Response) -> None:
        self.in_flight -= 1

    def count(self, fragment: str) -> int:
        return sum(fragment in u for u in self.urls)

    def clear(self) -> None:
        self.urls.clear()
        self.max_in_flight = self.in_flight


@pytest.fixture
def http_log(app: Any) -> RequestLog:
    """Every request the app sends from now on (``http_log.count("createSession")``)."""
    log = RequestLog()
    client = app.http
    client.event_hooks = {"request": [*client.event_hooks["request"], log.on_request],
                          "response": [*client.event_hooks["response"], log.on_response]}
    return log
