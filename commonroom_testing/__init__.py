"""Commonroom's test fixtures, as a pytest plugin for plugin authors (and for Commonroom's
own tests): a migrated SQLite file per test, a fake clock, the application and a real HTTP
server on loopback, an HTTP client, and a local PLC + PDS ("devnet") with real accounts.

Load it from your plugin's top-level ``conftest.py``::

    pytest_plugins = ["commonroom_testing"]

and install ``commonroom[test]`` (pytest, pytest-tornasync for ``async def`` tests and the
``io_loop`` fixture, hypothesis). Your plugin is loaded like in production, through its
``commonroom.plugins`` entry point once it is installed (``pip install -e .``); or return
it from an ``extra_plugins`` fixture. ``docs/plugins.md`` ("Testing a plugin") walks
through it; ``examples/commonroom-hello/tests`` is a complete example.

Fixtures, by module:

- `commonroom_testing.app`: ``app``, ``server``, ``client``, ``clock``, ``state_dir``,
  ``template_db``; override ``config_overrides`` (a dict merged into the configuration)
  and ``extra_plugins`` (plugin objects registered last) in a test module.
- `commonroom_testing.devnet`: ``devnet`` (session-scoped PLC + PDS on free ports; needs
  Node 22 and ``scripts/devnet/setup``), ``test_ca``.
- `commonroom_testing.atproto`: ``pds_config_overrides`` (point the app at the devnet),
  ``new_handle``, ``png_bytes``, ``http_log``.
- `commonroom_testing.communities`: ``people`` (real devnet accounts), ``recorder``
  (events after commit), ``communities_config``; `Api` (the API-key routes as one app sees
  them) and `devnet_module_fixtures()`.
- `commonroom_testing.webhooks`: ``webhook_receiver`` (receivers on loopback that verify
  deliveries with `standardwebhooks`); `subscribe`, `LOOPBACK_TARGETS`.
- `commonroom_testing.follower`: ``follower_app`` (a follower of the primary ``app`` on a
  copy of its database: `app_key` and your own code write on the primary, `start` starts
  the follower and its client).
- `commonroom_testing.http`: `Client`, `login_as`, `register_app`, `serve_app` (helpers,
  not fixtures).

Markers: ``pds`` (needs the devnet), ``browser``, ``slow``.
"""

from __future__ import annotations

from typing import Any

pytest_plugins = [
    "commonroom_testing.app",
    "commonroom_testing.devnet",
    "commonroom_testing.atproto",
    "commonroom_testing.communities",
    "commonroom_testing.webhooks",
    "commonroom_testing.follower",
]

MARKERS = (
    "pds: needs the local PLC + PDS devnet (started once per session)",
    "browser: drives real headless Chromium through Playwright",
    "slow: takes more than a few seconds",
)


def pytest_configure(config: Any) -> None:
    known = {line.split(":", 1)[0] for line in config.getini("markers")}
    for marker in MARKERS:
        if marker.split(":", 1)[0] not in known:
            config.addinivalue_line("markers", marker)
