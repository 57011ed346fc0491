"""Routes under /api/v1/webhooks (API key). An app sees only its own webhooks; anyone
else's are unknown (404)."""

from __future__ import annotations

from typing import Any

from daemon import validate
from daemon.http import BaseHandler, encode_cursor
from plugins.webhooks import service
from plugins.webhooks.service import delivery_json, webhook_json
from store.db import Row

WEBHOOK_ID = r"(wh_[0-9a-f]{16})"


class WebhooksBase(BaseHandler):
    """The rules live in plugins/webhooks/service.py; these handlers read the request
    and write the answer. `app_id` is the app acting (here: the API key's app)."""

    auth = "app"

    @property
    def app_id(self) -> str:
        assert self.principal is not None and self.principal.app_id is not None
        return self.principal.app_id

    async def owned(self, webhook_id: str) -> Row:
        return await service.owned(self.app, self.app_id, webhook_id)


class WebhooksHandler(WebhooksBase):
    async def post(self) -> None:
        body = self.json_body()
        url = await service.checked_url(self.app, body, required=True)
        events = service.events(body, required=True)
        community_did = service.community_did(body)
        row, secret = await service.create(self.app, self.app_id, url=url, events=events,
                                           community_did=community_did)
        self.send_json({**webhook_json(row), "secret": secret}, 201)

    async def get(self) -> None:
        limit, after = self.page_params(2, "ss")
        rows = await service.list_webhooks(self.app, self.app_id, limit + 1,
                                           tuple(after) if after else None)
        out: dict[str, Any] = {"webhooks": [webhook_json(r) for r in rows[:limit]]}
        if len(rows) > limit:
            last = rows[limit - 1]
            out["cursor"] = encode_cursor([last["created_at"], last["id"]])
        self.send_json(out)


class WebhookHandler(WebhooksBase):
    async def get(self, webhook_id: str) -> None:
        row = await self.owned(webhook_id)
        out = webhook_json(row)
        out["deliveryCounts"] = await service.delivery_counts(self.app, webhook_id)
        self.send_json(out)

    async def put(self, webhook_id: str) -> None:
        body = self.json_body()
        await self.owned(webhook_id)
        url = await service.checked_url(self.app, body, required=False)
        events = service.events(body, required=False)
        scope: dict[str, Any] = {}
        if "communityDid" in body:
            scope["community_did"] = service.community_did(body)
        active = validate.boolean(body, "active")
        row = await service.update(self.app, self.app_id, webhook_id, url=url, events=events,
                                   active=active, **scope)
        self.send_json(webhook_json(row))

    async def delete(self, webhook_id: str) -> None:
        await service.delete(self.app, self.app_id, webhook_id)
        self.set_status(204)
        self.finish()


class RotateSecretHandler(WebhooksBase):
    async def post(self, webhook_id: str) -> None:
        row, secret, previous_until = await service.rotate_secret(self.app, self.app_id, webhook_id)
        out = webhook_json(row)
        out["secret"] = secret
        out["previousSecretValidUntil"] = previous_until
        self.send_json(out)


class DeliveriesHandler(WebhooksBase):
    async def get(self, webhook_id: str) -> None:
        await self.owned(webhook_id)
        limit, after = self.page_params(1, "i")
        status = self.get_query_argument("status", None)
        before = int(after[0]) if after else None
        rows = await service.list_deliveries(self.app, self.app_id, webhook_id, limit + 1, before, status)
        out: dict[str, Any] = {"deliveries": [delivery_json(r) for r in rows[:limit]]}
        if len(rows) > limit:
            out["cursor"] = encode_cursor([rows[limit - 1]["id"]])
        self.send_json(out)


class RedeliverHandler(WebhooksBase):
    async def post(self, webhook_id: str, delivery_id: str) -> None:
        row = await service.redeliver(self.app, self.app_id, webhook_id, int(delivery_id))
        self.send_json(delivery_json(row), 202)


def routes() -> list[tuple]:
    return [
        (r"/api/v1/webhooks", WebhooksHandler),
        (rf"/api/v1/webhooks/{WEBHOOK_ID}", WebhookHandler),
        (rf"/api/v1/webhooks/{WEBHOOK_ID}/rotate-secret", RotateSecretHandler),
        (rf"/api/v1/webhooks/{WEBHOOK_ID}/deliveries", DeliveriesHandler),
        (rf"/api/v1/webhooks/{WEBHOOK_ID}/deliveries/(\d{{1,18}})/redeliver", RedeliverHandler),
    ]
