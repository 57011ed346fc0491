"""API keys: apps, their keys, and the X-Api-Key authentication hook."""

from __future__ import annotations

from typing import Any

from daemon import hookimpl
from plugins.apikeys import handlers
from plugins.apikeys.auth import authenticate_api_key


@hookimpl(tryfirst=True)
def cr_authenticate(handler: Any) -> Any:
    key = handler.request.headers.get("X-Api-Key")
    if key is None:
        return None
    return authenticate_api_key(handler.app, key)


@hookimpl
def cr_routes(app: Any) -> list[tuple]:
    return handlers.routes()
