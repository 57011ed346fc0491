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


@hookimpl
def cr_handover_state(app: Any, community_did: str) -> Any:
    # The records index (with each record's author, which the repo does not say), the
    # collection allowlist and the permissions travel with a handed-over community.
    from plugins.records import store

    async def state() -> tuple[str, Any]:
        return ("records", await store.community_state(app.db, community_did))
    return state()


@hookimpl
def cr_handover_restore_tx(app: Any, tx: Any, community_did: str, states: dict[str, Any]) -> Any:
    from plugins.records import store

    state = states.get("records")
    if not isinstance(state, dict):
        return None
    if state.get("version") != 1:
        raise ValueError(f"the bundle's records state has version {state.get('version')!r}; this service reads 1")
    return store.restore_community_state_tx(tx, community_did, state)
