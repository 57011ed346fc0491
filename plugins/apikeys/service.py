"""The apps service (``app.apps``, the interface `daemon.plugin.services.AppsService`, registered
through `cr_services`): the app rules, in one place for the JSON routes (/api/v1/apps) and
the developer pages: at most `apikeys.max_apps_per_owner` active apps per owner, one active app per
domain, keys shown once (only their hash is kept), an owner may lower an app's rate limit
but never raise it above the service default. Only the owner sees an app: for anyone else
it does not exist (404).

The object also holds the plugin's cache of valid keys (keys.py). Other plugins (the web
pages) call the service's methods and nothing else of this package."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from daemon.plugin import ApiError, Row, validate
from daemon.plugin.storage import AppsTable, VersionedCache
from plugins.apikeys.keys import hash_key, new_app_id, new_key

if TYPE_CHECKING:
    from daemon.plugin import Application


def app_json(row: Row, default: tuple[int, float]) -> dict[str, Any]:
    custom = row["rate_limit_requests"] is not None
    requests = row["rate_limit_requests"] if custom else default[0]
    window = row["rate_limit_window_seconds"] if custom else default[1]
    return {
        "appId": row["id"],
        "name": row["name"],
        "domain": row["domain"],
        "active": bool(row["active"]),
        "rateLimit": {"maxRequests": int(requests), "windowMs": int(window * 1000), "custom": custom},
        "createdAt": row["created_at"],
        "updatedAt": row["updated_at"],
        "keyRotatedAt": row["key_rotated_at"],
        "deactivatedAt": row["deactivated_at"],
    }


def app_fields(body: dict[str, Any], required: bool) -> dict[str, Any]:
    """`name` (3-100 characters) and `domain` (a hostname) from a request body or form;
    a 400 naming the field otherwise."""
    out: dict[str, Any] = {}
    name = validate.string(body, "name", required=required, min_len=3, max_len=100, name=True)
    if name is not None:
        out["name"] = name
    domain = validate.string(body, "domain", required=required, min_len=1, max_len=253)
    if domain is not None:
        out["domain"] = validate.hostname(domain)
    return out


class Apps:
    """`daemon.plugin.services.AppsService`, bound to one application; the routes and the developer
    pages call it (`apps_of(app)` within this plugin)."""

    def __init__(self, app: "Application") -> None:
        self.app = app
        #: Valid keys, forgotten at any commit (keys.py).
        self.key_cache = VersionedCache(app.clock)

    def default_limit(self) -> tuple[int, float]:
        """The service's API rate limit: (requests, window in seconds)."""
        api = self.app.config.rate_limits.api
        return (api.requests, api.window_seconds)

    app_json = staticmethod(app_json)
    app_fields = staticmethod(app_fields)

    async def owned_app(self, owner_did: str, app_id: str) -> Row:
        row = await AppsTable.get(self.app.db, app_id)
        if row is None or row["owner_did"] != owner_did:
            raise ApiError(404, "app_not_found", "No app with this id among yours.")
        return row

    async def list_apps(self, owner_did: str, limit: int,
                        after: tuple[Any, ...] | None) -> list[Row]:
        """The owner's apps, oldest first; `limit` rows after the keyset `after`."""
        return await AppsTable.list_of_owner(self.app.db, owner_did, limit, after)

    async def register(self, owner_did: str, *, name: str, domain: str) -> tuple[Row, str]:
        """A new active app and its API key (the only time the key exists in clear)."""
        key, app_id, now = new_key(), new_app_id(), self.app.clock.iso_now()
        most = self.app.config.plugin("apikeys").max_apps_per_owner
        async with self.app.db.transaction("apps.register") as tx:
            if await AppsTable.count_active_tx(tx, owner_did) >= most:
                raise ApiError(409, "too_many_apps",
                               f"You have {most} active apps, the most allowed; deactivate one first.")
            if await AppsTable.domain_taken_tx(tx, owner_did, domain):
                raise ApiError(409, "domain_taken", "You already have an active app for this domain.")
            await AppsTable.insert_tx(tx, app_id=app_id, owner_did=owner_did, name=name, domain=domain,
                                           key_hash=hash_key(key), now=now)
            row = await AppsTable.get(tx, app_id)
        return row, key

    async def update(self, owner_did: str, app_id: str, **fields: Any) -> Row:
        """Change `name` and/or `domain` of an active app."""
        await self.owned_app(owner_did, app_id)
        async with self.app.db.transaction("apps.update") as tx:
            row = await AppsTable.get(tx, app_id)
            if not row["active"]:
                raise ApiError(409, "app_deactivated", "A deactivated app cannot be changed.")
            if "domain" in fields and await AppsTable.domain_taken_tx(
                    tx, owner_did, fields["domain"], except_id=app_id):
                raise ApiError(409, "domain_taken", "You already have an active app for this domain.")
            await AppsTable.update_tx(tx, app_id, self.app.clock.iso_now(), **fields)
            return await AppsTable.get(tx, app_id)

    async def deactivate(self, owner_did: str, app_id: str) -> Row:
        """Deactivate an app for good: its key stops working at once."""
        await self.owned_app(owner_did, app_id)
        async with self.app.db.transaction("apps.deactivate") as tx:
            await AppsTable.deactivate_tx(tx, app_id, self.app.clock.iso_now())
            return await AppsTable.get(tx, app_id)

    async def rotate_key(self, owner_did: str, app_id: str) -> tuple[Row, str]:
        """A new key for an active app; the old one is refused from now on."""
        await self.owned_app(owner_did, app_id)
        key = new_key()
        async with self.app.db.transaction("apps.rotate_key") as tx:
            row = await AppsTable.get(tx, app_id)
            if not row["active"]:
                raise ApiError(409, "app_deactivated", "A deactivated app has no key to rotate.")
            await AppsTable.set_key_hash_tx(tx, app_id, hash_key(key), self.app.clock.iso_now())
            row = await AppsTable.get(tx, app_id)
        return row, key

    def check_rate_limit(self, requests: int, window: float) -> None:
        """An owner may lower the app's limit (to protect their own quota), never raise it
        above the service default: raising is the operator's (`commonroom app-rate-limit`)."""
        default_requests, default_window = self.default_limit()
        if requests > default_requests or requests / window > default_requests / default_window:
            raise ApiError(403, "limit_above_default",
                           f"An app's own limit can only be lower than the service's "
                           f"({default_requests} per {default_window:g} s); ask the operator "
                           "to raise it.")

    async def set_rate_limit(self, owner_did: str, app_id: str,
                             requests: int | None, window: float | None) -> Row:
        """Set the app's own limit (`requests` per `window` seconds, checked by
        `check_rate_limit`), or with both None go back to the service default."""
        await self.owned_app(owner_did, app_id)
        if requests is not None and window is not None:
            self.check_rate_limit(requests, window)
        else:
            requests, window = None, None
        async with self.app.db.transaction("apps.rate_limit") as tx:
            await AppsTable.update_tx(tx, app_id, self.app.clock.iso_now(),
                                           rate_limit_requests=requests, rate_limit_window_seconds=window)
            return await AppsTable.get(tx, app_id)

    # ---------------------------------------------------------------- the operator's

    async def all_apps(self) -> list[Row]:
        """Every app, whoever owns it, oldest first (the operators' console and CLI)."""
        return await AppsTable.all(self.app.db)

    async def operator_deactivate(self, app_id: str) -> Row:
        """Deactivate any app (an operator): its key is refused from now on."""
        async with self.app.db.transaction("apps.operator_deactivate") as tx:
            if await AppsTable.get(tx, app_id) is None:
                raise ApiError(404, "app_not_found", f"No app {app_id[:100]}.")
            await AppsTable.deactivate_tx(tx, app_id, self.app.clock.iso_now())
            return await AppsTable.get(tx, app_id)

    async def operator_rate_limit(self, app_id: str, requests: int | None, window: float | None) -> Row:
        """Set any app's limit, also above the default (an operator); None: the default."""
        if requests is not None and (requests < 1 or window is None or window <= 0):
            raise ApiError(400, "invalid_request", "The limit needs at least 1 request in a window of more "
                                                   "than 0 seconds.")
        if requests is None:
            window = None
        async with self.app.db.transaction("apps.operator_rate_limit") as tx:
            if await AppsTable.get(tx, app_id) is None:
                raise ApiError(404, "app_not_found", f"No app {app_id[:100]}.")
            await AppsTable.update_tx(tx, app_id, self.app.clock.iso_now(), rate_limit_requests=requests,
                                      rate_limit_window_seconds=window)
            return await AppsTable.get(tx, app_id)


def apps_of(app: "Application") -> Apps:
    """This plugin's own service object (its private parts included)."""
    return cast(Apps, app.apps)
