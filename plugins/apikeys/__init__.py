"""API keys: apps, their keys, and the X-Api-Key authentication hook."""

from __future__ import annotations

from typing import Any

from daemon.plugin import hookimpl

from plugins.apikeys import handlers
from plugins.apikeys.keys import cr_authenticate  # noqa: F401 (the X-Api-Key hook, beside the check)
from plugins.apikeys.service import Apps
from plugins.apikeys.operator import cli_commands
from plugins.apikeys.settings import ApiKeysConfig


@hookimpl
def cr_config_section() -> tuple[str, type]:
    return ("apikeys", ApiKeysConfig)


@hookimpl
def cr_routes(app: Any) -> list[tuple]:
    return handlers.routes()


@hookimpl
def cr_services(app: Any) -> dict[str, Any]:
    # The app rules (register, rotate, deactivate, rate limit), shared with the developer
    # pages (daemon/runtime/services.py), and the plugin's key cache.
    return {"apps": Apps(app)}


@hookimpl
def cr_cli_commands() -> dict[str, Any]:
    return cli_commands()
