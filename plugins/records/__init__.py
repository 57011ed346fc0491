"""Community records: apps create, update, delete, list and read records in a community's
repo on behalf of its members (docs/records.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.plugin import hookimpl
from plugins.records import handlers, writes
from plugins.records.settings import RecordsConfig, check


@hookimpl
def cr_config_section() -> tuple[str, type]:
    return ("records", RecordsConfig)


@hookimpl
def cr_plugin_requires() -> list[str]:
    # Records live in communities' repos; the tables reference `communities`, and who may
    # write is the communities plugin's membership.
    return ["communities"]


@hookimpl
def cr_migrations() -> tuple[str, str]:
    return ("records", str(Path(__file__).parent / "migrations"))


@hookimpl
def cr_routes(app: Any) -> list[tuple]:
    return handlers.routes()


@hookimpl
def cr_services(app: Any) -> dict[Any, Any]:
    # for other plugins: read a record, delete one as a member (daemon.plugin.services.RecordsService)
    from daemon.plugin.services import RecordsService
    from plugins.records.service import Records
    return {RecordsService: Records(app)}


@hookimpl
def cr_startup(app: Any) -> None:
    check(app.config.plugin("records"), app.config.atproto.namespace)


@hookimpl
def cr_write_kinds(app: Any) -> list[Any]:
    return writes.write_kinds(app)


@hookimpl
def cr_event_kinds() -> list[Any]:
    from plugins.records.declarations import EVENT_KINDS
    return EVENT_KINDS
