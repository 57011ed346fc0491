"""Communities, membership, admins and the audit log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.plugin import hookimpl


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
    # What other plugins may use (daemon/runtime/services.py), the web pages' reads and
    # commands too (public.py).
    from plugins.communities.public import Communities
    return {"communities": Communities(app)}


@hookimpl
def cr_startup(app: Any) -> None:
    from plugins.communities.config import check_limits
    check_limits(app.config)
    if not app.read_only:
        from plugins.communities.move import resume_all
        # moves a crash or a failing PDS interrupted: at start, then every minute
        app.spawn_periodic("communities.moves", 60.0, lambda first: resume_all(app, first))
    if not app.read_only and app.config.plugin("communities").denied_audit_retention_days:
        from plugins.communities.retention import DeniedAuditPruner
        pruner = DeniedAuditPruner(app)
        app.spawn_periodic("communities.audit_prune", 3600.0, pruner.periodic)


@hookimpl
def cr_write_kinds(app: Any) -> list[Any]:
    from plugins.communities import reconcile, roles, sync
    return reconcile.write_kinds(app) + roles.write_kinds(app) + sync.write_kinds(app)


@hookimpl
def cr_sync_interest(app: Any) -> Any:
    from plugins.communities.sync import interest
    return interest(app)


@hookimpl
def cr_sync_events_tx(app: Any, tx: Any, events: list[Any]) -> Any:
    from plugins.communities.sync import apply_tx
    return apply_tx(app, tx, events)


@hookimpl
def cr_sync_events(app: Any, events: list[Any]) -> Any:
    from plugins.communities.sync import run
    return run(app)


@hookimpl
def cr_cli_commands() -> dict[str, Any]:
    from plugins.communities.reindex import cli_commands
    return cli_commands()


@hookimpl
def cr_event_kinds() -> list[Any]:
    from plugins.communities.declarations import EVENT_KINDS
    return EVENT_KINDS


@hookimpl
def cr_capabilities() -> list[Any]:
    from plugins.communities.declarations import CAPABILITIES
    return CAPABILITIES
