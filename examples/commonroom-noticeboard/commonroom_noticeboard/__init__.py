"""commonroom-noticeboard: a noticeboard per community, the example plugin that uses every
extension point (docs/plugins.md builds it step by step). Only hook implementations live
here; everything else is in sibling modules, and everything taken from Commonroom comes
from `daemon.plugin`, its public plugin API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from commonroom_noticeboard.config import NoticeboardConfig
from commonroom_noticeboard.declarations import CAPABILITIES, EVENT_KINDS, LINKS
from daemon.plugin import WebFolders, declared, hookimpl

HERE = Path(__file__).parent

# its table references the communities', and it asks their service who is a member
cr_plugin_requires = declared(["communities"])
cr_config_section = declared(("noticeboard", NoticeboardConfig))
cr_migrations = declared(("noticeboard", HERE / "migrations"))
cr_event_kinds = declared(EVENT_KINDS)
cr_capabilities = declared(CAPABILITIES)
cr_lexicons = declared(HERE / "lexicons")   # the method ids' lexicons: com.example.noticeboard.*
cr_web_folders = declared(WebFolders(templates=str(HERE / "templates"), static=str(HERE / "static")))
cr_web_links = declared(LINKS)


@hookimpl
def cr_services(app: Any) -> dict[str, Any]:
    from commonroom_noticeboard.board import NoticeboardState
    return {"noticeboard": NoticeboardState()}   # app.extensions["noticeboard"]


@hookimpl
def cr_routes(app: Any) -> list[tuple]:
    from commonroom_noticeboard import handlers, pages
    return handlers.routes() + pages.routes()


@hookimpl
def cr_metrics(app: Any, registry: Any) -> None:
    from prometheus_client import Counter
    app.extensions["noticeboard"].posted = Counter(
        "commonroom_noticeboard_notices_posted", "Notices posted to noticeboards", registry=registry)


@hookimpl
def cr_cli_commands() -> dict[str, Any]:
    from commonroom_noticeboard.cli import COMMANDS
    return COMMANDS
