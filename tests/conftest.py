"""Test fixtures. Every test gets a real SQLite file (a copy of a template database
migrated once per session), a fake clock and a real HTTP server on loopback.

The fixtures an outside plugin's tests can use too ship with Commonroom as the pytest
plugin `commonroom_testing` (app, client, devnet, people, ...); the tests/fixtures_*.py
modules add what only Commonroom's own tests need, and keep the names tests import."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

# Imported below before pytest loads it as a plugin: rewrite its asserts all the same.
pytest.register_assert_rewrite("commonroom_testing")

from commonroom_testing import app as _app  # noqa: E402
from commonroom_testing.app import TEST_SECRET_KEY, deep_merge  # noqa: E402,F401  (re-exported for tests)
from daemon.runtime.config import Config  # noqa: E402
from tests.helpers import Client, login_as, serve_app  # noqa: E402,F401  (login_as re-exported for tests)

REPO = Path(__file__).resolve().parent.parent
# The example plugins (examples/commonroom-hello, examples/commonroom-noticeboard) are
# installed for the tests only, into .test-plugins (scripts/setup --test): on sys.path
# here, their entry points are discovered.
TEST_PLUGINS = REPO / ".test-plugins"
if TEST_PLUGINS.is_dir() and str(TEST_PLUGINS) not in sys.path:
    sys.path.append(str(TEST_PLUGINS))

# The shipped fixtures, then every tests/fixtures_<area>.py: a pytest plugin module with
# that area's fixtures.
pytest_plugins = ["commonroom_testing",
                  *sorted(f"tests.{p.stem}" for p in Path(__file__).parent.glob("fixtures_*.py"))]
IN_CI = os.environ.get("CI") == "true"


def build_config(state_dir: Path, overrides: dict[str, Any] | None = None,
                 extra_plugins: tuple = ()) -> tuple[Config, Any]:
    """`commonroom_testing.app.build_config` on top of the repository's config.yaml."""
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    return _app.build_config(state_dir, overrides, extra_plugins, base=raw)


@pytest.fixture(scope="session")
def oauth_client_pem() -> bytes:
    from plugins.oauth.keys import generate_pem
    return generate_pem()


@pytest.fixture
def state_dir(state_dir: Path, oauth_client_pem: bytes) -> Path:
    """Every test's app signs as the same OAuth client (the key a service without
    `oauth.signing_keys` generates into its state directory, written there first). A test
    app's client_id is its https address, port included, and the devnet's PDS caches the
    JWKS of a client_id: a later test served on a port an earlier one used would otherwise
    sign with a key that cached JWKS does not hold (`invalid_client`)."""
    from plugins.oauth.keys import GENERATED_KEY_FILE
    key = state_dir / GENERATED_KEY_FILE
    if not key.exists():
        key.write_bytes(oauth_client_pem)
        key.chmod(0o600)
    return state_dir
