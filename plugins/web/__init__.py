"""The web app: server-rendered pages for people (home, discover, community pages,
creating a community). See docs/web.md for the URL map and the decisions behind it."""

from __future__ import annotations

from typing import Any

from daemon import hookimpl


@hookimpl
def cr_routes(app: Any) -> list[tuple]:
    from plugins.web.pages import routes
    return routes()


@hookimpl
def cr_startup(app: Any) -> None:
    # Hash the static files and compile the templates now: a broken template fails at start-up.
    from plugins.web.assets import web_assets
    web_assets(app)


@hookimpl
def cr_not_found(handler: Any) -> Any:
    # An unknown path that a browser asks for gets the HTML "Page not found" page.
    from plugins.web.base import not_found_page
    return not_found_page(handler)
