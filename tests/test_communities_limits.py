"""Upload limits that never reach a PDS: the banner reuse download cap and timeout, and
the plugin's upload limit checked against the server's at start-up."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import httpx
import pytest

from daemon.runtime.app import create_app
from daemon.runtime.config import ConfigError
from tests.conftest import build_config
from tests.fixtures_communities import seed_community
from tests.helpers import login_as

ADMIN = "did:plc:seedadmin"
LIMIT = 64 * 1024


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"communities": {"max_upload_bytes": LIMIT},
            "rate_limits": {"api": {"requests": 100000, "window_seconds": 60}}}


def fake_banner(app: Any, monkeypatch: Any, body: Any) -> dict[str, int]:
    """Point the session user's profile banner at a mock server streaming `body` (an async
    generator function taking the byte counter); returns the counter of bytes sent."""
    import daemon.plugin.atproto as api  # where the plugin looks it up

    async def profile(app_: Any, did: str) -> dict[str, Any]:
        return {"banner": "https://cdn.example.com/banner.jpg"}

    monkeypatch.setattr(api, "read_user_profile", profile)
    sent = {"bytes": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body(sent))

    app._http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return sent


async def test_banner_reuse_stops_reading_past_the_upload_limit(app, client, monkeypatch):
    did = await seed_community(app, ADMIN)
    session = await login_as(app, ADMIN, "admin.test")

    async def huge(sent: dict[str, int]) -> Any:
        for _ in range(20 * 1024 * 1024 // 16384):  # a 20 MB "banner"
            sent["bytes"] += 16384
            yield b"\xff" * 16384

    sent = fake_banner(app, monkeypatch, huge)
    resp = await client.post(f"/communities/{did}/banner", json={"fromProfile": True}, session=session)
    assert resp.status == 413, resp.text
    assert resp.json()["error"] == "payload_too_large"
    assert str(LIMIT) in resp.json()["message"]
    # the download was abandoned near the limit, not read to the end
    assert sent["bytes"] <= LIMIT + 4 * 16384


async def test_banner_reuse_from_a_stalling_server_is_a_timely_502(app, client, monkeypatch):
    did = await seed_community(app, ADMIN)
    session = await login_as(app, ADMIN, "admin.test")

    async def stalls(sent: dict[str, int]) -> Any:
        yield b"\x89PNG"
        await asyncio.sleep(30)
        yield b"never"

    fake_banner(app, monkeypatch, stalls)
    section = app.config.plugin("communities")
    monkeypatch.setitem(app.config.plugin_sections, "communities",
                        dataclasses.replace(section, banner_fetch_timeout_seconds=0.5))
    started = asyncio.get_running_loop().time()
    resp = await client.post(f"/communities/{did}/banner", json={"fromProfile": True}, session=session)
    assert resp.status == 502, resp.text
    assert resp.json()["error"] == "pds_error"
    assert asyncio.get_running_loop().time() - started < 5


async def test_plugin_upload_limit_above_the_server_limit_is_refused_at_start_up(state_dir, clock):
    config, pm = build_config(state_dir, {"server": {"max_upload_bytes": 1024 * 1024},
                                          "communities": {"max_upload_bytes": 2 * 1024 * 1024}})
    try:
        started = await create_app(config, pm, clock=clock)
    except ConfigError as exc:
        assert exc.path == "communities.max_upload_bytes"
        assert "server.max_upload_bytes" in str(exc)
    else:
        await started.shutdown()
        pytest.fail("the service started with an upload limit its HTTP server cannot carry")


async def test_plugin_upload_limit_within_the_server_limit_starts(state_dir, clock):
    config, pm = build_config(state_dir, {"server": {"max_upload_bytes": 2 * 1024 * 1024},
                                          "communities": {"max_upload_bytes": 2 * 1024 * 1024}})
    started = await create_app(config, pm, clock=clock)
    await started.shutdown()
