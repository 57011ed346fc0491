"""Communities, membership, admins and the audit log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon import hookimpl


@hookimpl
def cr_config_section() -> tuple[str, type]:
    from plugins.communities.config import CommunitiesConfig
    return ("communities", CommunitiesConfig)


@hookimpl
def cr_migrations() -> tuple[str, str]:
    return ("communities", str(Path(__file__).parent / "migrations"))


@hookimpl
def cr_routes(app: Any) -> list[tuple]:
    from plugins.communities.routes import routes
    return routes()


@hookimpl
def cr_services(app: Any) -> dict[str, Any]:
    # What other plugins may use (daemon/services.py): the web pages' operations.
    from plugins.communities.facade import Communities
    return {"communities": Communities(app)}


@hookimpl
def cr_startup(app: Any) -> None:
    from plugins.communities.config import check_limits
    check_limits(app.config)


@hookimpl
def cr_write_kinds(app: Any) -> list[Any]:
    from plugins.communities import roles
    from plugins.communities.reconcile import write_kinds
    return write_kinds(app) + roles.write_kinds(app)


@hookimpl
def cr_cli_commands() -> dict[str, Any]:
    from plugins.communities.reindex import cli_commands
    return cli_commands()
