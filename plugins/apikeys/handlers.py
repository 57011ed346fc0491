"""Routes under /api/v1/apps: register, list, get, update, deactivate, rotate, verify,
and the app's custom rate limit. Only the owner (the session's DID) sees an app; for
anyone else it does not exist (404)."""

from __future__ import annotations

from typing import Any

from daemon.plugin import (BOOLEAN, BaseHandler, DATETIME, INTEGER, Row, STRING, encode_cursor, obj, operation,
                           page, validate)
from daemon.plugin.http import DATETIME_OR_NULL
from plugins.apikeys.service import Apps, app_json, apps_of

APP_ID = r"(app_[0-9a-f]{16})"


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
    """The rules are the apps service's (service.py; shared with the developer pages)."""

    auth = "session"

    @property
    def apps(self) -> Apps:
        return apps_of(self.app)

    @property
    def default_limit(self) -> tuple[int, float]:
        return self.apps.default_limit()

    async def owned_app(self, app_id: str) -> Row:
        return await self.apps.owned_app(self.principal.did, app_id)

    def name_and_domain(self, body: dict[str, Any], required: bool) -> dict[str, Any]:
        return self.apps.app_fields(body, required)


class RegisterHandler(AppsBase):
    @operation("Register an app: its API key is shown once", body=obj({"name": NAME, "domain": DOMAIN},
               ["name", "domain"]), responses={201: APP_WITH_KEY}, errors={409: "domain_taken, too_many_apps"})
    async def post(self) -> None:
        fields = self.name_and_domain(self.json_body(), required=True)
        row, key = await self.apps.register(self.principal.did, **fields)
        self.send_json({**app_json(row, self.default_limit), "apiKey": key}, 201)


class ListHandler(AppsBase):
    @operation("Your apps", paged=True, responses={200: page("apps", APP)})
    async def get(self) -> None:
        limit, after = self.page_params(2, "ss")
        rows = await self.apps.list_apps(self.principal.did, limit + 1,
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
        row = await self.apps.update(self.principal.did, app_id, **fields)
        self.send_json(app_json(row, self.default_limit))

    @operation("Deactivate an app: its key stops working at once", responses={200: APP})
    async def delete(self, app_id: str) -> None:
        row = await self.apps.deactivate(self.principal.did, app_id)
        self.send_json(app_json(row, self.default_limit))


class RotateKeyHandler(AppsBase):
    @operation("A new API key (shown once); the old one stops working at once",
               responses={200: APP_WITH_KEY}, errors={409: "app_deactivated"})
    async def post(self, app_id: str) -> None:
        row, key = await self.apps.rotate_key(self.principal.did, app_id)
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
        """An owner may lower the app's limit, never raise it (`Apps.check_rate_limit`);
        both fields null (or absent) go back to the service default."""
        body = self.json_body()
        await self.owned_app(app_id)
        requests: int | None = None
        window: float | None = None
        if not (body.get("maxRequests") is None and body.get("windowMs") is None):
            requests = validate.integer(body, "maxRequests", minimum=1, maximum=1_000_000)
            window = validate.integer(body, "windowMs", minimum=1000, maximum=86_400_000) / 1000.0
        row = await self.apps.set_rate_limit(self.principal.did, app_id, requests, window)
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
