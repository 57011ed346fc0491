"""The web app: server-rendered pages for people (home, discover, community pages,
creating a community). See docs/web.md for the URL map and the decisions behind it."""

from __future__ import annotations

from typing import Any

from daemon import hookimpl


@hookimpl
def cr_plugin_requires() -> list[str]:
    # The pages are a thin layer over the communities service (its public modules, see
    # PUBLIC_MODULES there), and sign-out ends the OAuth grant.
    return ["communities", "oauth"]


@hookimpl
def cr_routes(app: Any) -> list[tuple]:
    from plugins.web.pages import routes
    return routes()


@hookimpl
def cr_startup(app: Any) -> None:
    # Hash the static files and compile the templates now: a broken template fails at start-up.
    from plugins.web.assets import web_assets
    web_assets(app)
