"""Running a public instance (issue 38): the operators config.yaml names and the instance
audit log of what they did, with command-line tools for when the web is down. A built-in
plugin held to the outsider's rule: everything it takes from Commonroom comes from
`daemon.plugin` (docs/operations.md, "Running a public instance")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.plugin import WebFolders, declared, hookimpl
from plugins.instance.community_reports import EVENT_KINDS, LINKS
from plugins.instance.settings import InstanceConfig

HERE = Path(__file__).parent

cr_config_section = declared(("instance", InstanceConfig))
cr_migrations = declared(("instance", HERE / "migrations"))
cr_web_folders = declared(WebFolders(templates=str(HERE / "templates")))
cr_event_kinds = declared(EVENT_KINDS)
cr_web_links = declared(LINKS)
cr_lexicons = declared(HERE / "lexicons")   # the report route's method id: community.commonroom.instance.*


@hookimpl
def cr_routes(app: Any) -> list[tuple]:
    from plugins.instance import console, pages, reports_api
    # the console's own pages before pages.routes(), whose last route answers every other /admin path
    return reports_api.routes() + console.routes() + pages.routes()


@hookimpl
def cr_cli_commands() -> dict[str, Any]:
    from plugins.instance.operator import cli_commands
    return cli_commands()


@hookimpl
async def cr_check_action(app: Any, action: str, actor_did: str | None, community_did: str | None,
                          app_id: str | None) -> None:
    from plugins.instance.policy import check_action
    await check_action(app, action, actor_did, community_did, app_id)


@hookimpl
async def cr_hold_action(app: Any, action: str, actor_did: str | None, app_id: str | None,
                         data: dict[str, Any]) -> dict[str, Any] | None:
    if action != "community.create":
        return None
    from plugins.instance.requests import hold
    return await hold(app, actor_did, app_id, data)


@hookimpl
async def cr_page_notes(app: Any, page: str, person_did: str) -> list[dict[str, Any]]:
    from plugins.instance.requests import page_notes
    return await page_notes(app, page, person_did)


@hookimpl
async def cr_community_notices(app: Any, community_did: str, viewer_did: str | None,
                               admin: bool) -> list[dict[str, str]]:
    from plugins.instance.policy import notices
    return await notices(app, community_did, admin)


@hookimpl
async def cr_withheld_communities(app: Any) -> list[str]:
    from plugins.instance.policy import withheld
    return await withheld(app)


@hookimpl
def cr_startup(app: Any) -> None:
    config = app.config.plugin("instance")
    # a follower's copy is pruned by its primary; 0 keeps the audit log for good
    if not app.read_only and config.audit_retention_days:
        from plugins.instance.audit import prune
        app.spawn_periodic("instance.audit_retention", config.prune_interval_seconds, lambda first: prune(app))
