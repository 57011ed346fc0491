"""Routes under /api/v1/apps: register, list, get, update, deactivate, rotate, verify,
and the app's custom rate limit. Only the owner (the session's DID) sees an app; for
anyone else it does not exist (404)."""

from __future__ import annotations

from typing import Any

from daemon import validate
from daemon.http import ApiError, BaseHandler, encode_cursor
from daemon.openapi import BOOLEAN, DATETIME, DATETIME_OR_NULL, INTEGER, STRING, obj, operation, page
from plugins.apikeys.keys import hash_key, new_app_id, new_key
from store import apps as apps_store
from store.db import Row

APP_ID = r"(app_[0-9a-f]{16})"


def app_json(row: Row, default_limit: tuple[int, float]) -> dict[str, Any]:
    custom = row["rate_limit_requests"] is not None
    requests = row["rate_limit_requests"] if custom else default_limit[0]
    window = row["rate_limit_window_seconds"] if custom else default_limit[1]
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


RATE_LIMIT = obj({"maxRequests": INTEGER, "windowMs": INTEGER, "custom": BOOLEAN},
                 ["maxRequests", "windowMs", "custom"])
APP = obj({"appId": STRING, "name": STRING, "domain": STRING, "active": BOOLEAN, "rateLimit": RATE_LIMIT,
           "createdAt": DATETIME, "updatedAt": DATETIME, "keyRotatedAt": DATETIME_OR_NULL,
           "deactivatedAt": DATETIME_OR_NULL}, ["appId", "name", "domain", "active", "rateLimit"])
APP_WITH_KEY = obj({**APP["properties"], "apiKey": {"type": "string", "description": "shown only once"}},
                   [*APP["required"], "apiKey"])
NAME = {"type": "string", "minLength": 3, "maxLength": 100}
DOMAIN = {"type": "string", "minLength": 1, "maxLength": 253, "description": "a host name"}


class AppsBase(BaseHandler):
    auth = "session"

    @property
    def default_limit(self) -> tuple[int, float]:
        api = self.app.config.rate_limits.api
        return (api.requests, api.window_seconds)

    async def owned_app(self, app_id: str) -> Row:
        row = await apps_store.get_app(self.app.db, app_id)
        if row is None or row["owner_did"] != self.principal.did:
            raise ApiError(404, "app_not_found", "No app with this id among yours.")
        return row

    def name_and_domain(self, body: dict[str, Any], required: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        name = validate.string(body, "name", required=required, min_len=3, max_len=100)
        if name is not None:
            out["name"] = name
        domain = validate.string(body, "domain", required=required, min_len=1, max_len=253)
        if domain is not None:
            out["domain"] = validate.hostname(domain)
        return out


class RegisterHandler(AppsBase):
    @operation("Register an app: its API key is shown once", body=obj({"name": NAME, "domain": DOMAIN},
               ["name", "domain"]), responses={201: APP_WITH_KEY}, errors={409: "domain_taken, too_many_apps"})
    async def post(self) -> None:
        fields = self.name_and_domain(self.json_body(), required=True)
        key, app_id, now = new_key(), new_app_id(), self.app.clock.iso_now()
        most = self.app.config.plugin("apikeys").max_apps_per_owner
        async with self.app.db.transaction("apps.register") as tx:
            if await apps_store.count_active_tx(tx, self.principal.did) >= most:
                raise ApiError(409, "too_many_apps",
                               f"You have {most} active apps, the most allowed; deactivate one first.")
            if await apps_store.active_domain_taken_tx(tx, self.principal.did, fields["domain"]):
                raise ApiError(409, "domain_taken", "You already have an active app for this domain.")
            await apps_store.insert_app_tx(tx, app_id=app_id, owner_did=self.principal.did,
                                           key_hash=hash_key(key), now=now, **fields)
            row = await apps_store.get_app_tx(tx, app_id)
        self.send_json({**app_json(row, self.default_limit), "apiKey": key}, 201)


class ListHandler(AppsBase):
    @operation("Your apps", paged=True, responses={200: page("apps", APP)})
    async def get(self) -> None:
        limit, after = self.page_params(2, "ss")
        rows = await apps_store.list_apps(self.app.db, self.principal.did, limit + 1,
                                          tuple(after) if after else None)
        out: dict[str, Any] = {"apps": [app_json(r, self.default_limit) for r in rows[:limit]]}
        if len(rows) > limit:
            last = rows[limit - 1]
            out["cursor"] = encode_cursor([last["created_at"], last["id"]])
        self.send_json(out)


class AppHandler(AppsBase):
    @operation("One of your apps", responses={200: APP})
    async def get(self, app_id: str) -> None:
        self.send_json(app_json(await self.owned_app(app_id), self.default_limit))

    @operation("Rename an app or change its domain", body=obj({"name": NAME, "domain": DOMAIN}),
               responses={200: APP}, errors={409: "app_deactivated, domain_taken"})
    async def put(self, app_id: str) -> None:
        fields = self.name_and_domain(self.json_body(), required=False)
        await self.owned_app(app_id)
        async with self.app.db.transaction("apps.update") as tx:
            row = await apps_store.get_app_tx(tx, app_id)
            if not row["active"]:
                raise ApiError(409, "app_deactivated", "A deactivated app cannot be changed.")
            if "domain" in fields and await apps_store.active_domain_taken_tx(
                    tx, self.principal.did, fields["domain"], except_id=app_id):
                raise ApiError(409, "domain_taken", "You already have an active app for this domain.")
            await apps_store.update_app_tx(tx, app_id, self.app.clock.iso_now(), **fields)
            row = await apps_store.get_app_tx(tx, app_id)
        self.send_json(app_json(row, self.default_limit))

    @operation("Deactivate an app: its key stops working at once", responses={200: APP})
    async def delete(self, app_id: str) -> None:
        await self.owned_app(app_id)
        async with self.app.db.transaction("apps.deactivate") as tx:
            await apps_store.deactivate_tx(tx, app_id, self.app.clock.iso_now())
            row = await apps_store.get_app_tx(tx, app_id)
        self.send_json(app_json(row, self.default_limit))


class RotateKeyHandler(AppsBase):
    @operation("A new API key (shown once); the old one stops working at once",
               responses={200: APP_WITH_KEY}, errors={409: "app_deactivated"})
    async def post(self, app_id: str) -> None:
        await self.owned_app(app_id)
        key = new_key()
        async with self.app.db.transaction("apps.rotate_key") as tx:
            row = await apps_store.get_app_tx(tx, app_id)
            if not row["active"]:
                raise ApiError(409, "app_deactivated", "A deactivated app has no key to rotate.")
            await apps_store.set_key_hash_tx(tx, app_id, hash_key(key), self.app.clock.iso_now())
            row = await apps_store.get_app_tx(tx, app_id)
        self.send_json({**app_json(row, self.default_limit), "apiKey": key})


class RateLimitHandler(AppsBase):
    @operation("The app's rate limit", responses={200: RATE_LIMIT})
    async def get(self, app_id: str) -> None:
        row = await self.owned_app(app_id)
        self.send_json(app_json(row, self.default_limit)["rateLimit"])

    @operation("Lower the app's rate limit (both null: back to the default)", body=obj({
        "maxRequests": {"type": ["integer", "null"], "minimum": 1, "maximum": 1_000_000},
        "windowMs": {"type": ["integer", "null"], "minimum": 1000, "maximum": 86_400_000}}),
        responses={200: RATE_LIMIT}, errors={403: "limit_above_default"})
    async def put(self, app_id: str) -> None:
        """An owner may lower the app's limit (to protect their own quota), never raise it
        above the service default: raising is the operator's (`commonroom app-rate-limit`)."""
        body = self.json_body()
        await self.owned_app(app_id)
        reset = body.get("maxRequests") is None and body.get("windowMs") is None
        if reset:
            requests, window = None, None
        else:
            requests = validate.integer(body, "maxRequests", minimum=1, maximum=1_000_000)
            window_ms = validate.integer(body, "windowMs", minimum=1000, maximum=86_400_000)
            window = window_ms / 1000.0
            default_requests, default_window = self.default_limit
            if requests > default_requests or requests / window > default_requests / default_window:
                raise ApiError(403, "limit_above_default",
                               f"An app's own limit can only be lower than the service's "
                               f"({default_requests} per {default_window:g} s); ask the operator "
                               "to raise it.")
        async with self.app.db.transaction("apps.rate_limit") as tx:
            await apps_store.update_app_tx(tx, app_id, self.app.clock.iso_now(),
                                           rate_limit_requests=requests,
                                           rate_limit_window_seconds=window)
            row = await apps_store.get_app_tx(tx, app_id)
        self.send_json(app_json(row, self.default_limit)["rateLimit"])


class VerifyHandler(BaseHandler):
    auth = "app"

    @operation("Check an API key", responses={200: obj({
        "valid": {"type": "boolean", "enum": [True]},
        "app": obj({"appId": STRING, "name": STRING, "domain": STRING}, ["appId", "name", "domain"])},
        ["valid", "app"])})
    async def post(self) -> None:
        p = self.principal
        self.send_json({"valid": True, "app": {"appId": p.app_id, "name": p.extra["app_name"],
                                               "domain": p.extra["app_domain"]}})


def routes() -> list[tuple]:
    return [
        (r"/api/v1/apps/register", RegisterHandler),
        (r"/api/v1/apps/verify", VerifyHandler),
        (r"/api/v1/apps", ListHandler),
        (rf"/api/v1/apps/{APP_ID}", AppHandler),
        (rf"/api/v1/apps/{APP_ID}/rotate-key", RotateKeyHandler),
        (rf"/api/v1/apps/{APP_ID}/rate-limit", RateLimitHandler),
    ]
