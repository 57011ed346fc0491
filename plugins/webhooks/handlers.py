"""Routes under /api/v1/webhooks (API key). An app sees only its own webhooks; anyone
else's are unknown (404)."""

from __future__ import annotations

from typing import Any

from daemon.plugin import (BOOLEAN, BaseHandler, DATETIME, DID, INTEGER, NO_CONTENT, Row, STRING, STRING_OR_NULL,
                           arr, encode_cursor, nullable, obj, operation, page, query, validate)
from daemon.plugin.http import DATETIME_OR_NULL, enum_of
from plugins.webhooks import service
from plugins.webhooks.service import Webhooks, delivery_json, webhook_json, webhooks_of

WEBHOOK_ID = r"(wh_[0-9a-f]{16})"


EVENTS = enum_of("event_kinds", arr(STRING, minItems=1))  # every declared kind (app.event_kinds)
CONCURRENCY = {"type": "integer", "minimum": 1, "maximum": service.MAX_CONCURRENCY,
               "description": "deliveries in flight at once; 1 (the default) keeps strict event order"}
WEBHOOK = obj({"webhookId": STRING, "url": STRING, "events": arr(STRING), "communityDid": nullable(DID),
               "concurrency": CONCURRENCY, "active": BOOLEAN, "disabledReason": STRING_OR_NULL, "disabledAt": DATETIME_OR_NULL,
               "createdAt": DATETIME, "updatedAt": DATETIME, "secretRotatedAt": DATETIME_OR_NULL},
              ["webhookId", "url", "events", "communityDid", "active"])
SECRET = {"type": "string", "description": "the signing secret, shown once"}
DELIVERY_STATUS = {"type": "string", "enum": ["pending", "delivered", "failed"]}
DELIVERY = obj({"deliveryId": INTEGER, "eventId": STRING, "eventType": STRING_OR_NULL, "status": DELIVERY_STATUS,
                "attempts": INTEGER, "statusCode": {"type": ["integer", "null"]}, "error": STRING_OR_NULL,
                "createdAt": DATETIME, "firstAttemptAt": DATETIME_OR_NULL, "lastAttemptAt": DATETIME_OR_NULL,
                "nextAttemptAt": DATETIME_OR_NULL, "completedAt": DATETIME_OR_NULL,
                "redeliveryOf": {"type": ["integer", "null"]}}, ["deliveryId", "status", "attempts"])
URL = {"type": "string", "minLength": 1, "maxLength": 2048,
       "description": "http(s) URL of a public address (webhooks.allowed_targets widens this)"}


class WebhooksBase(BaseHandler):
    """The rules are the webhooks service's (service.py); these handlers read the request
    and write the answer. `app_id` is the app acting (here: the API key's app)."""

    auth = "app"

    @property
    def app_id(self) -> str:
        assert self.principal is not None and self.principal.app_id is not None
        return self.principal.app_id

    @property
    def hooks(self) -> Webhooks:
        """The webhooks service, whose rules these routes apply."""
        return webhooks_of(self.app)

    async def owned(self, webhook_id: str) -> Row:
        return await self.hooks.owned(self.app_id, webhook_id)


class WebhooksHandler(WebhooksBase):
    @operation("Subscribe to events (all this app's communities, or one)",
               body=obj({"url": URL, "events": EVENTS, "communityDid": nullable(DID),
                         "concurrency": CONCURRENCY}, ["url", "events"]),
               responses={201: obj({**WEBHOOK["properties"], "secret": SECRET}, [*WEBHOOK["required"], "secret"])},
               errors={404: "community_not_found", 409: "too_many_webhooks"})
    async def post(self) -> None:
        body = self.json_body()
        url = await self.hooks.checked_url(body, required=True)
        events = self.hooks.events(body, required=True)
        community_did = service.community_did(body)
        concurrency = service.concurrency(body)
        row, secret = await self.hooks.create(self.app_id, url=url, events=events,
                                           community_did=community_did, concurrency=concurrency)
        self.send_json({**webhook_json(row), "secret": secret}, 201)

    @operation("This app's webhooks", paged=True, responses={200: page("webhooks", WEBHOOK)})
    async def get(self) -> None:
        limit, after = self.page_params(2, "ss")
        rows = await self.hooks.list_webhooks(self.app_id, limit + 1,
                                           tuple(after) if after else None)
        out: dict[str, Any] = {"webhooks": [webhook_json(r) for r in rows[:limit]]}
        if len(rows) > limit:
            last = rows[limit - 1]
            out["cursor"] = encode_cursor([last["created_at"], last["id"]])
        self.send_json(out)


class WebhookHandler(WebhooksBase):
    @operation("A webhook, with its deliveries counted by status", responses={200: obj(
        {**WEBHOOK["properties"], "deliveryCounts": obj({"pending": INTEGER, "delivered": INTEGER, "failed": INTEGER})},
        [*WEBHOOK["required"], "deliveryCounts"])})
    async def get(self, webhook_id: str) -> None:
        row = await self.owned(webhook_id)
        out = webhook_json(row)
        out["deliveryCounts"] = await self.hooks.delivery_counts(webhook_id)
        self.send_json(out)

    @operation("Change a webhook (active: true turns a disabled one back on)",
               body=obj({"url": URL, "events": EVENTS, "communityDid": nullable(DID), "active": BOOLEAN,
                         "concurrency": CONCURRENCY}),
               responses={200: WEBHOOK})
    async def put(self, webhook_id: str) -> None:
        body = self.json_body()
        await self.owned(webhook_id)
        url = await self.hooks.checked_url(body, required=False)
        events = self.hooks.events(body, required=False)
        scope: dict[str, Any] = {}
        if "communityDid" in body:
            scope["community_did"] = service.community_did(body)
        active = validate.boolean(body, "active")
        concurrency = service.concurrency(body)
        row = await self.hooks.update(self.app_id, webhook_id, url=url, events=events,
                                   active=active, concurrency=concurrency, **scope)
        self.send_json(webhook_json(row))

    @operation("Delete a webhook and its pending deliveries", responses={204: NO_CONTENT})
    async def delete(self, webhook_id: str) -> None:
        await self.hooks.delete(self.app_id, webhook_id)
        self.set_status(204)
        self.finish()


class RotateSecretHandler(WebhooksBase):
    @operation("A new signing secret (the old one stays valid for webhooks.secret_overlap_seconds)",
               responses={200: obj({**WEBHOOK["properties"], "secret": SECRET,
                                    "previousSecretValidUntil": DATETIME_OR_NULL}, [*WEBHOOK["required"], "secret"])})
    async def post(self, webhook_id: str) -> None:
        row, secret, previous_until = await self.hooks.rotate_secret(self.app_id, webhook_id)
        out = webhook_json(row)
        out["secret"] = secret
        out["previousSecretValidUntil"] = previous_until
        self.send_json(out)


class DeliveriesHandler(WebhooksBase):
    @operation("A webhook's deliveries, newest first", paged=True,
               params=[query("status", DELIVERY_STATUS)], responses={200: page("deliveries", DELIVERY)})
    async def get(self, webhook_id: str) -> None:
        await self.owned(webhook_id)
        limit, after = self.page_params(1, "i")
        status = self.get_query_argument("status", None)
        before = int(after[0]) if after else None
        rows = await self.hooks.list_deliveries(self.app_id, webhook_id, limit + 1, before, status)
        out: dict[str, Any] = {"deliveries": [delivery_json(r) for r in rows[:limit]]}
        if len(rows) > limit:
            out["cursor"] = encode_cursor([rows[limit - 1]["id"]])
        self.send_json(out)


class RedeliverHandler(WebhooksBase):
    @operation("Send a delivery's event again, as a new delivery", responses={202: DELIVERY},
               errors={409: "event_gone, webhook_inactive"})
    async def post(self, webhook_id: str, delivery_id: str) -> None:
        row = await self.hooks.redeliver(self.app_id, webhook_id, int(delivery_id))
        self.send_json(delivery_json(row), 202)


def routes() -> list[tuple]:
    return [
        (r"/api/v1/webhooks", WebhooksHandler),
        (rf"/api/v1/webhooks/{WEBHOOK_ID}", WebhookHandler),
        (rf"/api/v1/webhooks/{WEBHOOK_ID}/rotate-secret", RotateSecretHandler),
        (rf"/api/v1/webhooks/{WEBHOOK_ID}/deliveries", DeliveriesHandler),
        (rf"/api/v1/webhooks/{WEBHOOK_ID}/deliveries/(\d{{1,18}})/redeliver", RedeliverHandler),
    ]
