"""The application under test: a real SQLite file per test (a copy of a template database
migrated once per session), a fake clock, the app, and a real HTTP server on loopback.

Override in a test module (or a conftest.py)::

    @pytest.fixture
    def config_overrides():
        return {"hello": {"greeting": "hi"}}     # merged into the configuration

    @pytest.fixture
    def extra_plugins():
        return (MyTestPlugin(),)                  # registered after every other plugin
"""

from __future__ import annotations

import asyncio
import copy
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import pluggy
import pytest
from tornado.testing import bind_unused_port

from commonroom_testing.http import Client, serve_app
from daemon.runtime.app import create_app, migration_components, plugin_sections
from daemon.base import FakeClock
from daemon.runtime.config import Config
from daemon.runtime.plugins import build_plugin_manager
from store.db import Database
from store.migrate import migrate

#: A fixed secret key, so nothing is generated into the state directory.
TEST_SECRET_KEY = "00" * 31 + "01"


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`base` with `override` merged in, section by section (nothing is modified)."""
    out = copy.deepcopy(base)
    for k, v in override.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def build_config(state_dir: Path, overrides: dict[str, Any] | None = None, extra_plugins: tuple = (),
                 base: dict[str, Any] | None = None) -> tuple[Config, pluggy.PluginManager]:
    """The configuration and plugin manager of a test app: `base` (default: Commonroom's
    defaults), the state directory, the test secret key and debug logging, then
    `overrides`. Plugins are loaded as in production (built-ins and entry points, minus
    ``plugins.disabled``), then `extra_plugins`."""
    raw = deep_merge(base or {}, {"storage": {"state_dir": str(state_dir)}, "secret_key": TEST_SECRET_KEY,
                                  "log_level": "debug"})
    raw = deep_merge(raw, overrides or {})
    disabled = tuple(raw.get("plugins", {}).get("disabled", []) or [])
    pm = build_plugin_manager(disabled, extra_plugins)
    config = Config.from_mapping(raw, base_dir=state_dir, plugin_sections=plugin_sections(pm),
                                 disabled_sections=frozenset(disabled))
    return config, pm


@pytest.fixture(scope="session")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with every installed plugin's migrations applied, made once."""
    state = tmp_path_factory.mktemp("template")
    config, pm = build_config(state)

    async def make() -> None:
        db = Database(config.database_path)
        await db.open()
        await migrate(db, migration_components(pm))
        await db.close()

    asyncio.run(make())
    return config.database_path


@pytest.fixture
def clock() -> FakeClock:
    """The app's clock: it moves only when the test calls ``clock.advance(seconds)``. It
    starts at the real time (whole seconds), so what carries its time outside the process
    is accepted there: webhook signatures checked by `standardwebhooks` (five minutes'
    tolerance), service-auth tokens from the devnet's PDS."""
    return FakeClock(start=float(int(time.time())))


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    """Override in a test module (or with parametrize) to change the app's config."""
    return {}


@pytest.fixture
def extra_plugins() -> tuple:
    """Override to register plugin objects after every other plugin (test plugins)."""
    return ()


@pytest.fixture
def state_dir(tmp_path: Path, template_db: Path) -> Path:
    """The app's state directory, holding a fresh copy of the template database."""
    state = tmp_path / "state"
    state.mkdir()
    shutil.copy(template_db, state / template_db.name)
    return state


@pytest.fixture
def app(io_loop: Any, state_dir: Path, clock: FakeClock, config_overrides: dict[str, Any],
        extra_plugins: tuple) -> Iterator[Any]:
    """The started application (`daemon.runtime.app.Application`), shut down after the test.

    Its periodic work (the write reconciler, the sessions janitor) runs its start-up pass
    only: it waits on the fake clock, so a test stepping the clock would otherwise race it.
    A test runs the passes it wants itself, or sets ``app.repeat_periodic = True``."""
    config, pm = build_config(state_dir, config_overrides, extra_plugins)
    application = io_loop.run_sync(lambda: create_app(config, pm, clock=clock, repeat_periodic=False))
    yield application
    io_loop.run_sync(application.shutdown)


@pytest.fixture
def server(io_loop: Any, app: Any) -> Iterator[Any]:
    """The app served on a free loopback port (``server.port``)."""
    sock, port = bind_unused_port()
    yield from serve_app(io_loop, app, sock, port)


@pytest.fixture
def client(server: Any) -> Iterator[Client]:
    """An HTTP client for the served app (`commonroom_testing.http.Client`)."""
    c = Client(f"http://127.0.0.1:{server.port}")
    yield c
    c.close()
