"""The same webhook routes for the app's owner in a browser session:
/api/v1/apps/:appId/webhooks... (session cookie + x-csrf-token). Each is the API-key
route's handler with the app taken from the path, once the session's person is found to
own it; the rules are the same (plugins/webhooks/service.py)."""

from __future__ import annotations

from daemon.plugin import ApiError
from daemon.plugin.storage import AppsTable
from plugins.webhooks import handlers
from plugins.webhooks.handlers import WEBHOOK_ID

APP_ID = r"(app_[0-9a-f]{16})"


class OwnerMixin:
    """Session auth; the first path argument names the app, which must be the person's
    (anyone else's is unknown: 404, as on /api/v1/apps/:appId)."""

    auth = "session"
    #: The OpenAPI name of the path's first group, which the methods do not receive.
    path_prefix_names = ("appId",)
    _owner_app_id: str

    @property
    def app_id(self) -> str:
        return self._owner_app_id

    async def admit(self) -> None:
        await super().admit()  # type: ignore[misc]
        # Tornado calls the method with path_args after prepare: take the app id off the
        # front so the API-key handler's methods receive exactly their own arguments.
        app_id = self.path_args.pop(0)  # type: ignore[attr-defined]
        row = await AppsTable.get(self.app.db, app_id)  # type: ignore[attr-defined]
        if row is None or row["owner_did"] != self.principal.did:  # type: ignore[attr-defined]
            raise ApiError(404, "app_not_found", "No app with this id among yours.")
        self._owner_app_id = app_id


class OwnerWebhooksHandler(OwnerMixin, handlers.WebhooksHandler):
    pass


class OwnerWebhookHandler(OwnerMixin, handlers.WebhookHandler):
    pass


class OwnerRotateSecretHandler(OwnerMixin, handlers.RotateSecretHandler):
    pass


class OwnerDeliveriesHandler(OwnerMixin, handlers.DeliveriesHandler):
    pass


class OwnerRedeliverHandler(OwnerMixin, handlers.RedeliverHandler):
    pass


def routes() -> list[tuple]:
    base = rf"/api/v1/apps/{APP_ID}/webhooks"
    return [
        (base, OwnerWebhooksHandler),
        (rf"{base}/{WEBHOOK_ID}", OwnerWebhookHandler),
        (rf"{base}/{WEBHOOK_ID}/rotate-secret", OwnerRotateSecretHandler),
        (rf"{base}/{WEBHOOK_ID}/deliveries", OwnerDeliveriesHandler),
        (rf"{base}/{WEBHOOK_ID}/deliveries/(\d{{1,18}})/redeliver", OwnerRedeliverHandler),
    ]
