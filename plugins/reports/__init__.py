"""Reports and a moderation queue (issue 24, item 4): members report a member or a record
of their community; holders of ``reports.review`` work through the queue and resolve
reports with the platform's moderation commands. A built-in plugin held to the outsider's
rule: everything it takes from Commonroom comes from `daemon.plugin` (docs/communities.md,
"Reports")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.plugin import Capability, EventKind, Link, WebFolders, hookimpl

HERE = Path(__file__).parent


@hookimpl
def cr_config_section() -> tuple[str, type]:
    from plugins.reports.settings import ReportsConfig
    return ("reports", ReportsConfig)


@hookimpl
def cr_plugin_requires() -> list[str]:
    # its table references the communities'; members and bans are theirs, records the records'
    return ["communities", "records"]


@hookimpl
def cr_migrations() -> tuple[str, str]:
    return ("reports", str(HERE / "migrations"))


@hookimpl
def cr_event_kinds() -> list[EventKind]:
    from plugins.reports.declarations import EVENT_KINDS
    return EVENT_KINDS


@hookimpl
def cr_capabilities() -> list[Capability]:
    from plugins.reports.declarations import CAPABILITIES
    return CAPABILITIES


@hookimpl
def cr_lexicons() -> str:
    return str(HERE / "lexicons")   # the method ids' lexicons: community.commonroom.reports.*


@hookimpl
def cr_web_folders() -> WebFolders:
    return WebFolders(templates=str(HERE / "templates"))


@hookimpl
def cr_web_links() -> list[Link]:
    from plugins.reports.declarations import LINKS
    return LINKS


@hookimpl
def cr_routes(app: Any) -> list[tuple]:
    from plugins.reports import handlers, pages
    return handlers.routes() + pages.routes()


@hookimpl
def cr_startup(app: Any) -> None:
    config = app.config.plugin("reports")
    # a follower's copy is pruned by its primary; 0 keeps settled reports for good
    if not app.read_only and config.settled_retention_days:
        from plugins.reports.retention import prune_settled
        app.spawn_periodic("reports.retention", config.prune_interval_seconds, lambda first: prune_settled(app))
