"""Every route of the communities plugin."""

from __future__ import annotations


def routes() -> list[tuple]:
    from plugins.communities import api, api_moderation, roles_api, web
    return api.routes() + api_moderation.routes() + roles_api.routes() + web.routes()
