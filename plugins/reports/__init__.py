"""Reports and a moderation queue (issue 24, item 4): members report a member or a record
of their community; holders of ``reports.review`` work through the queue and resolve
reports with the platform's moderation commands. A built-in plugin held to the outsider's
rule: everything it takes from Commonroom comes from `daemon.plugin` (docs/communities.md,
"Reports")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.plugin import WebFolders, declared, hookimpl
from plugins.reports.declarations import CAPABILITIES, EVENT_KINDS, LINKS
from plugins.reports.settings import ReportsConfig

HERE = Path(__file__).parent

cr_config_section = declared(("reports", ReportsConfig))
# its table references the communities'; members and bans are theirs, records the records'
cr_plugin_requires = declared(["communities", "records"])
cr_migrations = declared(("reports", HERE / "migrations"))
cr_event_kinds = declared(EVENT_KINDS)
cr_capabilities = declared(CAPABILITIES)
cr_lexicons = declared(HERE / "lexicons")   # the method ids' lexicons: community.commonroom.reports.*
cr_web_folders = declared(WebFolders(templates=str(HERE / "templates")))
cr_web_links = declared(LINKS)


@hookimpl
def cr_routes(app: Any) -> list[tuple]:
    from plugins.reports import handlers, pages
    return handlers.routes() + pages.routes()


@hookimpl
def cr_handover_state(app: Any, community_did: str) -> Any:
    # Open reports travel with a handed-over community, for its moderators on the new
    # instance; settled ones stay here (their decisions are in the audit log, which travels).
    from plugins.reports import store

    async def state() -> tuple[str, Any]:
        return ("reports", {"version": 1, "open": await store.open_state(app.db, community_did)})
    return state()


@hookimpl
def cr_handover_restore_tx(app: Any, tx: Any, community_did: str, states: dict[str, Any]) -> Any:
    from plugins.reports import store

    state = states.get("reports")
    if not isinstance(state, dict):
        return None
    if state.get("version") != 1 or not isinstance(state.get("open"), list):
        raise ValueError(f"the bundle's reports state has version {state.get('version')!r}; this service reads 1")
    return store.restore_open_tx(tx, community_did, state["open"])


@hookimpl
def cr_startup(app: Any) -> None:
    config = app.config.plugin("reports")
    # a follower's copy is pruned by its primary; 0 keeps settled reports for good
    if not app.read_only and config.settled_retention_days:
        from plugins.reports.retention import prune_settled
        app.spawn_periodic("reports.retention", config.prune_interval_seconds, lambda first: prune_settled(app))
