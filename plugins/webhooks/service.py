"""The webhooks service (``app.webhooks``, the interface `daemon.plugin.services.WebhooksService`,
registered through `cr_services`): the webhook rules, in one place for the app's routes
(/api/v1/webhooks, API key), the owner's routes (/api/v1/apps/:appId/webhooks, browser
session) and the developer pages: an app sees only its own webhooks; targets pass the
outbound guard; a community scope must be one the app may see; at most
`webhooks.max_webhooks_per_app`; secrets are sealed at rest and shown once (on create and
rotate); redelivery only of kept events, to an active webhook. The object also holds the
plugin's running parts: the dispatcher (from `cr_startup`) and the metrics (from `cr_metrics`).

Other plugins call the service's methods and nothing else of this package."""

from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING, Any, cast

from daemon.plugin import ApiError, CommunitiesService, Row, Transaction, is_did, iso, validate
from daemon.plugin.security import TargetRefused
from plugins.webhooks import signing
from plugins.webhooks.delivery import (previous_secret_context, redeliver_tx, reschedule_pending_tx,
                                       secret_context)
from plugins.webhooks import store as store

if TYPE_CHECKING:
    from daemon.plugin import Application
    from plugins.webhooks.delivery import Dispatcher
    from plugins.webhooks.metrics import WebhookMetrics

DELIVERY_STATUSES = ("pending", "delivered", "failed")
#: Deliveries to one webhook in flight at once: 1 keeps strict event order (docs/webhooks.md).
MAX_CONCURRENCY = 32


def new_webhook_id() -> str:
    return "wh_" + secrets.token_hex(8)


def webhook_json(row: Row) -> dict[str, Any]:
    return {
        "webhookId": row["id"],
        "url": row["url"],
        "events": json.loads(row["events_json"] or "[]"),
        "communityDid": row["community_did"],
        "concurrency": row["concurrency"],
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


def community_did(body: dict[str, Any]) -> str | None:
    did = validate.string(body, "communityDid", required=False, min_len=1, max_len=2048)
    if did is not None and not is_did(did):
        raise validate.invalid("communityDid", "must be a DID")
    return did


def concurrency(body: dict[str, Any]) -> int | None:
    """`concurrency`: deliveries in flight at once, 1 (strict event order) to MAX_CONCURRENCY."""
    return validate.integer(body, "concurrency", required=False, minimum=1, maximum=MAX_CONCURRENCY)


async def _owned_tx(tx: Transaction, app_id: str, webhook_id: str) -> Row:
    row = await store.get_webhook(tx, webhook_id)
    if row is None or row["app_id"] != app_id:
        raise ApiError(404, "webhook_not_found", "No webhook with this id among your app's.")
    return row


_UNCHANGED: Any = object()


class Webhooks:
    """`daemon.plugin.services.WebhooksService`, bound to one application; routes and pages alike
    call it (`webhooks_of(app)` within this plugin)."""

    #: The highest `concurrency` a webhook may have.
    max_concurrency = MAX_CONCURRENCY

    def __init__(self, app: "Application") -> None:
        self.app = app
        #: The delivery loop, from start-up to shutdown (delivery.py).
        self.dispatcher: Dispatcher | None = None
        #: The plugin's metrics, once `/metrics` is set up (metrics.py).
        self.metrics: WebhookMetrics | None = None

    @property
    def running(self) -> "Dispatcher":
        """The running dispatcher (started by `cr_startup`)."""
        assert self.dispatcher is not None, "the webhooks plugin has not started"
        return self.dispatcher

    def settings(self) -> Any:
        """The `webhooks` config section (limits, secret overlap) as the dispatcher holds it."""
        return self.running.config

    webhook_json = staticmethod(webhook_json)
    delivery_json = staticmethod(delivery_json)

    # input (the request's body, checked as the routes and the pages take it)

    async def checked_url(self, body: dict[str, Any], required: bool) -> str | None:
        """`url`, refused (400 on the field) unless the outbound guard allows the target."""
        url = validate.string(body, "url", required=required, min_len=1, max_len=2048)
        if url is None:
            return None
        try:
            await self.running.guard.check(url)
        except TargetRefused as exc:
            raise validate.invalid("url", str(exc)) from None
        return url

    def events(self, body: dict[str, Any], required: bool) -> list[str] | None:
        """The kinds a webhook subscribes to: any the plugins declared (`app.event_kinds`)."""
        kinds = tuple(self.app.event_kinds)
        return validate.string_list(body, "events", required=required, allowed=kinds,
                                    min_items=1, max_items=len(kinds))

    # reads

    async def owned(self, app_id: str, webhook_id: str) -> Row:
        row = await store.get_webhook(self.app.db, webhook_id)
        if row is None or row["app_id"] != app_id:
            raise ApiError(404, "webhook_not_found", "No webhook with this id among your app's.")
        return row

    async def _check_community_tx(self, tx: Transaction, app_id: str, did: str | None) -> None:
        if did is None:
            return
        communities = self.app.service(CommunitiesService)
        if communities is None or not await communities.app_may_see(did, app_id, tx=tx):
            raise ApiError(404, "community_not_found", f"No community {did} here.")

    async def list_webhooks(self, app_id: str, limit: int,
                            after: tuple[Any, ...] | None) -> list[Row]:
        return await store.list_webhooks(self.app.db, app_id, limit, after)

    async def failing_count(self) -> int:
        return await store.failing_count(self.app.db)

    async def delivery_counts(self, webhook_id: str) -> dict[str, int]:
        return {"pending": 0, "delivered": 0, "failed": 0, **await store.delivery_counts(self.app.db, webhook_id)}

    async def list_deliveries(self, app_id: str, webhook_id: str, limit: int,
                              before: int | None, status: str | None) -> list[Row]:
        """The webhook's deliveries, newest first (`before`: a delivery id, keyset)."""
        await self.owned(app_id, webhook_id)
        if status not in (None, *DELIVERY_STATUSES):
            raise validate.invalid("status", "must be pending, delivered or failed")
        return await store.list_deliveries(self.app.db, webhook_id, limit, before, status)

    # changes

    async def create(self, app_id: str, *, url: str, events: list[str],
                     community_did: str | None, concurrency: int | None = None) -> tuple[Row, str]:
        """A new webhook and its signing secret (the only time the secret is shown).
        `concurrency` (default 1) is how many of its deliveries may be in flight at once."""
        webhook_id, secret, now = new_webhook_id(), signing.new_secret(), self.app.clock.iso_now()
        config = self.running.config
        async with self.app.db.transaction("webhooks.create") as tx:
            await self._check_community_tx(tx, app_id, community_did)
            if await store.count_for_app_tx(tx, app_id) >= config.max_webhooks_per_app:
                raise ApiError(409, "too_many_webhooks",
                               f"An app may have at most {config.max_webhooks_per_app} webhooks.")
            await store.insert_webhook_tx(
                tx, webhook_id=webhook_id, app_id=app_id, url=url, community_did=community_did,
                secret_sealed=self.app.secrets.seal(secret, secret_context(webhook_id)),
                events=events, now=now, concurrency=concurrency or 1)
            row = await store.get_webhook(tx, webhook_id)
        return row, secret

    async def update(self, app_id: str, webhook_id: str, *, url: str | None = None,
                     events: list[str] | None = None, community_did: Any = _UNCHANGED,
                     active: bool | None = None, concurrency: int | None = None) -> Row:
        """Change what is given: `url`, `events`, the community scope (`community_did`, None
        for every community the app may see), `active` (True re-enables a disabled webhook and
        reschedules its pending deliveries now), `concurrency`."""
        now = self.app.clock.iso_now()
        async with self.app.db.transaction("webhooks.update") as tx:
            row = await _owned_tx(tx, app_id, webhook_id)
            fields: dict[str, Any] = {}
            if url is not None:
                fields["url"] = url
            if concurrency is not None:
                fields["concurrency"] = concurrency
            if community_did is not _UNCHANGED:
                await self._check_community_tx(tx, app_id, community_did)
                fields["community_did"] = community_did
            if active is True and not row["active"]:
                fields.update(active=1, disabled_reason=None, disabled_at=None, failed_streak=0)
                await reschedule_pending_tx(tx, webhook_id, self.app.clock.time())
            elif active is False and row["active"]:
                fields.update(active=0, disabled_reason=None, disabled_at=None)
            await store.update_webhook_tx(tx, webhook_id, now, **fields)
            if events is not None:
                await store.set_events_tx(tx, webhook_id, events)
            row = await store.get_webhook(tx, webhook_id)
        self.running.webhook_changed(webhook_id)
        return row

    async def delete(self, app_id: str, webhook_id: str) -> None:
        async with self.app.db.transaction("webhooks.delete") as tx:
            await _owned_tx(tx, app_id, webhook_id)
            await store.delete_webhook_tx(tx, webhook_id)
        self.running.webhook_changed(webhook_id)

    async def rotate_secret(self, app_id: str, webhook_id: str) -> tuple[Row, str, str | None]:
        """A new signing secret; the old one still signs (as a second signature) for
        `webhooks.secret_overlap_seconds`. Returns the row, the new secret and until when the
        old one stays valid (None without overlap)."""
        secret, now = signing.new_secret(), self.app.clock.iso_now()
        overlap = self.running.config.secret_overlap_seconds
        async with self.app.db.transaction("webhooks.rotate_secret") as tx:
            row = await _owned_tx(tx, app_id, webhook_id)
            old = self.app.secrets.open(row["secret_sealed"], secret_context(webhook_id))
            await store.update_webhook_tx(
                tx, webhook_id, now,
                secret_sealed=self.app.secrets.seal(secret, secret_context(webhook_id)),
                previous_secret_sealed=(self.app.secrets.seal(old, previous_secret_context(webhook_id))
                                        if overlap > 0 else None),
                previous_secret_until=self.app.clock.time() + overlap if overlap > 0 else None,
                secret_rotated_at=now)
            row = await store.get_webhook(tx, webhook_id)
        self.running.webhook_changed(webhook_id)
        return row, secret, iso(self.app.clock.time() + overlap) if overlap > 0 else None

    async def delivery_detail(self, app_id: str, webhook_id: str, delivery_id: int) -> dict[str, Any]:
        """One delivery of the app's webhook as `delivery_json`, plus what was sent
        (`payload`: the exact JSON body, or None once the event is no longer kept) and what the
        receiver answered to the last attempt (`responseBody`: its first 2 KB)."""
        from plugins.webhooks.delivery import payload_body
        await self.owned(app_id, webhook_id)
        row = await store.get_delivery(self.app.db, webhook_id, delivery_id)
        if row is None:
            raise ApiError(404, "delivery_not_found", "No delivery with this id for this webhook.")
        full = await store.delivery_with_event(self.app.db, webhook_id, delivery_id)
        payload = payload_body(full, self.app.event_kinds).decode() if full is not None else None
        return {**delivery_json(row), "payload": payload, "responseBody": row["response_body"]}

    async def redeliver(self, app_id: str, webhook_id: str, delivery_id: int) -> Row:
        """Queue the event of a delivery again (a new delivery); returns the new one."""
        async with self.app.db.transaction("webhooks.redeliver") as tx:
            hook = await _owned_tx(tx, app_id, webhook_id)
            delivery = await store.get_delivery(tx, webhook_id, delivery_id)
            if delivery is None:
                raise ApiError(404, "delivery_not_found", "No delivery with this id for this webhook.")
            if delivery["event_type"] is None:
                raise ApiError(409, "event_gone", "The event of this delivery is no longer kept.")
            if not hook["active"]:
                raise ApiError(409, "webhook_inactive",
                               "The webhook is not active; set active to true first.")
            new_id = await redeliver_tx(tx, delivery, self.app.clock.time(), self.app.clock.iso_now())
            row = await store.get_delivery(tx, webhook_id, new_id)
        self.running.notify([webhook_id])
        return row


def webhooks_of(app: "Application") -> Webhooks:
    """This plugin's own service object (its private parts included)."""
    return cast(Webhooks, app.webhooks)
