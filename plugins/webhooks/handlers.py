"""Routes under /api/v1/webhooks (API key). An app sees only its own webhooks; anyone
else's are unknown (404)."""

from __future__ import annotations

import json
import secrets
from typing import Any

from daemon import validate
from daemon.atproto.syntax import is_did
from daemon.clock import iso
from daemon.events import EVENT_TYPES
from daemon.http import ApiError, BaseHandler, encode_cursor
from daemon.netguard import TargetRefused
from daemon.access import app_can_see_tx
from daemon.openapi import (BOOLEAN, DATETIME, DATETIME_OR_NULL, DID, INTEGER, NO_CONTENT, STRING,
                            STRING_OR_NULL, arr, nullable, obj, operation, page, query)
from plugins.webhooks import signing
from plugins.webhooks.delivery import (dispatcher, previous_secret_context, secret_context)
from store import webhooks as store
from store.db import Row, Transaction

WEBHOOK_ID = r"(wh_[0-9a-f]{16})"


def new_webhook_id() -> str:
    return "wh_" + secrets.token_hex(8)


def webhook_json(row: Row) -> dict[str, Any]:
    return {
        "webhookId": row["id"],
        "url": row["url"],
        "events": json.loads(row["events_json"] or "[]"),
        "communityDid": row["community_did"],
        "active": bool(row["active"]),
        "disabledReason": row["disabled_reason"],
        "disabledAt": row["disabled_at"],
        "createdAt": row["created_at"],
        "updatedAt": row["updated_at"],
        "secretRotatedAt": row["secret_rotated_at"],
    }


def delivery_json(row: Row) -> dict[str, Any]:
    return {
        "deliveryId": row["id"],
        "eventId": row["event_id"],
        "eventType": row["event_type"],
        "status": row["status"],
        "attempts": row["attempts"],
        "statusCode": row["status_code"],
        "error": row["error"],
        "createdAt": row["created_at"],
        "firstAttemptAt": row["first_attempt_at"],
        "lastAttemptAt": row["last_attempt_at"],
        "nextAttemptAt": iso(row["next_attempt_at"]) if row["status"] == "pending" else None,
        "completedAt": row["completed_at"],
        "redeliveryOf": row["redelivery_of"],
    }


EVENTS = arr({"type": "string", "enum": list(EVENT_TYPES)}, minItems=1, maxItems=len(EVENT_TYPES))
WEBHOOK = obj({"webhookId": STRING, "url": STRING, "events": arr(STRING), "communityDid": nullable(DID),
               "active": BOOLEAN, "disabledReason": STRING_OR_NULL, "disabledAt": DATETIME_OR_NULL,
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
    auth = "app"

    @property
    def app_id(self) -> str:
        assert self.principal is not None and self.principal.app_id is not None
        return self.principal.app_id

    async def owned(self, webhook_id: str) -> Row:
        row = await store.get_webhook(self.app.db, webhook_id)
        if row is None or row["app_id"] != self.app_id:
            raise ApiError(404, "webhook_not_found", "No webhook with this id among your app's.")
        return row

    async def owned_tx(self, tx: Transaction, webhook_id: str) -> Row:
        row = await store.get_webhook_tx(tx, webhook_id)
        if row is None or row["app_id"] != self.app_id:
            raise ApiError(404, "webhook_not_found", "No webhook with this id among your app's.")
        return row

    async def checked_url(self, body: dict[str, Any], required: bool) -> str | None:
        url = validate.string(body, "url", required=required, min_len=1, max_len=2048)
        if url is None:
            return None
        try:
            await dispatcher(self.app).guard.check(url)
        except TargetRefused as exc:
            raise validate.invalid("url", str(exc)) from None
        return url

    def events(self, body: dict[str, Any], required: bool) -> list[str] | None:
        return validate.string_list(body, "events", required=required, allowed=EVENT_TYPES,
                                    min_items=1, max_items=len(EVENT_TYPES))

    def community_did(self, body: dict[str, Any]) -> str | None:
        did = validate.string(body, "communityDid", required=False, min_len=1, max_len=2048)
        if did is not None and not is_did(did):
            raise validate.invalid("communityDid", "must be a DID")
        return did

    async def check_community_tx(self, tx: Transaction, did: str | None) -> None:
        if did is not None and not await app_can_see_tx(tx, did, self.app_id):
            raise ApiError(404, "community_not_found", f"No community {did} here.")


class WebhooksHandler(WebhooksBase):
    @operation("Subscribe to events (all this app's communities, or one)",
               body=obj({"url": URL, "events": EVENTS, "communityDid": nullable(DID)}, ["url", "events"]),
               responses={201: obj({**WEBHOOK["properties"], "secret": SECRET}, [*WEBHOOK["required"], "secret"])},
               errors={404: "community_not_found", 409: "too_many_webhooks"})
    async def post(self) -> None:
        body = self.json_body()
        url = await self.checked_url(body, required=True)
        events = self.events(body, required=True)
        community_did = self.community_did(body)
        webhook_id, secret, now = new_webhook_id(), signing.new_secret(), self.app.clock.iso_now()
        config = dispatcher(self.app).config
        async with self.app.db.transaction("webhooks.create") as tx:
            await self.check_community_tx(tx, community_did)
            if await store.count_for_app_tx(tx, self.app_id) >= config.max_webhooks_per_app:
                raise ApiError(409, "too_many_webhooks",
                               f"An app may have at most {config.max_webhooks_per_app} webhooks.")
            await store.insert_webhook_tx(
                tx, webhook_id=webhook_id, app_id=self.app_id, url=url, community_did=community_did,
                secret_sealed=self.app.secrets.seal(secret, secret_context(webhook_id)),
                events=events, now=now)
            row = await store.get_webhook_tx(tx, webhook_id)
        self.send_json({**webhook_json(row), "secret": secret}, 201)

    @operation("This app's webhooks", paged=True, responses={200: page("webhooks", WEBHOOK)})
    async def get(self) -> None:
        limit, after = self.page_params(2, "ss")
        rows = await store.list_webhooks(self.app.db, self.app_id, limit + 1,
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
        out["deliveryCounts"] = {"pending": 0, "delivered": 0, "failed": 0,
                                 **await store.delivery_counts(self.app.db, webhook_id)}
        self.send_json(out)

    @operation("Change a webhook (active: true turns a disabled one back on)",
               body=obj({"url": URL, "events": EVENTS, "communityDid": nullable(DID), "active": BOOLEAN}),
               responses={200: WEBHOOK})
    async def put(self, webhook_id: str) -> None:
        body = self.json_body()
        await self.owned(webhook_id)
        url = await self.checked_url(body, required=False)
        events = self.events(body, required=False)
        scope_given = "communityDid" in body
        community_did = self.community_did(body)
        active = validate.boolean(body, "active")
        now = self.app.clock.iso_now()
        async with self.app.db.transaction("webhooks.update") as tx:
            row = await self.owned_tx(tx, webhook_id)
            fields: dict[str, Any] = {}
            if url is not None:
                fields["url"] = url
            if scope_given:
                await self.check_community_tx(tx, community_did)
                fields["community_did"] = community_did
            if active is True and not row["active"]:
                fields.update(active=1, disabled_reason=None, disabled_at=None, failed_streak=0)
                await store.reschedule_pending_tx(tx, webhook_id, self.app.clock.time())
            elif active is False and row["active"]:
                fields.update(active=0, disabled_reason=None, disabled_at=None)
            await store.update_webhook_tx(tx, webhook_id, now, **fields)
            if events is not None:
                await store.set_events_tx(tx, webhook_id, events)
            row = await store.get_webhook_tx(tx, webhook_id)
        dispatcher(self.app).webhook_changed(webhook_id)
        self.send_json(webhook_json(row))

    @operation("Delete a webhook and its pending deliveries", responses={204: NO_CONTENT})
    async def delete(self, webhook_id: str) -> None:
        async with self.app.db.transaction("webhooks.delete") as tx:
            await self.owned_tx(tx, webhook_id)
            await store.delete_webhook_tx(tx, webhook_id)
        dispatcher(self.app).webhook_changed(webhook_id)
        self.set_status(204)
        self.finish()


class RotateSecretHandler(WebhooksBase):
    @operation("A new signing secret (the old one stays valid for webhooks.secret_overlap_seconds)",
               responses={200: obj({**WEBHOOK["properties"], "secret": SECRET,
                                    "previousSecretValidUntil": DATETIME_OR_NULL}, [*WEBHOOK["required"], "secret"])})
    async def post(self, webhook_id: str) -> None:
        secret, now = signing.new_secret(), self.app.clock.iso_now()
        overlap = dispatcher(self.app).config.secret_overlap_seconds
        async with self.app.db.transaction("webhooks.rotate_secret") as tx:
            row = await self.owned_tx(tx, webhook_id)
            old = self.app.secrets.open(row["secret_sealed"], secret_context(webhook_id))
            await store.update_webhook_tx(
                tx, webhook_id, now,
                secret_sealed=self.app.secrets.seal(secret, secret_context(webhook_id)),
                previous_secret_sealed=(self.app.secrets.seal(old, previous_secret_context(webhook_id))
                                        if overlap > 0 else None),
                previous_secret_until=self.app.clock.time() + overlap if overlap > 0 else None,
                secret_rotated_at=now)
            row = await store.get_webhook_tx(tx, webhook_id)
        dispatcher(self.app).webhook_changed(webhook_id)
        out = webhook_json(row)
        out["secret"] = secret
        out["previousSecretValidUntil"] = iso(self.app.clock.time() + overlap) if overlap > 0 else None
        self.send_json(out)


class DeliveriesHandler(WebhooksBase):
    @operation("A webhook's deliveries, newest first", paged=True,
               params=[query("status", DELIVERY_STATUS)], responses={200: page("deliveries", DELIVERY)})
    async def get(self, webhook_id: str) -> None:
        await self.owned(webhook_id)
        limit, after = self.page_params(1, "i")
        status = self.get_query_argument("status", None)
        if status not in (None, "pending", "delivered", "failed"):
            raise validate.invalid("status", "must be pending, delivered or failed")
        before = int(after[0]) if after else None
        rows = await store.list_deliveries(self.app.db, webhook_id, limit + 1, before, status)
        out: dict[str, Any] = {"deliveries": [delivery_json(r) for r in rows[:limit]]}
        if len(rows) > limit:
            out["cursor"] = encode_cursor([rows[limit - 1]["id"]])
        self.send_json(out)


class RedeliverHandler(WebhooksBase):
    @operation("Send a delivery's event again, as a new delivery", responses={202: DELIVERY},
               errors={409: "event_gone, webhook_inactive"})
    async def post(self, webhook_id: str, delivery_id: str) -> None:
        async with self.app.db.transaction("webhooks.redeliver") as tx:
            hook = await self.owned_tx(tx, webhook_id)
            delivery = await store.get_delivery_tx(tx, webhook_id, int(delivery_id))
            if delivery is None:
                raise ApiError(404, "delivery_not_found", "No delivery with this id for this webhook.")
            if delivery["event_type"] is None:
                raise ApiError(409, "event_gone", "The event of this delivery is no longer kept.")
            if not hook["active"]:
                raise ApiError(409, "webhook_inactive",
                               "The webhook is not active; set active to true first.")
            new_id = await store.redeliver_tx(tx, delivery, self.app.clock.time(), self.app.clock.iso_now())
            row = await store.get_delivery_tx(tx, webhook_id, new_id)
        dispatcher(self.app).notify([webhook_id])
        self.send_json(delivery_json(row), 202)


def routes() -> list[tuple]:
    return [
        (r"/api/v1/webhooks", WebhooksHandler),
        (rf"/api/v1/webhooks/{WEBHOOK_ID}", WebhookHandler),
        (rf"/api/v1/webhooks/{WEBHOOK_ID}/rotate-secret", RotateSecretHandler),
        (rf"/api/v1/webhooks/{WEBHOOK_ID}/deliveries", DeliveriesHandler),
        (rf"/api/v1/webhooks/{WEBHOOK_ID}/deliveries/(\d{{1,18}})/redeliver", RedeliverHandler),
    ]
