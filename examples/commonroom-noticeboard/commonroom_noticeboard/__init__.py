"""commonroom-noticeboard: a noticeboard per community, the example plugin that uses every
extension point (docs/plugins.md builds it step by step). Only hook implementations live
here; everything else is in sibling modules, and everything taken from Commonroom comes
from `daemon.plugin`, its public plugin API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon.plugin import Capability, EventKind, Link, WebFolders, hookimpl

HERE = Path(__file__).parent


@hookimpl
def cr_plugin_requires() -> list[str]:
    # its table references the communities', and it asks their service who is a member
    return ["communities"]


@hookimpl
def cr_config_section() -> tuple[str, type]:
    from commonroom_noticeboard.config import NoticeboardConfig
    return ("noticeboard", NoticeboardConfig)


@hookimpl
def cr_migrations() -> tuple[str, str]:
    return ("noticeboard", str(HERE / "migrations"))


@hookimpl
def cr_event_kinds() -> list[EventKind]:
    from commonroom_noticeboard.declarations import EVENT_KINDS
    return EVENT_KINDS


@hookimpl
def cr_capabilities() -> list[Capability]:
    from commonroom_noticeboard.declarations import CAPABILITIES
    return CAPABILITIES


@hookimpl
def cr_lexicons() -> str:
    return str(HERE / "lexicons")   # the method ids' lexicons: com.example.noticeboard.*


@hookimpl
def cr_web_folders() -> WebFolders:
    return WebFolders(templates=str(HERE / "templates"), static=str(HERE / "static"))


@hookimpl
def cr_web_links() -> list[Link]:
    from commonroom_noticeboard.declarations import LINKS
    return LINKS


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
