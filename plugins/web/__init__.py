"""The web app: server-rendered pages for people (home, discover, community pages,
creating a community). See docs/web.md for the URL map and the decisions behind it."""

from __future__ import annotations

from typing import Any

from daemon.plugin import hookimpl


@hookimpl
def cr_plugin_requires() -> list[str]:
    # The pages are a thin layer over the services of these plugins (app.communities,
    # app.apps, daemon/runtime/services.py), and sign-out ends the OAuth grant (app.oauth). The
    # developer pages show webhooks only when that plugin is enabled (app.webhooks).
    return ["communities", "oauth", "apikeys"]


@hookimpl
def cr_services(app: Any) -> dict[str, Any]:
    from plugins.web.assets import WebPages
    return {"web": WebPages(app)}


@hookimpl
def cr_web_links() -> list[Any]:
    from plugins.web.slots import NAVIGATION
    return NAVIGATION   # the site's navigation, a slot like any plugin's


@hookimpl
def cr_routes(app: Any) -> list[tuple]:
    from plugins.web.assets import web_assets
    from plugins.web.pages import routes
    web_assets(app)  # compile every template now, the plugins' too: before any migration runs
    return routes()


@hookimpl
def cr_startup(app: Any) -> None:
    # Hash the static files and compile the templates now: a broken template fails at start-up.
    from plugins.web.assets import web_assets
    web_assets(app)


@hookimpl
def cr_render_page(handler: Any, page: str, title: str, status: int, values: dict[str, Any]) -> Any:
    # Pages other plugins ask for: the site's by name (the oauth plugin's login failure, the
    # error pages of any plugin's PageHandler), or a plugin's own template, "<plugin>/<file>".
    from plugins.web.assets import TEMPLATE_DIR, web_assets
    from plugins.web.base import render_html
    if "/" in page:
        if not web_assets(handler.app).has_template(page):
            return None
        render_html(handler, page, title=title, status=status, **values)
        return True
    if not (TEMPLATE_DIR / f"{page}.html").is_file():
        return None
    render_html(handler, f"{page}.html", title=title, status=status, **values)
    return True


@hookimpl
def cr_settings_layout(handler: Any, community_did: str) -> Any:
    # A plugin's page drawn as one of a community's settings pages (the reports queue).
    from plugins.web.admin import plugin_settings_layout
    return plugin_settings_layout(handler, community_did)


@hookimpl
def cr_not_found(handler: Any) -> Any:
    # An unknown path that a browser asks for gets the HTML "Page not found" page.
    from plugins.web.base import not_found_page
    return not_found_page(handler)
