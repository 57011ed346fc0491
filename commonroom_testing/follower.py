"""A follower beside the primary under test (`server.role: follower`, docs/scaling.md): the
``follower_app`` fixture. The ``app`` fixture is the primary; write what the follower should
find through the primary's own code (its API, its services, your plugin's functions), then
start the follower on a copy of the primary's database, as Litestream would hand it over::

    async def test_no_write_on_a_follower(app, client, follower_app):
        key = await follower_app.app_key()                  # registered on the primary
        ...                                                 # rows, through the primary
        follower = await follower_app.start()               # a copy, served on loopback
        resp = await follower.client.post("/api/v1/...", api_key=key["apiKey"], json={...})
        assert resp.status == 307                           # the primary's job

The follower is built from the same plugins and configuration as the primary (the module's
``config_overrides`` and ``extra_plugins``, less the ``webhooks`` section, whose delivery
is the primary's), in follower mode, on the primary's ``clock``.
Its database is read-only: a write there raises, so a route or a background task that
writes on a follower fails the test.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest
from tornado.testing import bind_unused_port

from commonroom_testing.app import build_config, deep_merge
from commonroom_testing.http import Client, login_as, register_app, serve_app

#: Sections of the primary's configuration a follower leaves out (their work is the primary's).
PRIMARY_ONLY_SECTIONS = frozenset({"webhooks"})

#: Where a follower sends writes (307): nothing listens there, the tests read the Location.
PRIMARY_URL = "https://primary.example.com"


@dataclass
class Follower:
    """A started follower: its application, its server and a client for it."""

    app: Any
    client: Client
    port: int


@dataclass
class FollowerOf:
    """The ``follower_app`` fixture: a follower of the primary ``app`` (started by `start`),
    and helpers that write on the primary through its own code."""

    io_loop: Any
    primary: Any
    primary_client: Client
    root: Path
    overrides: dict[str, Any]
    plugins: tuple
    clock: Any
    followers: list[tuple[Follower, Any]] = field(default_factory=list)

    async def app_key(self, owner: str = "did:plc:appowner", domain: str | None = None,
                      name: str = "Test app") -> dict[str, Any]:
        """Register an app on the primary (its owner signed in, `POST /api/v1/apps/register`):
        ``{"appId", "apiKey", ...}``; the key works on the follower once it starts."""
        session = await login_as(self.primary, owner)
        return await register_app(self.primary_client, session, name=name,
                                  domain=domain or f"app{os.urandom(3).hex()}.example.com")

    async def start(self, overrides: dict[str, Any] | None = None) -> Follower:
        """A follower on a copy of the primary's database as it is now (SQLite's backup,
        consistent with what has committed), started and served on loopback. `overrides`:
        more configuration for the follower only."""
        state = self.root / f"follower{len(self.followers)}"
        state.mkdir(parents=True)
        copy = state / "commonroom.sqlite3"
        source = sqlite3.connect(self.primary.config.database_path)
        target = sqlite3.connect(copy)
        try:
            source.backup(target)
        finally:
            target.close()
            source.close()
        role = {"server": {"role": "follower"}, "storage": {"database": "primary-only.sqlite3"},
                "follower": {"replica": copy.name, "primary_url": PRIMARY_URL},
                "replication": {"url": (state / "replica").as_uri()}}
        # a follower refuses the sections of work only the primary does (webhook delivery)
        shared = {k: v for k, v in self.overrides.items() if k not in PRIMARY_ONLY_SECTIONS}
        config, pm = build_config(state, deep_merge(deep_merge(shared, role), overrides or {}), self.plugins)
        from daemon.runtime.app import create_app
        app = await create_app(config, pm, clock=self.clock, repeat_periodic=False)
        sock, port = bind_unused_port()
        served = serve_app(self.io_loop, app, sock, port)
        next(served)
        follower = Follower(app, Client(f"http://127.0.0.1:{port}"), port)
        self.followers.append((follower, served))
        return follower

    def close(self) -> None:
        for follower, served in self.followers:
            follower.client.close()
            for _ in served:  # the server's teardown
                pass
            self.io_loop.run_sync(follower.app.shutdown)


@pytest.fixture
def follower_app(io_loop: Any, app: Any, client: Client, tmp_path: Path, clock: Any,
                 config_overrides: dict[str, Any], extra_plugins: tuple) -> Iterator[FollowerOf]:
    """A follower of the primary ``app``: `FollowerOf.app_key` and your own code write on the
    primary, `FollowerOf.start` starts a follower on a copy of its database."""
    made = FollowerOf(io_loop, app, client, tmp_path / "followers", config_overrides, extra_plugins, clock)
    yield made
    made.close()
    shutil.rmtree(made.root, ignore_errors=True)
