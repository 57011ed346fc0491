"""Every route of the communities plugin."""

from __future__ import annotations


def routes() -> list[tuple]:
    from plugins.communities import api, roles_api, web
    return api.routes() + roles_api.routes() + web.routes()
