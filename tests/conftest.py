"""Test fixtures. Every test gets a real SQLite file (a copy of a template database
migrated once per session), a fake clock and a real HTTP server on loopback."""

from __future__ import annotations

import asyncio
import copy
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tornado.testing import bind_unused_port

from daemon.app import create_app, migration_components, plugin_sections
from daemon.clock import FakeClock
from daemon.config import Config
from daemon.plugins import build_plugin_manager
from store.db import Database
from store.migrate import migrate
from tests.helpers import Client, login_as, serve_app  # noqa: F401  (login_as re-exported for tests)

REPO = Path(__file__).resolve().parent.parent
# The example plugin (examples/commonroom-hello) is installed for the tests only, into
# .test-plugins (scripts/setup --test): on sys.path here, its entry point is discovered.
TEST_PLUGINS = REPO / ".test-plugins"
if TEST_PLUGINS.is_dir() and str(TEST_PLUGINS) not in sys.path:
    sys.path.append(str(TEST_PLUGINS))

# Every tests/fixtures_<area>.py is a pytest plugin module with that area's fixtures.
pytest_plugins = sorted(f"tests.{p.stem}" for p in Path(__file__).parent.glob("fixtures_*.py"))
TEST_SECRET_KEY = "00" * 31 + "01"
IN_CI = os.environ.get("CI") == "true"


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in override.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def build_config(state_dir: Path, overrides: dict[str, Any] | None = None,
                 extra_plugins: tuple = ()) -> tuple[Config, Any]:
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    raw = deep_merge(raw, {"storage": {"state_dir": str(state_dir)}, "secret_key": TEST_SECRET_KEY,
                           "log_level": "debug"})
    raw = deep_merge(raw, overrides or {})
    disabled = tuple(raw.get("plugins", {}).get("disabled", []) or [])
    pm = build_plugin_manager(disabled, extra_plugins)
    config = Config.from_mapping(raw, base_dir=state_dir, plugin_sections=plugin_sections(pm),
                                 disabled_sections=frozenset(disabled))
    return config, pm


@pytest.fixture(scope="session")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with every default plugin's migrations applied, made once."""
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
    return FakeClock()


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    """Override in a test module (or with parametrize) to change the app's config."""
    return {}


@pytest.fixture
def extra_plugins() -> tuple:
    return ()


@pytest.fixture
def state_dir(tmp_path: Path, template_db: Path) -> Path:
    state = tmp_path / "state"
    state.mkdir()
    shutil.copy(template_db, state / template_db.name)
    return state


@pytest.fixture
def app(io_loop: Any, state_dir: Path, clock: FakeClock, config_overrides: dict[str, Any],
        extra_plugins: tuple) -> Any:
    config, pm = build_config(state_dir, config_overrides, extra_plugins)
    application = io_loop.run_sync(lambda: create_app(config, pm, clock=clock))
    yield application
    io_loop.run_sync(application.shutdown)


@pytest.fixture
def server(io_loop: Any, app: Any) -> Any:
    sock, port = bind_unused_port()
    yield from serve_app(io_loop, app, sock, port)


@pytest.fixture
def client(server: Any) -> Any:
    c = Client(f"http://127.0.0.1:{server.port}")
    yield c
    c.close()
