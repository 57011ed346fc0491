"""What the apikeys plugin offers other plugins: ``app.apps``, the interface
`daemon.runtime.services.AppsService`, registered through `cr_services`. Each method delegates to
the app rules the JSON routes use (service.py); the object also holds the plugin's cache
of valid keys (auth.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from plugins.apikeys import service
from daemon.plugin import VersionedCache

if TYPE_CHECKING:  # pragma: no cover
    from daemon.plugin import Application, Row


class Apps:
    """`daemon.runtime.services.AppsService`, bound to one application."""

    def __init__(self, app: "Application") -> None:
        self.app = app
        #: Valid keys, forgotten at any commit (auth.py).
        self.key_cache = VersionedCache(app.clock)

    def default_limit(self) -> tuple[int, float]:
        return service.default_limit(self.app)

    def app_json(self, row: "Row", default: tuple[int, float]) -> dict[str, Any]:
        return service.app_json(row, default)

    def app_fields(self, body: dict[str, Any], required: bool) -> dict[str, Any]:
        return service.app_fields(body, required)

    async def owned_app(self, owner_did: str, app_id: str) -> "Row":
        return await service.owned_app(self.app, owner_did, app_id)

    async def list_apps(self, owner_did: str, limit: int, after: Any) -> list["Row"]:
        return await service.list_apps(self.app, owner_did, limit, after)

    async def register(self, owner_did: str, *, name: str, domain: str) -> tuple["Row", str]:
        return await service.register(self.app, owner_did, name=name, domain=domain)

    async def rotate_key(self, owner_did: str, app_id: str) -> tuple["Row", str]:
        return await service.rotate_key(self.app, owner_did, app_id)

    async def deactivate(self, owner_did: str, app_id: str) -> "Row":
        return await service.deactivate(self.app, owner_did, app_id)

    async def set_rate_limit(self, owner_did: str, app_id: str, requests: int | None,
                             window: float | None) -> "Row":
        return await service.set_rate_limit(self.app, owner_did, app_id, requests, window)


def apps_of(app: "Application") -> Apps:
    """This plugin's own service object (its private parts included)."""
    return cast(Apps, app.apps)
